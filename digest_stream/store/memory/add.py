"""The model's add, as the Lua's add part does it: the fence that refuses a batch, the batch's
records and controls applied in offset order (``Batch``: each record stored, its timeline
scheduled; each control ending a segment), and the fence moved after them.

``MemoryStore.add`` runs these steps in that order, then the leading edge opens its digests.
"""

from __future__ import annotations

from collections.abc import Sequence

from digest_stream.store.base import AddResult, NewRecord, OpenDigest, StoredRecord, age_key
from digest_stream.store.limits import FLUSH_AT_FLOOR
from digest_stream.store.memory.controls import apply_control
from digest_stream.store.memory.state import PartitionState, TimelineState
from digest_stream.store.policy import TimelinePolicy


def refused(state: PartitionState, expected: int | None, topic: str | None) -> bool:
    """The fence says apply nothing: another topic's offsets (they fence nothing here; the
    caller decides), or the store lost writes the caller made (it replays)."""
    if topic is not None and state.fence_topic is not None and state.fence_topic != topic:
        return True
    return expected is not None and (state.fence is None or state.fence < expected)


def move_fence(
    state: PartitionState, fence_before: int | None, fence: int, topic: str | None
) -> None:
    """Advance the partition's fence to ``fence`` (-1: none); a fence without a topic takes
    the caller's."""
    moved = fence > -1 and (fence_before is None or fence > fence_before)
    if moved:
        state.fence = fence
    if (moved or fence_before is not None) and state.fence_topic is None and topic is not None:
        state.fence_topic = topic


class Batch:
    """One add's records and controls applied in offset order, and what they did."""

    def __init__(
        self, state: PartitionState, policies: dict[str, TimelinePolicy], now: float
    ) -> None:
        self.state, self.policies, self.now = state, policies, now
        self.ready: list[str] = []
        # made READY with nothing stored before: led when asked (open_nonce), unless the
        # batch holds controls or the timeline's capacity trimmed it
        self.leading: set[str] = set()
        self.created: set[str] = set()
        self.controls = False
        self.touched: list[str] = []  # timelines of the segment in hand (since a control)
        self.urgent: set[str] = set()  # those of them that got an urgent record
        self.added = self.skipped = self.dropped = self.cancelled = 0

    def apply(self, records: Sequence[NewRecord], fence: int) -> int:
        """Apply every record and control above ``fence``; the fence they leave."""
        self.controls = any(record.control is not None for record in records)
        for record in records:
            if record.control is not None:
                # A control ends the segment of records before it (RedisStore makes one call
                # per segment), so they are trimmed and checked against flush_at first.
                self._finish()
                if record.offset > fence:
                    fence = record.offset
                    self.cancelled += apply_control(
                        self.state, record, self.policies[record.timeline], self.now, self.ready
                    )
            elif record.offset <= fence:
                self.skipped += 1
            else:
                fence = record.offset
                self._store(record)
        self._finish()
        return fence

    def result(
        self, fence_before: int | None, topic_before: str | None, opened: list[OpenDigest]
    ) -> AddResult:
        """What the add did, its fence found before it (and that fence's topic) and the
        digests its leading edge opened (no longer in ``ready``) given."""
        return AddResult(
            self.ready,
            self.added,
            self.skipped,
            self.dropped,
            fence_before,
            self.state.fence,
            topic_before,
            self.cancelled,
            opened,
        )

    def led(self) -> list[str]:
        """The READY timelines the leading edge opens (none was trimmed by its capacity)."""
        timelines = self.state.timelines
        return [n for n in self.ready if n in self.leading and not timelines[n].dropped]

    def _store(self, record: NewRecord) -> None:
        """Store one record and schedule its timeline."""
        self.added += 1
        state, name = self.state, record.timeline
        if name not in state.ready and name not in state.waiting:
            # absent or cooling: its snooze read (an ended one removed), as the Lua's
            # begin_timelines reads it for such a timeline
            state.snooze_end(name, self.now)
        self._wake(name)
        if name not in state.timelines:
            # Scheduled without records: they are in its open digest, or expired.
            scheduled = name in state.ready or name in state.waiting
            state.timelines[name] = TimelineState(
                expired=scheduled and name not in state.digests,
                behind_open=scheduled and name in state.digests,
            )
            self.created.add(name)
        timeline = state.timelines[name]
        if name not in self.touched:
            self.touched.append(name)
        if record.urgent:
            self.urgent.add(name)
            passes = self.policies[name].urgent_passes_snooze
            if passes and state.snooze_end(name, self.now) is not None:
                state.snooze_passes.add(name)  # as the Lua's snoozes.let_through
        timeline.records[record.id] = StoredRecord(
            record.id, float(record.timestamp), record.payload
        )
        self._schedule(name, timeline, float(record.timestamp))

    def _wake(self, name: str) -> None:
        """A cooling timeline is WAITING for the rest of its cool-down, due when it ends (as
        if its close had scheduled it); once it is over, absent (a new timeline)."""
        cooling = self.state.cooling(name)
        policy = self.policies[name]
        if cooling is None or cooling.last_delivery is None or policy.schedule is not None:
            return
        ends = cooling.last_delivery + policy.minimum_delay
        if self.now < ends:
            self.state.waiting[name] = policy.quiet_until(ends, self.now)
        else:
            del self.state.timelines[name]

    def _schedule(self, name: str, timeline: TimelineState, timestamp: float) -> None:
        """A new record's effect on its timeline's due time (each held to the end of the
        quiet hours it falls in, as the Lua's quiet_until holds it)."""
        state, policy = self.state, self.policies[name]
        if name in state.ready:
            return
        if name in state.waiting:
            if policy.schedule is not None:
                return  # a calendar due time does not move
            last = state.last_delivery(name)
            due = state.waiting[name]
            if last is not None:
                due = min(due + policy.increment_delay, last + policy.maximum_delay)
            else:
                due = min(due, timestamp)
            state.waiting[name] = policy.quiet_until(due, self.now)
        elif policy.schedule is not None:
            # No leading edge: the first record waits for the schedule's next fire.
            state.waiting[name] = policy.next_fire(self.now) or self.now
            timeline.cause = "SCHEDULE"
        elif (ends := state.snooze_end(name, self.now)) is not None:
            # snoozed: waits for the snooze's end, exactly (not held by quiet hours)
            state.waiting[name] = ends
        elif (held := policy.quiet_until(self.now, self.now)) != self.now:
            # In its quiet hours: WAITING until they end, not led.
            state.waiting[name] = held
        else:
            state.ready[name] = self.now
            self.ready.append(name)
            if name in self.created and not self.controls:
                self.leading.add(name)

    def _finish(self) -> None:
        """Trim each timeline of the segment to capacity once, then apply flush_at."""
        for name in self.touched:
            policy = self.policies[name]
            timeline = self.state.timelines[name]
            capacity = policy.capacity
            if capacity is not None and len(timeline.records) > capacity:
                oldest = sorted(timeline.records.values(), key=age_key)
                victims = oldest[: len(oldest) - capacity]
                for victim in victims:
                    del timeline.records[victim.id]
                timeline.dropped += len(victims)
                self.dropped += len(victims)
            self._flush_at(name, timeline, policy)
            if name in self.urgent or timeline.cause == "URGENT":
                self._urgent(name, timeline)
        self.touched = []
        self.urgent = set()

    def _flush_at(self, name: str, timeline: TimelineState, policy: TimelinePolicy) -> None:
        """A WAITING timeline holding flush_at records is due now (past the floor)."""
        state, now = self.state, self.now
        flush_at = policy.flush_at
        if flush_at is not None and name in state.waiting and len(timeline.records) >= flush_at:
            last = state.last_delivery(name)
            due = now if last is None else max(now, last + FLUSH_AT_FLOOR)
            due = policy.quiet_until(due, now)
            if due < state.waiting[name]:
                state.waiting[name] = due
                timeline.cause = "FLUSH_AT"

    def _urgent(self, name: str, timeline: TimelineState) -> None:
        """An urgent record (or a record after one, pushing out the due time it set): a
        WAITING timeline is due now, never sooner than the floor after its last delivery;
        behind an open digest, URGENT is remembered for its close; READY and not opened yet:
        nothing (its open takes everything pending)."""
        state, now = self.state, self.now
        if name in state.waiting:
            last = state.last_delivery(name)
            due = now if last is None else max(now, last + FLUSH_AT_FLOOR)
            if due < state.waiting[name]:
                state.waiting[name] = due
                timeline.cause = "URGENT"
        elif name in state.digests and timeline.cause not in ("FLUSHED", "URGENT"):
            timeline.cause = "URGENT"
