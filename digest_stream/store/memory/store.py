"""MemoryStore: a pure-Python reference model of the digest store semantics.

It follows DESIGN.md section 3 with the same conventions as the Redis functions
(ordering, tie-breaks, per-batch trimming), so tests can drive both with the
same operations and compare every observable result. It has no TTLs and no
eviction of its own: it is the specification, not a cache. ``expire`` plays what a TTL or
eviction does to a timeline's data in Redis, so callers can test how expiry is reported.

Each operation is written here once, over its partition's state (``state``); an add's batch
is applied by ``add.Batch`` and its controls by ``controls``, as the Lua's parts do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from digest_stream.store import validate
from digest_stream.store.base import (
    DEFAULT_SLICE,
    AddResult,
    DigestTarget,
    DueBatch,
    DueTimeline,
    Fence,
    NewRecord,
    OpenDigest,
    PartitionStats,
    Readiness,
    TimelineInfo,
    age_key,
    leading_id,
    reason_of,
)
from digest_stream.store.due import next_due
from digest_stream.store.errors import InvalidArgument, InvalidState
from digest_stream.store.memory.add import Batch, move_fence, refused
from digest_stream.store.memory.state import (
    DigestState,
    PartitionState,
    TimelineState,
    score_key,
)
from digest_stream.store.policy import PolicyResolver, TimelinePolicy
from digest_stream.vocabulary import DigestReason, State


class MemoryStore:
    """In-memory ``DigestStore`` with the exact semantics of ``RedisStore``."""

    label = "the store model"

    def __init__(
        self,
        *,
        policy: TimelinePolicy | None = None,
        resolver: PolicyResolver | None = None,
    ) -> None:
        #: The default timeline policy.
        self.policy, self._resolver = validate.policies(policy, resolver)
        self._partitions: dict[int, PartitionState] = {}

    def _partition(self, partition: int) -> PartitionState:
        """One partition's state (made empty on first use)."""
        validate.partition(partition)
        return self._partitions.setdefault(partition, PartitionState())

    def _policy(self, timeline: str) -> TimelinePolicy:
        """The checked policy of one timeline."""
        return validate.policy(self._resolver(timeline), timeline)

    # ---------------------------------------------------------------- adding, schedule

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
        """The fence checked, the batch applied in offset order, the fence moved, then the
        leading edge's digests opened as ``open`` opens them."""
        state = self._partition(partition)
        now, expected, through, topic, nonce = validate.add_arguments(
            now, expected_fence, through_offset, topic_id, open_nonce
        )
        validate.records(records, through)
        policies = {record.timeline: self._policy(record.timeline) for record in records}

        fence_before, topic_before = state.fence, state.fence_topic
        if refused(state, expected, topic):
            return AddResult([], 0, 0, 0, fence_before, fence_before, topic_before)
        applied = -1 if fence_before is None else fence_before
        if (
            nonce in state.led_nonces
            and all(record.control is None for record in records)
            and any(record.offset > applied for record in records)
        ):
            raise InvalidArgument(
                f"open nonce {nonce} is taken by an earlier add: each add that leads takes a "
                "fresh one"
            )
        batch = Batch(state, policies, now)
        fence = batch.apply(records, applied)
        move_fence(state, fence_before, max(fence, -1 if through is None else through), topic)
        opened: list[OpenDigest] = []
        if nonce is not None:
            # timeline k's digest id: the nonce and k, k its place among the call's timelines
            # in the order its records name them (as RedisStore packs them)
            numbers = {n: k for k, n in enumerate(dict.fromkeys(r.timeline for r in records), 1)}
            for name in batch.led():
                # opened as ds_open would: the timeline stays READY until the close
                opened.append(self.open(partition, name, leading_id(nonce, numbers[name]), now))
                batch.ready.remove(name)
            if opened:
                state.led_nonces.add(nonce)
        return batch.result(fence_before, topic_before, opened)

    def schedule(
        self, partition: int, now: float, *, limit: int = DEFAULT_SLICE, nonce: str | None = None
    ) -> DueBatch:
        """The due WAITING timelines moved to READY (a call with the nonce of the last one
        that moved something answers its reply)."""
        state = self._partition(partition)
        now = validate.time_value(now, "now")
        limit = validate.limit(limit)
        nonce = validate.open_nonce(nonce, "schedule nonce")
        if nonce is not None and state.last_schedule is not None:
            kept_nonce, kept = state.last_schedule
            if kept_nonce == nonce:
                return DueBatch(kept, more=kept.more)
        due = sorted(((name, at) for name, at in state.waiting.items() if at <= now), key=score_key)
        moved_names = []
        for name, at in due[:limit]:
            ends = state.snooze_holds(name, now)
            if ends is not None:  # snoozed: waits for the snooze's end
                state.waiting[name] = ends
                continue
            del state.waiting[name]
            state.ready[name] = now
            moved_names.append((name, at))
        moved = DueBatch((DueTimeline(name, at) for name, at in moved_names), more=len(due) > limit)
        if nonce is not None and moved:
            state.last_schedule = (nonce, moved)
        return moved

    def maintenance(
        self, partition: int, deadline: float, now: float, *, limit: int = DEFAULT_SLICE
    ) -> DueBatch:
        """The stale READY timelines moved back to WAITING; ended snoozes removed."""
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
        for name in list(state.snoozes):  # ended snoozes removed, as snoozes.keep_alive does
            state.snooze_end(name, now)
        return DueBatch(
            (DueTimeline(name, at) for name, at in stale[:limit]), more=len(stale) > limit
        )

    # ---------------------------------------------------------------- digests

    def open(self, partition: int, timeline: str, digest_id: str, now: float) -> OpenDigest:
        """The timeline's open digest, made of what it has pending when there is none."""
        state = self._partition(partition)
        validate.name(timeline, "timeline")
        validate.digest_id(digest_id)
        now = validate.time_value(now, "now")
        rule = next_due(self._policy(timeline))
        if timeline not in state.ready:
            raise InvalidState(f"timeline is not ready: {timeline}")
        digest = state.digests.get(timeline)
        if digest is None:
            digest = state.digests[timeline] = _new_digest(state, timeline, digest_id, now)
        return digest.opened(timeline, rule)

    def close(self, partition: int, timeline: str, digest_id: str, now: float) -> bool:
        """That digest closed, its timeline retired, cooling down or waiting again."""
        state = self._partition(partition)
        validate.name(timeline, "timeline")
        validate.digest_id(digest_id)
        now = validate.time_value(now, "now")
        policy = self._policy(timeline)
        digest = state.digests.get(timeline)
        if digest is None or digest.id != digest_id:
            return False
        del state.digests[timeline]
        _after_close(state, timeline, digest, policy, now)
        return True

    def open_many(
        self, targets: Sequence[DigestTarget], now: float
    ) -> list[OpenDigest | InvalidState]:
        """``open`` for each target, in order."""
        results: list[OpenDigest | InvalidState] = []
        for partition, timeline, digest_id in targets:
            try:
                results.append(self.open(partition, timeline, digest_id, now))
            except InvalidState as state:
                results.append(state)
        return results

    def close_many(self, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """``close`` for each target, in order."""
        return [self.close(p, timeline, digest_id, now) for p, timeline, digest_id in targets]

    def close_leading(self, nonce: str, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """``close_many``, after the same checks as Redis's (the model has no batch form)."""
        now = validate.time_value(now, "now")
        validate.leading_targets(nonce, targets)
        return self.close_many(targets, now)

    # ---------------------------------------------------------------- inspect, admin, fence

    def expire(self, partition: int, timeline: str, *, digest_only: bool = False) -> None:
        """Drop the timeline's records and open digest (or only the digest), keeping its
        schedule entry, as Redis's TTLs do (test aid; not part of ``DigestStore``)."""
        state = self._partition(partition)
        if not digest_only:
            state.timelines.pop(timeline, None)
        state.digests.pop(timeline, None)

    def delete(self, partition: int, timeline: str) -> bool:
        """The timeline's records, digest and schedule entry removed."""
        state = self._partition(partition)
        validate.name(timeline, "timeline")
        found = [
            state.timelines.pop(timeline, None),
            state.digests.pop(timeline, None),
            state.ready.pop(timeline, None),
            state.waiting.pop(timeline, None),
            state.forget_snooze(timeline),
        ]
        return any(item is not None for item in found)

    def inspect(self, partition: int, timeline: str) -> TimelineInfo:
        """The timeline's state, due time, counts and open digest."""
        state = self._partition(partition)
        validate.name(timeline, "timeline")
        info = state.info(timeline)
        if info.state == State.COOLING and info.last_delivery is not None:
            # due when the cool-down ends, as RedisStore.inspect adds it
            due = next_due(self._policy(timeline)).cooled(info.last_delivery)
            return dataclasses.replace(info, due=due)
        return info

    def stats(self, partition: int) -> PartitionStats:
        """The partition's WAITING and READY counts, earliest due and fence."""
        state = self._partition(partition)
        return PartitionStats(
            partition=partition,
            waiting=len(state.waiting),
            ready=len(state.ready),
            oldest_due=min(state.waiting.values()) if state.waiting else None,
            applied_offset=state.fence,
        )

    def applied_offset(self, partition: int) -> int | None:
        """The offset of the partition's fence."""
        return self._partition(partition).fence

    def fence(self, partition: int) -> Fence:
        """The partition's fence and its topic id."""
        state = self._partition(partition)
        return Fence(state.fence, state.fence_topic)

    def set_applied_offset(
        self, partition: int, offset: int | None, *, topic_id: str | None = None
    ) -> None:
        """The partition's fence set to exactly this."""
        state = self._partition(partition)
        fence = None if offset is None else validate.offset(offset)
        state.fence, state.fence_topic = fence, validate.topic_id(topic_id)

    # ---------------------------------------------------------------- the service's checks

    def server_time(self) -> None:
        """None: the model keeps no clock of its own (every caller passes ``now``)."""
        return None

    def readiness(self) -> Readiness:
        """Always ready: the model has no server-side code to check."""
        return Readiness("")

    def disconnect(self) -> None:
        """Nothing to release: the model holds no connection."""


def _new_digest(state: PartitionState, timeline: str, digest_id: str, now: float) -> DigestState:
    """A READY timeline's new digest: what it has pending, which leaves the timeline."""
    # READY with neither records nor a digest: its data expired.
    pending = state.timelines.pop(timeline, None) or TimelineState(expired=True)
    return DigestState(
        id=digest_id,
        opened_at=now,
        dropped=pending.dropped,
        records=sorted(pending.records.values(), key=age_key, reverse=True),
        last_delivery=pending.last_delivery,
        # records that waited behind a digest that is gone: it expired
        expired=pending.expired or pending.behind_open,
        reason=reason_of(pending.cause, pending.last_delivery),
    )


def _after_close(
    state: PartitionState, timeline: str, digest: DigestState, policy: TimelinePolicy, now: float
) -> None:
    """Where a closed digest's timeline goes: retired, cooling down, or WAITING."""
    pending = state.timelines.get(timeline)
    if not digest.records and (pending is None or not pending.records):
        # An empty digest ends the cool-down: the timeline retires.
        state.timelines.pop(timeline, None)
        state.ready.pop(timeline, None)
        state.waiting.pop(timeline, None)
        return
    if pending is None and policy.schedule is None:
        # Nothing came while it was open: the timeline cools down in no set, its meta
        # alone saying when the cool-down ends (add's _wake reads it).
        state.timelines[timeline] = TimelineState(last_delivery=now, cause=DigestReason.COOLDOWN)
        state.ready.pop(timeline, None)
        state.waiting.pop(timeline, None)  # maintenance's, for a close that took long
        return
    if pending is None:
        pending = state.timelines[timeline] = TimelineState()
    pending.last_delivery = now
    pending.behind_open = False
    state.ready.pop(timeline, None)
    # A calendar timeline waits for its next fire, others for the cool-down, unless a
    # flush or an urgent record came while the digest was open, or flush_at records did:
    # then right after the floor (add leaves a READY timeline alone, so the close checks).
    soon = None
    if pending.cause in ("FLUSHED", "URGENT"):
        soon = DigestReason(pending.cause)
    elif policy.flush_at is not None and len(pending.records) >= policy.flush_at:
        soon = DigestReason.FLUSH_AT
    due, cause = next_due(policy).after(now, soon)
    pending.cause = cause
    state.waiting[timeline] = due
