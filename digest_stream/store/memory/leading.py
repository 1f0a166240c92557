"""The model's leading edge: digests an add gave to new timelines, until settled or reclaimed."""

from __future__ import annotations

from collections.abc import Sequence

from digest_stream.store import validate
from digest_stream.store.memory.admin import MemoryAdmin
from digest_stream.store.memory.state import DigestState, PartitionState, TimelineState


class MemoryLeading(MemoryAdmin):
    """``settle`` and ``reclaim``, and how an add leaves a timeline it led (lua/leading.lua)."""

    def _lead(self, state: PartitionState, name: str, digest_id: str, now: float) -> None:
        """The timeline just opened as ``digest_id`` is left as its close would leave it
        (cooling down since ``now``) and the digest kept until settled or reclaimed."""
        digest = state.digests.pop(name)
        del state.ready[name]
        state.timelines[name] = TimelineState(last_delivery=now, cause="COOLDOWN")
        state.waiting[name] = now + self._policy(name).minimum_delay
        state.leading[digest_id] = (name, digest)

    def settle(self, partition: int, digest_ids: Sequence[str]) -> list[bool]:
        """Forget leading digests the broker acknowledged; per id, whether it was kept."""
        state = self._partition(partition)
        ids = [validate.digest_id(digest_id) for digest_id in digest_ids]
        return [state.leading.pop(digest_id, None) is not None for digest_id in ids]

    def reclaim(
        self, partition: int, now: float, digest_ids: Sequence[str] | None = None
    ) -> list[str]:
        """Hand leading digests (None: every one kept) back to delivery; the timelines to
        announce (in the order asked; every one kept: in no particular order)."""
        state = self._partition(partition)
        now = validate.time_value(now, "now")
        if digest_ids is None:
            ids = list(state.leading)
        else:
            ids = [validate.digest_id(digest_id) for digest_id in digest_ids]
        announce: dict[str, None] = {}
        for digest_id in ids:
            kept = state.leading.pop(digest_id, None)
            if kept is None:
                continue
            name, digest = kept
            announce[name] = None
            self._reclaim_one(state, name, digest, now)
        return list(announce)

    @staticmethod
    def _reclaim_one(state: PartitionState, name: str, digest: DigestState, now: float) -> None:
        if name in state.digests:
            # Another digest of it is open: these records wait behind it (a new id).
            timeline = state.timelines.setdefault(name, TimelineState())
            for record in reversed(digest.records):  # oldest first, as they were added
                timeline.records[record.id] = record
            return
        state.digests[name] = digest
        state.waiting.pop(name, None)
        state.ready.setdefault(name, now)
