"""The service's closed vocabularies, each one enum from which every encoding is derived.

Below the store and the wire (both import it, it imports nothing of the package), so the
store's Lua letters, the Avro enum, the metrics' labels and the models cannot drift apart:
a new member is added here (with its letter) and everything else follows or fails a test.

Controls are declared once, in ``CONTROL_SPECS``: the control message's format
(wire/control.py), the ingest's reading of it (roles/ingest/check.py), the Lua's constants and
handler table (store/redis/library.py), the model's dispatch (store/memory/controls.py), the
CLI's commands (cli/control.py), ``EventProducer.control`` and design.md's tables
(ops/doc_tables.py) all derive from it. A new control is a member of ``Control``, its spec, and
its handler in the Lua (``control_<value>`` in controls.lua) and in the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class DigestReason(StrEnum):
    """Why a digest went out now (``Digest.reason``; the Avro enum of schemas/digest.avsc,
    whose symbol order is checked against this at import, wire/symbols.py)."""

    IMMEDIATE = "IMMEDIATE"
    """First event of a quiet timeline: delivered at once."""
    COOLDOWN = "COOLDOWN"
    """The timeline's cool-down ended with records waiting."""
    FLUSH_AT = "FLUSH_AT"
    """The timeline held `flush_at` pending records."""
    SCHEDULE = "SCHEDULE"
    """The timeline's calendar schedule fired."""
    FLUSHED = "FLUSHED"
    """Someone asked for it (`digest-stream flush`, `EventProducer.flush_timeline(timeline)`)."""
    RECOVERED = "RECOVERED"
    """A delivery that had not completed was announced again (maintenance, a take-over)."""
    URGENT = "URGENT"
    """An event the timeline's `urgent_when` calls urgent came: out at once, through the
    cool-down (never sooner than 1 s after the last digest)."""

    @property
    def letter(self) -> str | None:
        """The one letter a timeline's meta in Redis records for it; None: not a store
        cause (RECOVERED is the delivery's)."""
        return _CAUSE_LETTERS.get(self)


#: The store's causes (why a timeline is due) and their letters in a timeline's meta: the
#: only letters; the Lua library gets them from store.limits.CAUSES, derived from these.
_CAUSE_LETTERS: Final = {
    DigestReason.IMMEDIATE: "i",
    DigestReason.COOLDOWN: "c",
    DigestReason.FLUSH_AT: "f",
    DigestReason.SCHEDULE: "s",
    DigestReason.FLUSHED: "x",
    DigestReason.URGENT: "u",
}


class Control(StrEnum):
    """A control operation that travels with a timeline's events (``NewRecord.control``)."""

    FLUSH = "flush"
    """Deliver what is pending now."""
    CANCEL = "cancel"
    """Remove the pending record ``id``."""
    CANCEL_ALL = "cancel_all"
    """Remove every pending record (``id`` is unused)."""
    SNOOZE = "snooze"
    """Nothing goes out before the time ``id`` carries; records go on accumulating."""
    UNSNOOZE = "unsnooze"
    """End the timeline's snooze now (``id`` is unused)."""


class State(StrEnum):
    """A timeline's state as ``inspect`` reports it (``TimelineInfo.state``; the Lua's STATES;
    what each means: STATE_DOCS)."""

    ABSENT = "absent"
    WAITING = "waiting"
    READY = "ready"
    COOLING = "cooling"


#: What each state means (design.md's state table, ops/doc_tables.py).
STATE_DOCS: Final[Mapping[State, str]] = {
    State.ABSENT: "nothing stored: no pending records, no open digest, no cool-down",
    State.WAITING: "scheduled: due at `due` (its records wait for it, or its schedule's "
    "empty digest)",
    State.READY: "due since `due`: delivery opens its digest, or has it open",
    State.COOLING: "its last digest closed with nothing pending: in no set until a record "
    "comes within the cool-down, which ends at `due`",
}
if set(STATE_DOCS) != set(State):
    raise ValueError("STATE_DOCS must say what every State means")


class Argument(StrEnum):
    """What a control carries besides its timeline."""

    NONE = "none"
    """Nothing."""
    NAME = "name"
    """A name (a record id): 1..MAX_NAME_BYTES bytes."""
    TIME = "time"
    """A time, seconds since the epoch (>= 0, finite)."""


@dataclass(frozen=True, slots=True)
class ControlSpec:
    """One control as declared: what it does, how it is sent and how the CLI offers it.

    A control message (wire/control.py) is ``{"op": sent_as}``, plus ``{field: argument}`` when
    the control carries one. Controls may share a ``sent_as``: the message's argument, present
    or not, tells them apart (a cancel without a record is CANCEL_ALL), and one CLI command
    (``digest-stream <sent_as>``) sends them all: its help is the argument-less one's ``help``,
    the argument's (an option, or a positional argument when no control of that name goes
    without one) the other's.
    """

    control: Control
    #: The control message's ``op``.
    sent_as: str
    argument: Argument
    #: One line: what it does (design.md's control table).
    does: str
    #: The CLI's help: of the command (no argument), else of its argument.
    help: str
    #: The message's key for the argument (also the CLI option's name); "" when none.
    field: str = ""
    #: ``EventProducer.control`` sends it.
    client: bool = True
    #: The CLI asks this first ({what}: what it acts on) unless ``--yes``; "": it does not ask.
    confirm: str = ""
    #: What the CLI adds after "<op> of ... sent to ...", "" for nothing.
    outcome: str = ""
    #: With no partition holding the timeline's state, the CLI sends it where the
    #: partitioner puts the timeline's events (a snooze of a quiet timeline) instead of
    #: refusing (nothing to act on).
    without_state: bool = False

    def carried(self, argument: str | float | None) -> str | None:
        """The argument as the store receives it (``NewRecord.id``; None: the placeholder)."""
        if self.argument is Argument.NONE or argument is None:
            return None
        return repr(float(argument)) if self.argument is Argument.TIME else str(argument)

    def parsed(self, carried: str) -> str | float | None:
        """``NewRecord.id`` read back as this control's argument (the model's reading)."""
        if self.argument is Argument.NONE:
            return None
        return float(carried) if self.argument is Argument.TIME else carried


_CANCEL_WHAT = "Cancel the pending records of {what}? They are never delivered"

#: Every control, in code order (ds_add's packed controls number them from 1 in this order).
CONTROL_SPECS: Final[Mapping[Control, ControlSpec]] = {
    spec.control: spec
    for spec in (
        ControlSpec(
            Control.FLUSH,
            sent_as="flush",
            argument=Argument.NONE,
            does="deliver what is pending now, as one digest (FLUSHED)",
            help="Deliver TIMELINE's pending records now (after the events sent before this).",
            outcome="its pending records go out as one digest",
        ),
        ControlSpec(
            Control.CANCEL,
            sent_as="cancel",
            argument=Argument.NAME,
            field="record",
            does="remove the pending record with that id",
            help="Cancel only this pending record (default: all).",
            confirm=_CANCEL_WHAT,
        ),
        ControlSpec(
            Control.CANCEL_ALL,
            sent_as="cancel",
            argument=Argument.NONE,
            does="remove every pending record",
            help="Remove TIMELINE's pending records (or one), after the events sent before this.",
            confirm=_CANCEL_WHAT,
        ),
        ControlSpec(
            Control.SNOOZE,
            sent_as="snooze",
            argument=Argument.TIME,
            field="until",
            does="nothing goes out before that time (records go on accumulating, capacity and "
            "TTL apply), then one digest",
            help="Hold TIMELINE's digests until UNTIL (or --for DURATION from now): its records "
            "go on accumulating, then go out as one digest.",
            outcome="nothing goes out before then",
            without_state=True,
        ),
        ControlSpec(
            Control.UNSNOOZE,
            sent_as="unsnooze",
            argument=Argument.NONE,
            does="end the snooze now: what it held is due now",
            help="End TIMELINE's snooze now: what it held goes out (after the events sent "
            "before this).",
            outcome="what the snooze held is due now",
            without_state=True,
        ),
    )
}


def _messages() -> dict[str, tuple[ControlSpec, ...]]:
    """The controls of each message ``op``, checked: at most one without an argument and one
    with, agreeing on what the CLI asks."""
    found: dict[str, tuple[ControlSpec, ...]] = {}
    for spec in CONTROL_SPECS.values():
        found[spec.sent_as] = (*found.get(spec.sent_as, ()), spec)
    for op, specs in found.items():
        bare = [s for s in specs if s.argument is Argument.NONE]
        carrying = [s for s in specs if s.argument is not Argument.NONE]
        if len(bare) > 1 or len(carrying) > 1 or len({s.confirm for s in specs}) > 1:
            raise ValueError(f"control message {op!r}: one control without an argument and one "
                             "with at most, asking the same")  # fmt: skip
        if any(not s.field for s in carrying) or any(s.field for s in bare):
            raise ValueError(f"control message {op!r}: a field exactly for its argument")
    if list(CONTROL_SPECS) != list(Control):
        raise ValueError("CONTROL_SPECS must declare every Control, in its order")
    return found


#: The controls of each control message ``op``, in declaration order.
CONTROL_MESSAGES: Final = _messages()


def control_of(op: str, with_argument: bool) -> ControlSpec:
    """The control a message ``op`` with (or without) an argument is; ValueError: none."""
    for spec in CONTROL_MESSAGES.get(op, ()):
        if (spec.argument is not Argument.NONE) == with_argument:
            return spec
    raise ValueError(
        f"control message op must be one of {tuple(CONTROL_MESSAGES)}"
        + (f", and {op} takes no argument" if op in CONTROL_MESSAGES and with_argument else "")
        + (f", and {op} needs its argument" if op in CONTROL_MESSAGES and not with_argument else "")
    )
