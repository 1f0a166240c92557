"""RedisStore: the digest store over the ``digest_stream`` Redis Functions library.

Works unchanged over ``redis.Redis`` and ``redis.cluster.RedisCluster``: every call
touches the keys of one input partition (one hash tag, one slot) and is routed by
that tag. One FCALL per operation per partition batch, never one per record.

It holds its parts and hands each call to one of them: ``RedisCalls`` (the client, the
library check, one FCALL), ``RedisWrites`` (adding, the schedule), ``RedisDigests``
(open/close) and ``RedisAdmin`` (inspect, admin, the fence). Every call raises the store's
exceptions, never redis-py's (``errors.translated``).
"""

from __future__ import annotations

from collections.abc import Sequence

from digest_stream.store.base import (
    DEFAULT_SLICE,
    AddResult,
    DigestTarget,
    DueBatch,
    Fence,
    NewRecord,
    OpenDigest,
    PartitionStats,
    Readiness,
    TimelineInfo,
)
from digest_stream.store.errors import InvalidState
from digest_stream.store.policy import PolicyResolver, TimelinePolicy
from digest_stream.store.redis import library
from digest_stream.store.redis.admin import RedisAdmin
from digest_stream.store.redis.calls import DEFAULT_INLINE_RECORDS, RedisCalls, library_versions
from digest_stream.store.redis.digests import RedisDigests
from digest_stream.store.redis.errors import translated
from digest_stream.store.redis.routing import RedisClient
from digest_stream.store.redis.writes import RedisWrites


class RedisStore:
    """``DigestStore`` over Redis 7 Functions, single node or Redis Cluster."""

    @translated
    def __init__(
        self,
        client: RedisClient,
        *,
        namespace: str = "d",
        policy: TimelinePolicy | None = None,
        resolver: PolicyResolver | None = None,
        load_library: bool = True,
        inline_records: int = DEFAULT_INLINE_RECORDS,
    ) -> None:
        self.calls = RedisCalls(
            client,
            namespace=namespace,
            policy=policy,
            resolver=resolver,
            load_library=load_library,
            inline_records=inline_records,
        )
        self._writes = RedisWrites(self.calls)
        self._digests = RedisDigests(self.calls)
        self._admin = RedisAdmin(self.calls)

    @property
    def client(self) -> RedisClient:
        """The redis-py client the store calls through."""
        return self.calls.client

    @property
    def namespace(self) -> str:
        """The namespace every key of this store is in."""
        return self.calls.namespace

    @property
    def policy(self) -> TimelinePolicy:
        """The default timeline policy."""
        return self.calls.policy

    @property
    def inline_records(self) -> int:
        """Records a timeline keeps inline (a string, a list from two) before it becomes a hash."""
        return self.calls.inline_records

    @translated
    def ensure_library(self) -> None:
        """Load (when allowed) and verify the Functions library on every primary."""
        self.calls.ensure_library()

    # ---------------------------------------------------------------- adding, schedule

    @translated
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
        """Store a batch of records of one partition, fenced by offset: one FCALL, control
        operations included, the leading edge's digests opened in it when asked."""
        return self._writes.add(
            partition,
            records,
            now,
            expected_fence=expected_fence,
            through_offset=through_offset,
            topic_id=topic_id,
            open_nonce=open_nonce,
        )

    @translated
    def schedule(
        self, partition: int, now: float, *, limit: int = DEFAULT_SLICE, nonce: str | None = None
    ) -> DueBatch:
        """Move up to ``limit`` due WAITING timelines to READY; ``.more`` when more are due
        (a re-send of the call, same ``nonce``, answers the same)."""
        return self._writes.schedule(partition, now, limit=limit, nonce=nonce)

    @translated
    def maintenance(
        self, partition: int, deadline: float, now: float, *, limit: int = DEFAULT_SLICE
    ) -> DueBatch:
        """Move up to ``limit`` stale READY timelines back to WAITING; ``.more`` if more remain."""
        return self._writes.maintenance(partition, deadline, now, limit=limit)

    # ---------------------------------------------------------------- digests

    @translated
    def open(self, partition: int, timeline: str, digest_id: str, now: float) -> OpenDigest:
        """Open (or reopen) the timeline's digest; ``digest_id`` is used only for a new one."""
        return self._digests.open(partition, timeline, digest_id, now)

    @translated
    def close(self, partition: int, timeline: str, digest_id: str, now: float) -> bool:
        """Close that digest; False when the id is unknown or already closed."""
        return self._digests.close(partition, timeline, digest_id, now)

    @translated
    def open_many(
        self, targets: Sequence[DigestTarget], now: float
    ) -> list[OpenDigest | InvalidState]:
        """open() for several timelines: one FCALL per partition, one round trip per node."""
        return self._digests.open_many(targets, now)

    @translated
    def close_many(self, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """close() for several digests: one FCALL per partition, one round trip per node."""
        return self._digests.close_many(targets, now)

    @translated
    def close_leading(self, nonce: str, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """close_many() for digests one add led: one FCALL, the batch form closed in one write."""
        return self._digests.close_leading(nonce, targets, now)

    # ---------------------------------------------------------------- inspect, admin, fence

    @translated
    def delete(self, partition: int, timeline: str) -> bool:
        """Remove the timeline and everything it owns; False when it did not exist."""
        return self._admin.delete(partition, timeline)

    @translated
    def inspect(self, partition: int, timeline: str) -> TimelineInfo:
        """Describe one timeline (read-only)."""
        return self._admin.inspect(partition, timeline)

    @translated
    def stats(self, partition: int) -> PartitionStats:
        """Count WAITING and READY timelines of a partition (read-only)."""
        return self._admin.stats(partition)

    @translated
    def applied_offset(self, partition: int) -> int | None:
        """The partition's fence: last applied offset, or None when absent."""
        return self._admin.applied_offset(partition)

    @translated
    def fence(self, partition: int) -> Fence:
        """The partition's fence with the topic id it belongs to."""
        return self._admin.fence(partition)

    @translated
    def set_applied_offset(
        self, partition: int, offset: int | None, *, topic_id: str | None = None
    ) -> None:
        """Write exactly this fence (a new topic, admin replays); both None remove it."""
        self._admin.set_applied_offset(partition, offset, topic_id=topic_id)

    # ---------------------------------------------------------------- the service's checks

    @translated
    def server_time(self) -> float:
        """Redis's own clock (TIME on the first primary), in seconds since the epoch."""
        return self._admin.server_time()

    @translated
    def readiness(self) -> Readiness:
        """The library version on every primary ("redis" for a single node), read-only."""
        return Readiness(library.VERSION, library_versions(self.calls.client))

    def disconnect(self) -> None:
        """Close the client's connections (redis-py reconnects on the next call)."""
        self.calls.client.close()
