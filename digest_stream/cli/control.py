"""`digest-stream flush` and `cancel`: control messages, in order with a timeline's events,
one command per control message (``control_command``), built from ``vocabulary.CONTROL_SPECS``.

A control acts only on the input partition it is read from, and a timeline's state lives on
the partition its events arrived on, which the producers' partitioner chose. So the control
goes to the partition(s) that hold the timeline's state in the store, whatever partitioner put
it there; with no state anywhere there is nothing to act on, and the command says so and sends
nothing (exit 1) instead of printing a success that changes nothing.
"""

from __future__ import annotations

import re
import sys
import time
from datetime import UTC, datetime
from typing import Any

import click

from digest_stream.cli.common import event_partitions, load_settings, settings_options
from digest_stream.ops.failures import one_line
from digest_stream.settings import Settings, env_name
from digest_stream.store.errors import BackendError, LibraryVersionMismatch
from digest_stream.vocabulary import CONTROL_MESSAGES, Argument, control_of
from digest_stream.wire.control import is_argument
from digest_stream.wire.partitioner import partition_for

_PARTITION_HELP = (
    "Send to this input partition without looking for the timeline's state "
    "(default: the partitions holding it)."
)


def _targets(
    command: str,
    timeline: str,
    settings: Settings,
    partition: int | None,
    without_state: bool = False,
) -> list[int]:
    """The partitions to send the control to; exits 1 when no partition holds the timeline
    (``without_state``: then the partitioner's, where its next events go)."""
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
    if not found and without_state:
        click.echo(
            f"note: no partition of {settings.events_topic} holds state for timeline "
            f"{timeline}: sent to partition {chosen}, where {env_name('partitioner')}="
            f"{settings.partitioner} puts its events",
            err=True,
        )
        return [chosen]
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
    op: str,
    timeline: str,
    settings: Settings,
    argument: str | float | None,
    targets: list[int],
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
            producer.control(op, timeline, argument, partition=target)


def _where(targets: list[int]) -> str:
    return ("partition " if len(targets) == 1 else "partitions ") + ", ".join(map(str, targets))


#: The latest time a command takes (9999-12-31T23:59:59Z): what its messages can show.
_LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


def _time(value: str, name: str) -> float:
    """A time argument: seconds since the epoch, or ISO 8601 with its UTC offset
    (2026-12-24T09:00+01:00)."""
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not is_argument(Argument.TIME, seconds):  # nan, inf, negative: as the ingest checks
            raise click.BadParameter(
                f"{value!r} is not a time: seconds since the epoch, finite and >= 0",
                param_hint=name.upper(),
            )
        return seconds  # one past the year 9999 is refused with the others (_future)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise click.BadParameter(
            f"{value!r} is neither seconds since the epoch nor ISO 8601 with a UTC offset "
            "(2026-12-24T09:00+01:00, or Z)",
            param_hint=name.upper(),
        )
    return moment.timestamp()


def _future(argument: float, name: str, now: float) -> float:
    """A time control's argument, refused unless it lies after ``now`` and before the year
    10000: a time already past would act as if the control ended at once, which no one asks
    for by giving a time."""
    if argument > _LATEST:
        raise click.BadParameter(f"{_shown(argument)} is after the year 9999", param_hint=name)
    if argument <= now:
        raise click.BadParameter(
            f"{_shown(argument)} is not in the future (it is {_shown(now)} now)",
            param_hint=name,
        )
    return argument


#: Seconds per unit of a --for duration, and the duration's form.
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")


def _duration(value: str) -> float:
    """A duration: a number of seconds, or one with a unit (90s, 15m, 2h, 7d, 1w)."""
    found = _DURATION.match(value.strip())
    if found is None or float(found.group(1)) == 0:
        raise click.BadParameter(
            f"{value!r} is not a duration above 0 (90, 90s, 15m, 2h, 7d)", param_hint="--for"
        )
    return float(found.group(1)) * _UNITS[found.group(2)]


def _shown(argument: str | float) -> str:
    """An argument as the command's messages show it (a time in ISO 8601, UTC)."""
    if isinstance(argument, float):
        if argument > _LATEST:
            return f"{argument:.0f} seconds since the epoch"
        return datetime.fromtimestamp(argument, UTC).isoformat(timespec="seconds")
    return argument


def control_command(op: str) -> click.Command:
    """The command ``digest-stream <op>``, built from the declaration of the controls it sends
    (``vocabulary.CONTROL_MESSAGES[op]``): TIMELINE, the argument (an option when the
    control also goes without one, else a positional argument; a time also as ``--for
    SECONDS`` from now), ``--partition``, ``--yes`` when it asks first, the settings."""
    specs = CONTROL_MESSAGES[op]
    bare = next((s for s in specs if s.argument is Argument.NONE), None)
    carrying = next((s for s in specs if s.argument is not Argument.NONE), None)
    confirm, help_text = specs[0].confirm, (bare or specs[0]).help

    def send(timeline: str, partition: int | None, **flags: Any) -> None:
        yes = flags.pop("yes", False)
        argument = flags.pop(carrying.field, None) if carrying else None
        if carrying is not None and carrying.argument is Argument.TIME:
            argument = None if argument is None else _time(argument, carrying.field)
            later = flags.pop("for_seconds", None)
            later = None if later is None else _duration(later)
            if (argument is None) == (later is None) and bare is None:
                raise click.UsageError(f"give {carrying.field.upper()} or --for, one of them")
            now = time.time()
            if later is not None:
                argument = _future(now + later, "--for", now)
            elif argument is not None:
                argument = _future(argument, carrying.field.upper(), now)
        spec = control_of(op, argument is not None)
        what = f"timeline {timeline}"
        if argument is not None:
            if spec.argument is Argument.TIME:
                what += f" {spec.field} {_shown(argument)}"
            else:
                what = f"{spec.field} {_shown(argument)} of {what}"
        settings = load_settings(flags)
        # Looked up first: asking to confirm a control that would find nothing helps nobody.
        targets = _targets(op, timeline, settings, partition, specs[0].without_state)
        if confirm and not yes:
            click.confirm(confirm.format(what=what), abort=True)
        _send(op, timeline, settings, argument, targets)
        outcome = f"; {spec.outcome}" if spec.outcome else ""
        click.echo(f"{op} of {what} sent to {_where(targets)}{outcome}")

    command: Any = settings_options(send)
    if confirm:
        command = click.option("--yes", is_flag=True, help="Do not ask for confirmation.")(command)
    command = click.option("--partition", type=int, default=None, help=_PARTITION_HELP)(command)
    if carrying is not None:
        if carrying.argument is Argument.TIME:
            command = click.option(
                "--for", "for_seconds", metavar="DURATION", default=None,
                help=f"{carrying.field.upper()} this long from now (90, 90s, 15m, 2h, 7d).",
            )(command)  # fmt: skip
        if bare is not None:
            command = click.option(f"--{carrying.field}", help=carrying.help)(command)
        else:
            command = click.argument(carrying.field, required=False)(command)
    command = click.argument("timeline")(command)
    return click.command(op, help=help_text)(command)


#: One command per control message, in declaration order (``digest-stream flush``, ...).
CONTROL_COMMANDS: list[click.Command] = [control_command(op) for op in CONTROL_MESSAGES]
