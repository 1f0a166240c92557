"""Control operations of the model (flush, cancel), as the Lua's controls part applies them."""

from __future__ import annotations

from digest_stream.store.base import CANCEL_ALL, FLUSH, NewRecord
from digest_stream.store.memory.state import PartitionState


def apply_control(state: PartitionState, record: NewRecord, now: float, ready: list[str]) -> int:
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
    return count
