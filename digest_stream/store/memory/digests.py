"""Opening and closing digests in the reference model, as the Lua's digests part does."""

from __future__ import annotations

from collections.abc import Sequence

from digest_stream.store import validate
from digest_stream.store.base import DigestTarget, OpenDigest, age_key, reason_of
from digest_stream.store.due import next_due
from digest_stream.store.errors import InvalidArgument, InvalidState
from digest_stream.store.memory.state import DigestState, MemoryState, TimelineState
from digest_stream.vocabulary import DigestReason


class MemoryDigests:
    """``open``, ``close`` and their batch forms of ``MemoryStore``."""

    def __init__(self, state: MemoryState) -> None:
        self.state = state

    def open(self, partition: int, timeline: str, digest_id: str, now: float) -> OpenDigest:
        """Open (or reopen) the timeline's digest; ``digest_id`` is used only for a new one."""
        state = self.state.partition(partition)
        validate.name(timeline, "timeline")
        validate.digest_id(digest_id)
        now = validate.time_value(now, "now")
        rule = next_due(self.state.timeline_policy(timeline))
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
        state = self.state.partition(partition)
        validate.name(timeline, "timeline")
        validate.digest_id(digest_id)
        now = validate.time_value(now, "now")
        policy = self.state.timeline_policy(timeline)
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
        if pending is None and policy.schedule is None:
            # Nothing came while it was open: the timeline cools down in no set, its meta
            # alone saying when the cool-down ends (add's _wake reads it).
            state.timelines[timeline] = TimelineState(
                last_delivery=now, cause=DigestReason.COOLDOWN
            )
            state.ready.pop(timeline, None)
            state.waiting.pop(timeline, None)  # maintenance's, for a close that took long
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

    def close_leading(self, nonce: str, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """close_many() of digests one add led: the same, after the same checks as Redis's."""
        now = validate.time_value(now, "now")
        if validate.open_nonce(nonce, "nonce") is None:
            raise InvalidArgument("close_leading needs the nonce of the add that led them")
        if any(target[0] != targets[0][0] for target in targets):
            raise InvalidArgument("close_leading closes the digests of one add: one partition")
        return self.close_many(targets, now)
