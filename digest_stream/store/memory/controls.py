"""Control operations of the model (flush, cancel), as the Lua's controls part applies them."""

from __future__ import annotations

from digest_stream.store.base import CANCEL_ALL, FLUSH, NewRecord
from digest_stream.store.memory.state import PartitionState, TimelineState
from digest_stream.store.policy import TimelinePolicy

#: The causes that make a timeline due before its cool-down ends (or its schedule's fire).
EARLY_CAUSES = ("FLUSHED", "FLUSH_AT", "URGENT")


def apply_control(
    state: PartitionState,
    record: NewRecord,
    policy: TimelinePolicy,
    now: float,
    ready: list[str],
) -> int:
    """Apply one control operation; returns the pending records it cancelled."""
    name = record.timeline
    timeline = state.timelines.get(name)
    if timeline is None:
        return 0
    if record.control == FLUSH:
        if not timeline.records:
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
    if record.control == CANCEL_ALL:
        count = len(timeline.records)
        timeline.records.clear()
    else:
        count = 0 if timeline.records.pop(record.id, None) is None else 1
    if count and not timeline.records:
        # Nothing pending is left: no digest will report the trims before the cancel
        # (already counted as capacity drops), so they leave with the records.
        timeline.dropped = 0
        if _undue_early(state, name, timeline, policy, now) and name in ready:
            ready.remove(name)  # made READY by a flush of this call: not announced
    return count


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
        due, timeline.cause = last + policy.minimum_delay, "COOLDOWN"
    else:
        return False
    state.waiting[name] = due
    return state.ready.pop(name, None) is not None
