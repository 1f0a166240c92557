"""Operators' commands on the store: inspect, stats, delete a timeline, replay a partition."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import click

from digest_stream.cli.common import (
    check_kafka,
    event_partitions,
    load_settings,
    settings_options,
    when,
)
from digest_stream.settings import env_name
from digest_stream.store.policy import describe

if TYPE_CHECKING:  # the store (and redis-py) loads only for the commands that use it
    from digest_stream.store.base import DigestStore, TimelineInfo


def _find(
    timeline: str, partition: int | None, flags: dict[str, Any]
) -> tuple[DigestStore, dict[int, TimelineInfo]]:
    """The store and the timeline's state per input partition (all partitions unless given)."""
    from digest_stream.ops.admin import find_timeline
    from digest_stream.store import connect

    settings = load_settings(flags)
    store = connect(settings)
    candidates = [partition] if partition is not None else event_partitions(settings)
    return store, find_timeline(store, candidates, timeline)


@click.command()
@click.argument("timeline")
@click.option("--partition", type=int, default=None, help="Input partition (default: search).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@settings_options
def delete(timeline: str, partition: int | None, yes: bool, **flags: Any) -> None:
    """Delete one timeline: its pending records, open digest and schedule entries."""
    store, found = _find(timeline, partition, flags)
    if not found:
        click.echo(f"timeline {timeline} has no state (absent); nothing to delete")
        return
    for p, info in found.items():
        click.echo(
            f"timeline {timeline}: partition {p}, {info.state}, {info.pending} pending records, "
            f"open digest {info.open_digest or '-'} ({info.open_records} records)"
        )
    if not yes:
        click.confirm(f"Delete timeline {timeline}? Its records are lost", abort=True)
    for p in found:
        store.delete(p, timeline)
    click.echo(f"deleted timeline {timeline}")


@click.command()
@click.option("--partition", type=int, required=True, help="Input partition to replay.")
@click.option("--from", "from_offset", type=int, required=True, help="First offset to apply.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@settings_options
def replay(partition: int, from_offset: int, yes: bool, **flags: Any) -> None:
    """Replay an input partition from an offset: reset the fence and the group's offset.

    The ingest group must be inactive (every instance stopped).
    """
    from digest_stream.ops.admin import AdminError, apply_replay, plan_replay
    from digest_stream.store import connect

    settings = load_settings(flags)
    store = connect(settings)
    check_kafka(
        settings,
        topics=(settings.events_topic,),
        groups={settings.group_id: env_name("group_id")},
    )
    try:
        plan = plan_replay(settings, partition, from_offset, store)
        click.echo(plan.describe())
        if not yes:
            click.confirm("Go ahead?", abort=True)
        apply_replay(settings, plan, store)
    except AdminError as exc:
        click.echo(f"digest-stream replay: {exc}", err=True)
        sys.exit(1)
    click.echo(f"partition {partition} replays from offset {from_offset} at the next start")


@click.command()
@click.argument("timeline")
@click.option("--partition", type=int, default=None, help="Input partition (default: search).")
@settings_options
def inspect(timeline: str, partition: int | None, **flags: Any) -> None:
    """Show one timeline's state, due time, pending records and open digest."""
    _store, found = _find(timeline, partition, flags)
    policy = load_settings(flags).resolver()(timeline)
    click.echo(f"policy         {describe(policy)}")
    if not found:
        click.echo(f"timeline {timeline} has no state (absent)")
    # Normally one partition; more after the events topic was repartitioned.
    for p, info in found.items():
        click.echo(f"timeline       {info.timeline}")
        click.echo(f"partition      {p}")
        click.echo(f"state          {info.state}")
        # READY: the time it became ready; WAITING: when it becomes due; COOLING: when its
        # cool-down ends (nothing pending: an event before then waits for it, after is immediate).
        # Quiet hours are no reason of their own: they hold the reason's due time to their end.
        held = info.due is not None and policy.held_until(info.due)
        quiet = f", held by quiet hours {policy.quiet_hours} {policy.timezone}" if held else ""
        why = f" ({info.reason}{quiet})" if info.reason else ""
        click.echo(f"due            {when(info.due)}{why}")
        click.echo(f"last delivery  {when(info.last_delivery)}")
        click.echo(f"pending        {info.pending} records")
        click.echo(f"open digest    {info.open_digest or '-'} ({info.open_records} records)")
        click.echo(f"dropped        {info.dropped}")
        if info.snoozed_until is not None and info.snoozed_until > time.time():
            click.echo(f"snoozed until  {when(info.snoozed_until)} (nothing goes out before)")


@click.command()
@settings_options
def stats(**flags: Any) -> None:
    """Per input partition: waiting and ready timelines, oldest due time, fence."""
    from digest_stream.store import connect

    settings = load_settings(flags)
    store = connect(settings)
    partitions = event_partitions(settings)
    now = time.time()
    click.echo(f"{'partition':>9} {'waiting':>8} {'ready':>6} {'oldest due':>26} "
               f"{'overdue':>9} {'fence':>10}")  # fmt: skip
    totals = [0, 0]
    for p in partitions:
        s = store.stats(p)
        totals[0] += s.waiting
        totals[1] += s.ready
        overdue = f"{max(0.0, now - s.oldest_due):.1f}s" if s.oldest_due is not None else "-"
        fence = "-" if s.applied_offset is None else str(s.applied_offset)
        click.echo(f"{p:>9} {s.waiting:>8} {s.ready:>6} {when(s.oldest_due):>26} "
                   f"{overdue:>9} {fence:>10}")  # fmt: skip
    click.echo(f"{'total':>9} {totals[0]:>8} {totals[1]:>6}")
