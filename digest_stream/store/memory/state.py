"""The reference model's state: partitions, timelines, open digests; the shared lookups."""

from __future__ import annotations

from dataclasses import dataclass, field

from digest_stream.store import validate
from digest_stream.store.base import DueBatch, StoredRecord
from digest_stream.store.policy import PolicyResolver, TimelinePolicy


def score_key(item: tuple[str, float]) -> tuple[float, bytes]:
    """Zset order: score, then member bytes."""
    return (item[1], item[0].encode("utf-8"))


@dataclass
class TimelineState:
    """A timeline's pending records and meta."""

    records: dict[str, StoredRecord] = field(default_factory=dict)
    dropped: int = 0  # trimmed since the last digest was opened
    last_delivery: float | None = None
    expired: bool = False  # earlier records of this still scheduled timeline expired
    behind_open: bool = False  # started while a digest was open: its records wait behind it
    cause: str | None = None  # why it is due (a REASON), when recorded


@dataclass
class DigestState:
    """An open digest."""

    id: str
    opened_at: float
    dropped: int
    records: list[StoredRecord]  # newest first
    last_delivery: float | None
    expired: bool
    reason: str


@dataclass
class PartitionState:
    """One input partition: fence, schedule, timelines, open digests."""

    fence: int | None = None
    fence_topic: str | None = None
    waiting: dict[str, float] = field(default_factory=dict)
    ready: dict[str, float] = field(default_factory=dict)
    timelines: dict[str, TimelineState] = field(default_factory=dict)
    digests: dict[str, DigestState] = field(default_factory=dict)
    #: The last schedule call with a nonce that moved something: its nonce and reply.
    last_schedule: tuple[str, DueBatch] | None = None
    #: The open nonces of the adds that led a digest (another add may not take one again).
    led_nonces: set[str] = field(default_factory=set)


class MemoryState:
    """The partitions of a ``MemoryStore``, its policies and the lookups every call uses
    (each part of the model is given this one object)."""

    def __init__(
        self,
        *,
        policy: TimelinePolicy | None = None,
        resolver: PolicyResolver | None = None,
    ) -> None:
        self.policy, self._resolver = validate.policies(policy, resolver)
        self._partitions: dict[int, PartitionState] = {}

    def partition(self, partition: int) -> PartitionState:
        """One partition's state (made empty on first use)."""
        validate.partition(partition)
        return self._partitions.setdefault(partition, PartitionState())

    def timeline_policy(self, timeline: str) -> TimelinePolicy:
        """The checked policy of one timeline."""
        return validate.policy(self._resolver(timeline), timeline)

    @staticmethod
    def cooling(state: PartitionState, name: str) -> TimelineState | None:
        """The timeline's meta when it cools down: a meta alone (a close left nothing
        pending) in no set, with no digest open; None otherwise."""
        timeline = state.timelines.get(name)
        if (
            timeline is None
            or timeline.records
            or timeline.last_delivery is None
            or name in state.ready
            or name in state.waiting
            or name in state.digests
        ):
            return None
        return timeline

    @staticmethod
    def last_delivery(state: PartitionState, name: str) -> float | None:
        """When the timeline's last digest was closed (its records' or its digest's meta)."""
        timeline = state.timelines.get(name)
        if timeline is not None and timeline.last_delivery is not None:
            return timeline.last_delivery
        digest = state.digests.get(name)
        return digest.last_delivery if digest is not None else None
