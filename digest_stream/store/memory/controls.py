"""Control operations of the model (flush, cancel), as the Lua's controls part applies them:
one handler per control of ``vocabulary.Control``, dispatched by ``HANDLERS``."""

from __future__ import annotations

from collections.abc import Callable

from digest_stream.store.base import NewRecord
from digest_stream.store.memory.state import PartitionState, TimelineState
from digest_stream.store.policy import TimelinePolicy
from digest_stream.vocabulary import CONTROL_SPECS, Control

#: The causes that make a timeline due before its cool-down ends (or its schedule's fire).
EARLY_CAUSES = ("FLUSHED", "FLUSH_AT", "URGENT")


#: A control's handler: (state, timeline name, its state, its argument, policy, now, the
#: call's ready list) -> the pending records it cancelled. As the Lua's control_<value>.
Handler = Callable[
    [
        PartitionState,
        str,
        TimelineState | None,
        str | float | None,
        TimelinePolicy,
        float,
        list[str],
    ],
    int,
]


def apply_control(
    state: PartitionState,
    record: NewRecord,
    policy: TimelinePolicy,
    now: float,
    ready: list[str],
) -> int:
    """Apply one control operation; returns the pending records it cancelled."""
    name = record.timeline
    timeline = state.timelines.get(name)  # None: no records nor meta stored
    control = Control(record.control or "")  # a control: add.Batch sends no record here
    argument = CONTROL_SPECS[control].parsed(record.id)
    return HANDLERS[control](state, name, timeline, argument, policy, now, ready)


def _flush(
    state: PartitionState,
    name: str,
    timeline: TimelineState | None,
    _argument: str | float | None,
    _policy: TimelinePolicy,
    now: float,
    ready: list[str],
) -> int:
    """A flush: a WAITING timeline with pending records is READY now."""
    if state.snooze_end(name, now) is not None:
        return 0  # the snooze holds it: nothing goes out before its end
    if timeline is None or not timeline.records:
        return 0  # nothing pending: an open digest already holds what was asked for
    if name in state.waiting:
        del state.waiting[name]
        state.ready[name] = now
        timeline.cause = "FLUSHED"
        if name not in ready:
            ready.append(name)
    elif name in state.digests:
        # Records behind an open digest: remembered, honoured by its close.
        timeline.cause = "FLUSHED"
    # READY and not opened yet: its open takes everything pending.
    return 0


def _cancel(
    state: PartitionState,
    name: str,
    timeline: TimelineState | None,
    argument: str | float | None,
    policy: TimelinePolicy,
    now: float,
    ready: list[str],
) -> int:
    """A cancel of the pending record ``argument``, or (None) of every one."""
    if timeline is None:
        return 0
    if argument is None:
        count = len(timeline.records)
        timeline.records.clear()
    else:
        count = 0 if timeline.records.pop(str(argument), None) is None else 1
    if count and not timeline.records:
        # Nothing pending is left: no digest will report the trims before the cancel
        # (already counted as capacity drops), so they leave with the records.
        timeline.dropped = 0
        state.snooze_passes.discard(name)  # nothing urgent is left to pass a snooze
        if _undue_early(state, name, timeline, policy, now) and name in ready:
            ready.remove(name)  # made READY by a flush of this call: not announced
    return count


def _snooze(
    state: PartitionState,
    name: str,
    _timeline: TimelineState | None,
    argument: str | float | None,
    _policy: TimelinePolicy,
    now: float,
    ready: list[str],
) -> int:
    """A snooze until ``argument`` (None: an unsnooze, the snooze ends now), as the Lua's
    snoozes.set: a WAITING timeline the previous snooze held (due at or after its end) is
    due at the new end (now), one due sooner than the new end waits for it; a READY one
    with no digest open waits for the end."""
    ends = None if argument is None else float(argument)
    previous = state.forget_snooze(name)  # an urgent record's pass too: the new one holds it
    if ends is not None:
        state.snoozes[name] = ends
    if name in state.waiting:
        due = state.waiting[name]
        if previous is not None and due >= previous:
            state.waiting[name] = now if ends is None else ends
        elif ends is not None and due < ends:
            state.waiting[name] = ends
    elif ends is not None and name in state.ready and name not in state.digests:
        del state.ready[name]
        state.waiting[name] = ends
        if name in ready:
            ready.remove(name)  # made READY in this call: not announced
    return 0


#: Each control's handler (every member of Control: checked below, as library.py checks
#: the Lua's).
HANDLERS: dict[Control, Handler] = {
    Control.FLUSH: _flush,
    Control.CANCEL: _cancel,
    Control.CANCEL_ALL: _cancel,  # its argument is None
    Control.SNOOZE: _snooze,
    Control.UNSNOOZE: _snooze,  # its argument is None
}
if set(HANDLERS) != set(Control):
    raise ValueError(f"the model has no handler for {sorted(set(Control) - set(HANDLERS))}")


def _undue_early(
    state: PartitionState, name: str, timeline: TimelineState, policy: TimelinePolicy, now: float
) -> bool:
    """A flush (or flush_at) with nothing left to flush is a no-op: the emptied timeline is
    due as if it had never come (the Lua's undue_early). Behind an open digest its close
    decides; else it waits for the schedule's next fire or the end of its last delivery's
    cool-down (READY included). True when it took a READY timeline back to WAITING."""
    if timeline.cause not in EARLY_CAUSES:
        return False
    timeline.cause = None
    if name in state.digests:
        return False
    fire = policy.next_fire(now)
    last = timeline.last_delivery
    if fire is not None:
        due, timeline.cause = fire, "SCHEDULE"
    elif last is not None and now < last + policy.minimum_delay:
        due, timeline.cause = policy.quiet_until(last + policy.minimum_delay, now), "COOLDOWN"
    else:
        return False
    state.waiting[name] = due
    return state.ready.pop(name, None) is not None
