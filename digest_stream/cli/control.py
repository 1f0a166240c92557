"""`digest-stream flush` and `cancel`: control messages, in order with a timeline's events."""

from __future__ import annotations

from typing import Any

import click

from digest_stream.cli.common import load_settings, settings_options


def _send(timeline: str, flags: dict[str, Any], record: str | None, flush: bool) -> None:
    from digest_stream.client import EventProducer

    settings = load_settings(flags)
    # Control messages are never registry-framed (the ingest tells them apart by their first
    # byte before any schema lookup), so no registry client is needed here.
    overrides: dict[str, Any] = dict(settings.kafka_config)
    with EventProducer(
        settings.kafka_bootstrap_servers, topic=settings.events_topic, **overrides
    ) as producer:
        if flush:
            producer.flush(timeline)
        else:
            producer.cancel(timeline, record)


@click.command()
@click.argument("timeline")
@settings_options
def flush(timeline: str, **flags: Any) -> None:
    """Deliver TIMELINE's pending records now (after the events sent before this)."""
    _send(timeline, flags, None, flush=True)
    click.echo(f"flush of timeline {timeline} sent; its pending records go out as one digest")


@click.command()
@click.argument("timeline")
@click.option("--record", default=None, help="Cancel only this pending record (default: all).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@settings_options
def cancel(timeline: str, record: str | None, yes: bool, **flags: Any) -> None:
    """Remove TIMELINE's pending records (or one), after the events sent before this."""
    what = f"record {record} of timeline {timeline}" if record else f"timeline {timeline}"
    if not yes:
        click.confirm(f"Cancel the pending records of {what}? They are never delivered", abort=True)
    _send(timeline, flags, record, flush=False)
    click.echo(f"cancel of {what} sent")
