"""MemoryStore: a pure-Python reference model of the digest store semantics.

It follows DESIGN.md section 3 with the same conventions as the Redis functions
(ordering, tie-breaks, per-batch trimming), so tests can drive both with the
same operations and compare every observable result. It has no TTLs and no
eviction of its own: it is the specification, not a cache. ``expire`` plays what a TTL or
eviction does to a timeline's data in Redis, so callers can test how expiry is reported.
"""

from __future__ import annotations

from collections.abc import Sequence

from digest_stream.store import validate
from digest_stream.store.base import (
    DEFAULT_SLICE,
    AddResult,
    DigestTarget,
    DueBatch,
    DueTimeline,
    NewRecord,
    OpenDigest,
    StoredRecord,
    age_key,
    leading_id,
    reason_of,
)
from digest_stream.store.due import next_due
from digest_stream.store.errors import InvalidState
from digest_stream.store.limits import FLUSH_AT_FLOOR
from digest_stream.store.memory.admin import MemoryAdmin
from digest_stream.store.memory.controls import apply_control
from digest_stream.store.memory.state import (
    DigestState,
    PartitionState,
    TimelineState,
    score_key,
)
from digest_stream.store.policy import TimelinePolicy
from digest_stream.vocabulary import DigestReason


class MemoryStore(MemoryAdmin):
    """In-memory ``DigestStore`` with the exact semantics of ``RedisStore``.

    Its state and lookups: ``MemoryState``; inspect, admin, the fence and ``expire``:
    ``MemoryAdmin``; adding (with the leading edge's opens), the schedule and digests here.
    """

    def add(
        self,
        partition: int,
        records: Sequence[NewRecord],
        now: float,
        *,
        expected_fence: int | None = None,
        through_offset: int | None = None,
        topic_id: str | None = None,
        open_nonce: str | None = None,
    ) -> AddResult:
        """Store a batch of records of one partition, fenced by offset (the leading edge's
        digests opened in the same call when ``open_nonce`` asks)."""
        state = self._partition(partition)
        now = validate.time_value(now, "now")
        expected, through = validate.fence_arguments(expected_fence, through_offset)
        topic = validate.topic_id(topic_id)
        nonce = validate.open_nonce(open_nonce)
        validate.records(records, through)
        policies = {record.timeline: self._policy(record.timeline) for record in records}

        fence_before, topic_before = state.fence, state.fence_topic
        if topic is not None and topic_before is not None and topic_before != topic:
            # Another topic's offsets: they fence nothing here; the caller decides.
            return AddResult([], 0, 0, 0, fence_before, fence_before, topic_before)
        if expected is not None and (fence_before is None or fence_before < expected):
            # The store lost writes the caller made: apply nothing, let it replay.
            return AddResult([], 0, 0, 0, fence_before, fence_before, topic_before)
        fence = -1 if fence_before is None else fence_before
        ready: list[str] = []
        # made READY with nothing stored before: led when asked (open_nonce), unless the
        # batch holds controls or the timeline's capacity trimmed it
        leading: set[str] = set()
        created: set[str] = set()
        controls = any(record.control is not None for record in records)
        touched: list[str] = []
        added = skipped = dropped = cancelled = 0
        for record in records:
            if record.control is not None:
                # A control ends the segment of records before it (RedisStore makes one call
                # per segment), so they are trimmed and checked against flush_at first.
                dropped += self._finish(state, touched, policies, now)
                touched = []
                if record.offset > fence:
                    fence = record.offset
                    cancelled += apply_control(state, record, now, ready)
                continue
            if record.offset <= fence:
                skipped += 1
                continue
            fence = record.offset
            added += 1
            name = record.timeline
            if name not in state.timelines:
                # Scheduled without records: they are in its open digest, or expired.
                scheduled = name in state.ready or name in state.waiting
                state.timelines[name] = TimelineState(
                    expired=scheduled and name not in state.digests,
                    behind_open=scheduled and name in state.digests,
                )
                created.add(name)
            timeline = state.timelines[name]
            if name not in touched:
                touched.append(name)
            timeline.records[record.id] = StoredRecord(
                record.id, float(record.timestamp), record.payload
            )
            policy = policies[name]
            if name in state.ready:
                continue
            if name in state.waiting:
                if policy.schedule is not None:
                    continue  # a calendar due time does not move
                last = self._last_delivery(state, name)
                due = state.waiting[name]
                if last is not None:
                    state.waiting[name] = min(
                        due + policy.increment_delay, last + policy.maximum_delay
                    )
                else:
                    state.waiting[name] = min(due, float(record.timestamp))
            elif policy.schedule is not None:
                # No leading edge: the first record waits for the schedule's next fire.
                state.waiting[name] = policy.next_fire(now) or now
                timeline.cause = "SCHEDULE"
            else:
                state.ready[name] = now
                ready.append(name)
                if name in created and not controls:
                    leading.add(name)
        dropped += self._finish(state, touched, policies, now)

        if through is not None:
            fence = max(fence, through)
        moved = fence > -1 and (fence_before is None or fence > fence_before)
        if moved:
            state.fence = fence
        if (moved or fence_before is not None) and topic_before is None and topic is not None:
            state.fence_topic = topic  # a fence without a topic takes the caller's
        opened: list[OpenDigest] = []
        if nonce is not None:
            for name in [n for n in ready if n in leading and not state.timelines[n].dropped]:
                digest_id = leading_id(nonce, len(opened) + 1)
                # opened as ds_open would: the timeline stays READY until the close
                opened.append(self.open(partition, name, digest_id, now))
                ready.remove(name)
        return AddResult(
            ready,
            added,
            skipped,
            dropped,
            fence_before,
            state.fence,
            topic_before,
            cancelled,
            opened,
        )

    def _finish(
        self,
        state: PartitionState,
        touched: list[str],
        policies: dict[str, TimelinePolicy],
        now: float,
    ) -> int:
        """Trim each touched timeline to capacity once, then apply flush_at; returns drops."""
        dropped = 0
        for name in touched:
            policy = policies[name]
            timeline = state.timelines[name]
            capacity = policy.capacity
            if capacity is not None and len(timeline.records) > capacity:
                oldest = sorted(timeline.records.values(), key=age_key)
                victims = oldest[: len(oldest) - capacity]
                for victim in victims:
                    del timeline.records[victim.id]
                timeline.dropped += len(victims)
                dropped += len(victims)
            flush_at = policy.flush_at
            if flush_at is not None and name in state.waiting and len(timeline.records) >= flush_at:
                last = self._last_delivery(state, name)
                due = now if last is None else max(now, last + FLUSH_AT_FLOOR)
                if due < state.waiting[name]:
                    state.waiting[name] = due
                    timeline.cause = "FLUSH_AT"
        return dropped

    def schedule(self, partition: int, now: float, *, limit: int = DEFAULT_SLICE) -> DueBatch:
        """Move up to ``limit`` due WAITING timelines to READY; ``.more`` when more are due."""
        state = self._partition(partition)
        now = validate.time_value(now, "now")
        limit = validate.limit(limit)
        due = sorted(((name, at) for name, at in state.waiting.items() if at <= now), key=score_key)
        for name, _ in due[:limit]:
            del state.waiting[name]
            state.ready[name] = now
        return DueBatch((DueTimeline(name, at) for name, at in due[:limit]), more=len(due) > limit)

    def maintenance(
        self, partition: int, deadline: float, now: float, *, limit: int = DEFAULT_SLICE
    ) -> DueBatch:
        """Move up to ``limit`` stale READY timelines back to WAITING; ``.more`` if more remain."""
        state = self._partition(partition)
        deadline = validate.time_value(deadline, "deadline")
        validate.time_value(now, "now")
        limit = validate.limit(limit)
        stale = sorted(
            ((name, at) for name, at in state.ready.items() if at < deadline), key=score_key
        )
        for name, at in stale[:limit]:
            del state.ready[name]
            state.waiting[name] = at
        return DueBatch(
            (DueTimeline(name, at) for name, at in stale[:limit]), more=len(stale) > limit
        )

    def open(self, partition: int, timeline: str, digest_id: str, now: float) -> OpenDigest:
        """Open (or reopen) the timeline's digest; ``digest_id`` is used only for a new one."""
        state = self._partition(partition)
        validate.name(timeline, "timeline")
        validate.digest_id(digest_id)
        now = validate.time_value(now, "now")
        rule = next_due(self._policy(timeline))
        if timeline not in state.ready:
            raise InvalidState(f"timeline is not ready: {timeline}")
        digest = state.digests.get(timeline)
        if digest is None:
            # READY with neither records nor a digest: its data expired.
            pending = state.timelines.pop(timeline, None) or TimelineState(expired=True)
            digest = DigestState(
                id=digest_id,
                opened_at=now,
                dropped=pending.dropped,
                records=sorted(pending.records.values(), key=age_key, reverse=True),
                last_delivery=pending.last_delivery,
                # records that waited behind a digest that is gone: it expired
                expired=pending.expired or pending.behind_open,
                reason=reason_of(pending.cause, pending.last_delivery),
            )
            state.digests[timeline] = digest
        return OpenDigest(
            digest.id,
            timeline,
            list(digest.records),
            digest.dropped,
            digest.opened_at,
            digest.expired,
            digest.reason,
            rule,
        )

    def close(self, partition: int, timeline: str, digest_id: str, now: float) -> bool:
        """Close that digest; False when the id is unknown or already closed."""
        state = self._partition(partition)
        validate.name(timeline, "timeline")
        validate.digest_id(digest_id)
        now = validate.time_value(now, "now")
        policy = self._policy(timeline)
        digest = state.digests.get(timeline)
        if digest is None or digest.id != digest_id:
            return False
        del state.digests[timeline]
        pending = state.timelines.get(timeline)
        if not digest.records and (pending is None or not pending.records):
            # An empty digest ends the cool-down: the timeline retires.
            state.timelines.pop(timeline, None)
            state.ready.pop(timeline, None)
            state.waiting.pop(timeline, None)
            return True
        if pending is None:
            pending = state.timelines[timeline] = TimelineState()
        pending.last_delivery = now
        pending.behind_open = False
        state.ready.pop(timeline, None)
        # A calendar timeline waits for its next fire, others for the cool-down, unless a
        # flush came while the digest was open, or flush_at records did: then right after
        # the floor (add leaves a READY timeline alone, so the close checks).
        soon = None
        if pending.cause == "FLUSHED":
            soon = DigestReason.FLUSHED
        elif policy.flush_at is not None and len(pending.records) >= policy.flush_at:
            soon = DigestReason.FLUSH_AT
        due, cause = next_due(policy).after(now, soon)
        pending.cause = cause
        state.waiting[timeline] = due
        return True

    def open_many(
        self, targets: Sequence[DigestTarget], now: float
    ) -> list[OpenDigest | InvalidState]:
        """open() for each target, in order; a timeline that is not READY gives its error."""
        results: list[OpenDigest | InvalidState] = []
        for partition, timeline, digest_id in targets:
            try:
                results.append(self.open(partition, timeline, digest_id, now))
            except InvalidState as state:
                results.append(state)
        return results

    def close_many(self, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """close() for each target, in order."""
        return [self.close(p, timeline, digest_id, now) for p, timeline, digest_id in targets]
