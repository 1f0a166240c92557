"""RedisStore: the digest store over the ``digest_stream`` Redis Functions library.

Works unchanged over ``redis.Redis`` and ``redis.cluster.RedisCluster``: every call
touches the keys of one input partition (one hash tag, one slot) and is routed by
that tag. One FCALL per operation per partition batch, never one per record.

Each operation is written here once: its arguments checked (``store.validate``) and packed
(``packing``), its call made through the transport (``calls``: the client, the library,
one FCALL), its reply read (``replies``). Every call raises the store's exceptions, never
redis-py's (``errors.translated``).
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
    Fence,
    NewRecord,
    OpenDigest,
    PartitionStats,
    Readiness,
    TimelineInfo,
    new_nonce,
)
from digest_stream.store.due import next_due
from digest_stream.store.errors import InvalidArgument, InvalidState
from digest_stream.store.limits import INLINE_MAX_RECORDS
from digest_stream.store.policy import PolicyResolver, TimelinePolicy
from digest_stream.store.redis import library, packing, protocol, replies, routing
from digest_stream.store.redis.calls import RedisCalls, library_versions
from digest_stream.store.redis.errors import BACKEND, translated
from digest_stream.store.redis.policy_wire import pack
from digest_stream.store.redis.replies import arg, integer
from digest_stream.store.redis.routing import RedisClient
from digest_stream.vocabulary import State

#: Timelines with up to this many records live inline (a string, a list from two records; see
#: lua/containers.lua): most timelines hold a handful of records, and an inline container saves
#: the per-entry overhead of a hash. Past it (or past 8 KiB) a timeline becomes a hash. An
#: append costs the same at any size (it never reads the records), so the limit is set by the
#: reads that do (an open, a trim, a cancel: all O(records) anyway) and by memory: 32 keeps a
#: timeline of 20 events of 200 B inline, where the move to a hash cost one add about 20 adds'
#: time.
DEFAULT_INLINE_RECORDS = 32


def _checked_inline_records(value: object) -> int:
    """The ``inline_records`` of a RedisStore: an int in [0, INLINE_MAX_RECORDS]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"inline_records must be an int, got {value!r}")
    if not 0 <= value <= INLINE_MAX_RECORDS:
        raise InvalidArgument(f"inline_records must be in [0, {INLINE_MAX_RECORDS}], got {value}")
    return value


class RedisStore:
    """``DigestStore`` over Redis 7 Functions, single node or Redis Cluster."""

    label = BACKEND

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
        self.calls = RedisCalls(client, namespace=namespace, load_library=load_library)
        #: The default timeline policy.
        self.policy, self._resolver = validate.policies(policy, resolver)
        # The writing calls' partition_ttl and inline_records arguments: fixed for the
        # store's life, so formatted once.
        self._partition_ttl = arg(self.policy.ttl)
        #: Records a timeline keeps inline (a string, a list from two) before it becomes a hash.
        self.inline_records = _checked_inline_records(inline_records)
        self._inline_arg = str(inline_records)
        self.calls.ensure_library()

    @property
    def client(self) -> RedisClient:
        """The redis-py client the store calls through."""
        return self.calls.client

    @property
    def namespace(self) -> str:
        """The namespace every key of this store is in."""
        return self.calls.namespace

    def _policy(self, timeline: str) -> TimelinePolicy:
        """The checked policy of one timeline."""
        return validate.policy(self._resolver(timeline), timeline)

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
        """One ds_add for the batch, its control operations (applied in offset order among the
        records) and the leading edge's opens included."""
        tag = self.calls.tag(partition)
        now, expected, through, topic, nonce = validate.add_arguments(
            now, expected_fence, through_offset, topic_id, open_nonce
        )
        batch, timelines, policies = packing.add_batch(records, now, through, self._resolver)
        head = {
            "now": arg(now),
            "partition_ttl": self._partition_ttl,
            "inline_records": self._inline_arg,
            "expected_fence": "" if expected is None else str(expected),
            "through_offset": "" if through is None else str(through),
            "topic_id": topic or "",
            "open_nonce": nonce or "",
            "numbering": protocol.ADD_NUMBERING,
        }
        args = [*(head[name] for name in protocol.ADD_HEAD), *batch]
        reply = self.calls.call(protocol.DS_ADD, tag, args)
        # the leading edge's digests, each with its timeline's due rule (store.due)
        return replies.add_result(reply, records, now, timelines, policies, nonce)

    @translated
    def schedule(
        self, partition: int, now: float, *, limit: int = DEFAULT_SLICE, nonce: str | None = None
    ) -> DueBatch:
        """One ds_schedule, with ``nonce`` or a fresh one: a client whose retry re-sends a call
        whose reply it lost (redis-py's default retry does, with the same arguments) is
        answered the first run's reply, so what it moved is announced."""
        tag = self.calls.tag(partition)
        now = validate.time_value(now, "now")
        nonce = validate.open_nonce(nonce, "schedule nonce") or new_nonce()
        args = protocol.DS_SCHEDULE.arguments(
            now=arg(now),
            partition_ttl=self._partition_ttl,
            limit=str(validate.limit(limit)),
            nonce=nonce,
        )
        return replies.due_batch(self.calls.call(protocol.DS_SCHEDULE, tag, args))

    @translated
    def maintenance(
        self, partition: int, deadline: float, now: float, *, limit: int = DEFAULT_SLICE
    ) -> DueBatch:
        """One ds_maintenance."""
        tag = self.calls.tag(partition)
        deadline = validate.time_value(deadline, "deadline")
        now = validate.time_value(now, "now")
        args = protocol.DS_MAINTENANCE.arguments(
            deadline=arg(deadline),
            now=arg(now),
            partition_ttl=self._partition_ttl,
            limit=str(validate.limit(limit)),
        )
        return replies.due_batch(self.calls.call(protocol.DS_MAINTENANCE, tag, args))

    # ---------------------------------------------------------------- digests

    def _digest_call(
        self, partition: int, timeline: str, digest_id: str, now: float
    ) -> tuple[str, list[str | bytes], TimelinePolicy]:
        """A digest call's tag, its leading arguments (timeline, id, now) and the policy."""
        tag = self.calls.tag(partition)
        validate.name(timeline, "timeline")
        validate.digest_id(digest_id)
        now = validate.time_value(now, "now")
        return tag, [timeline, digest_id, arg(now)], self._policy(timeline)

    @translated
    def open(self, partition: int, timeline: str, digest_id: str, now: float) -> OpenDigest:
        """One ds_open."""
        tag, args, policy = self._digest_call(partition, timeline, digest_id, now)
        reply = self.calls.call(protocol.DS_OPEN, tag, [*args, *pack(policy, now)], timeline)
        return replies.open_digest(timeline, reply, next_due(policy))

    @translated
    def close(self, partition: int, timeline: str, digest_id: str, now: float) -> bool:
        """One ds_close."""
        tag, args, policy = self._digest_call(partition, timeline, digest_id, now)
        args += (self._partition_ttl, *pack(policy, now))
        return integer(self.calls.call(protocol.DS_CLOSE, tag, args, timeline)) == 1

    @translated
    def open_many(
        self, targets: Sequence[DigestTarget], now: float
    ) -> list[OpenDigest | InvalidState]:
        """One ds_open_many per partition, pipelined in one round trip per Redis node."""
        now = validate.time_value(now, "now")
        policies, packed, resolved = packing.targets(targets, now, self._resolver)
        head = [arg(now), *policies.args()]
        found = self.calls.many(protocol.DS_OPEN_MANY, targets, head, packed)
        return [
            InvalidState(f"timeline is not ready: {timeline}")
            if reply == 0
            else replies.open_digest(timeline, reply, next_due(policy))
            for (_, timeline, _), reply, policy in zip(targets, found, resolved, strict=True)
        ]

    @translated
    def close_many(self, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """One ds_close_many per partition, pipelined the same way."""
        now = validate.time_value(now, "now")
        policies, packed, _ = packing.targets(targets, now, self._resolver)
        head = [arg(now), self._partition_ttl, *policies.args()]
        found = self.calls.many(protocol.DS_CLOSE_MANY, targets, head, packed)
        return [integer(reply) == 1 for reply in found]

    @translated
    def close_leading(self, nonce: str, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """ONE ds_close_leading, which closes the add's batch-form digests in one write."""
        now = validate.time_value(now, "now")
        checked = validate.leading_targets(nonce, targets)
        if not targets:
            return []
        policies, packed, _ = packing.targets(targets, now, self._resolver)
        head = [arg(now), self._partition_ttl, checked, str(len(targets))]
        args = [*head, *policies.args(), b"".join(packed)]
        reply = self.calls.call(protocol.DS_CLOSE_LEADING, self.calls.tag(targets[0][0]), args)
        return replies.closed_leading(reply, targets)

    # ---------------------------------------------------------------- inspect, admin, fence

    @translated
    def delete(self, partition: int, timeline: str) -> bool:
        """One ds_delete."""
        tag = self.calls.tag(partition)
        validate.name(timeline, "timeline")
        return integer(self.calls.call(protocol.DS_DELETE, tag, [timeline], timeline)) == 1

    @translated
    def inspect(self, partition: int, timeline: str) -> TimelineInfo:
        """One ds_inspect (read-only)."""
        tag = self.calls.tag(partition)
        validate.name(timeline, "timeline")
        reply = self.calls.call(protocol.DS_INSPECT, tag, [timeline], timeline)
        info = replies.timeline_info(timeline, reply)
        if info.state == State.COOLING and info.last_delivery is not None:
            # due when the cool-down ends: the policy's, which the library is not told
            due = next_due(self._policy(timeline)).cooled(info.last_delivery)
            return dataclasses.replace(info, due=due)
        return info

    @translated
    def stats(self, partition: int) -> PartitionStats:
        """One ds_stats (read-only)."""
        reply = self.calls.call(protocol.DS_STATS, self.calls.tag(partition), [])
        return replies.partition_stats(partition, reply)

    @translated
    def applied_offset(self, partition: int) -> int | None:
        """The offset of ``fence``."""
        return self.fence(partition).offset

    @translated
    def fence(self, partition: int) -> Fence:
        """One ds_fence_get (read-only)."""
        return replies.fence(self.calls.call(protocol.DS_FENCE_GET, self.calls.tag(partition), []))

    @translated
    def set_applied_offset(
        self, partition: int, offset: int | None, *, topic_id: str | None = None
    ) -> None:
        """One ds_fence_set."""
        tag = self.calls.tag(partition)
        value = "" if offset is None else str(validate.offset(offset))
        topic = validate.topic_id(topic_id) or ""
        args = protocol.DS_FENCE_SET.arguments(offset=value, topic_id=topic)
        self.calls.call(protocol.DS_FENCE_SET, tag, args)

    # ---------------------------------------------------------------- the service's checks

    @translated
    def server_time(self) -> float:
        """Redis's own clock (TIME on the first primary), in seconds since the epoch."""
        (node, *_) = routing.primaries(self.calls.client)
        return replies.server_time(routing.on_node(self.calls.client, node, "TIME"))

    @translated
    def readiness(self) -> Readiness:
        """The library version on every primary ("redis" for a single node), read-only."""
        return Readiness(library.VERSION, library_versions(self.calls.client))

    def disconnect(self) -> None:
        """Close the client's connections (redis-py reconnects on the next call)."""
        self.calls.client.close()
