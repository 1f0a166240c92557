"""`digest-stream flush` and `cancel`: control messages, in order with a timeline's events.

A control acts only on the input partition it is read from, and a timeline's state lives on
the partition its events arrived on, which the producers' partitioner chose. So the control
goes to the partition(s) that hold the timeline's state in the store, whatever partitioner put
it there; with no state anywhere there is nothing to act on, and the command says so and sends
nothing (exit 1) instead of printing a success that changes nothing.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from digest_stream.cli.common import event_partitions, load_settings, settings_options
from digest_stream.ops.failures import one_line
from digest_stream.settings import Settings, env_name
from digest_stream.store.errors import BackendError, LibraryVersionMismatch
from digest_stream.wire.partitioner import partition_for

_PARTITION_HELP = (
    "Send to this input partition without looking for the timeline's state "
    "(default: the partitions holding it)."
)


def _targets(command: str, timeline: str, settings: Settings, partition: int | None) -> list[int]:
    """The partitions to send the control to; exits 1 when no partition holds the timeline."""
    from digest_stream.ops.admin import find_timeline
    from digest_stream.store import connect

    partitions = event_partitions(settings)
    if partition is not None:
        if partition not in partitions:
            click.echo(
                f"digest-stream {command}: topic {settings.events_topic} has no partition "
                f"{partition} (it has {len(partitions)})",
                err=True,
            )
            sys.exit(1)
        return [partition]
    try:
        found = sorted(find_timeline(connect(settings), partitions, timeline))
    except (BackendError, LibraryVersionMismatch) as exc:
        click.echo(
            f"digest-stream {command}: cannot look up timeline {timeline} in the store "
            f"({one_line(exc, settings)}); nothing sent (--partition sends without looking)",
            err=True,
        )
        sys.exit(1)
    chosen = partition_for(settings.partitioner, timeline.encode("utf-8"), len(partitions))
    if not found:
        click.echo(
            f"digest-stream {command}: no partition of {settings.events_topic} holds state for "
            f"timeline {timeline} (no pending records, no open digest, no cool-down): nothing "
            f"to {command}, nothing sent. If its events were just produced and are not stored "
            f"yet, run this again once `digest-stream inspect {timeline}` shows them, or pass "
            f"--partition (partitioner={settings.partitioner} puts it on {chosen}).",
            err=True,
        )
        sys.exit(1)
    if found != [chosen]:
        # The events came from a producer partitioning otherwise (or the topic grew):
        # controls sent by EventProducer with this setting would miss them.
        click.echo(
            f"note: timeline {timeline} has state on partition "
            f"{', '.join(str(p) for p in found)}, but {env_name('partitioner')}="
            f"{settings.partitioner} puts it on partition {chosen}: its events' producer "
            "uses another partitioner (librdkafka's default is consistent_random); set "
            f"{env_name('partitioner')} to theirs. Sending to where its state is.",
            err=True,
        )
    return found


def _send(
    command: str, timeline: str, settings: Settings, record: str | None, targets: list[int]
) -> None:
    """Send the control to every target partition."""
    from digest_stream.client import EventProducer

    # Control messages are never registry-framed (the ingest tells them apart by their first
    # byte before any schema lookup), so no registry client is needed here.
    overrides: dict[str, Any] = dict(settings.kafka_config)
    with EventProducer(
        settings.kafka_bootstrap_servers,
        topic=settings.events_topic,
        partitioner=settings.partitioner,
        **overrides,
    ) as producer:
        for target in targets:
            if command == "flush":
                producer.flush_timeline(timeline, partition=target)
            else:
                producer.cancel(timeline, record, partition=target)


def _where(targets: list[int]) -> str:
    return ("partition " if len(targets) == 1 else "partitions ") + ", ".join(map(str, targets))


@click.command()
@click.argument("timeline")
@click.option("--partition", type=int, default=None, help=_PARTITION_HELP)
@settings_options
def flush(timeline: str, partition: int | None, **flags: Any) -> None:
    """Deliver TIMELINE's pending records now (after the events sent before this)."""
    settings = load_settings(flags)
    targets = _targets("flush", timeline, settings, partition)
    _send("flush", timeline, settings, None, targets)
    click.echo(
        f"flush of timeline {timeline} sent to {_where(targets)}; "
        "its pending records go out as one digest"
    )


@click.command()
@click.argument("timeline")
@click.option("--record", default=None, help="Cancel only this pending record (default: all).")
@click.option("--partition", type=int, default=None, help=_PARTITION_HELP)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@settings_options
def cancel(
    timeline: str, record: str | None, partition: int | None, yes: bool, **flags: Any
) -> None:
    """Remove TIMELINE's pending records (or one), after the events sent before this."""
    what = f"record {record} of timeline {timeline}" if record else f"timeline {timeline}"
    settings = load_settings(flags)
    # Looked up first: asking to confirm a cancel that would find nothing helps nobody.
    targets = _targets("cancel", timeline, settings, partition)
    if not yes:
        click.confirm(f"Cancel the pending records of {what}? They are never delivered", abort=True)
    _send("cancel", timeline, settings, record, targets)
    click.echo(f"cancel of {what} sent to {_where(targets)}")
