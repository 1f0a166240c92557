"""RedisStore: the digest store over the ``digest_stream`` Redis Functions library.

Works unchanged over ``redis.Redis`` and ``redis.cluster.RedisCluster``: every call
touches the keys of one input partition (one hash tag, one slot) and is routed by
that tag. One FCALL per operation per partition batch, never one per record.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.exceptions import ResponseError

from digest_stream.store import keys, library, replies, routing, validate
from digest_stream.store.base import (
    DEFAULT_SLICE,
    AddResult,
    DigestTarget,
    DueBatch,
    Fence,
    InvalidArgument,
    InvalidState,
    LibraryVersionMismatch,
    NewRecord,
    OpenDigest,
    PartitionStats,
    PolicyResolver,
    TimelineInfo,
    TimelinePolicy,
)
from digest_stream.store.library import library_versions
from digest_stream.store.replies import (
    Reply,
    arg,
    array,
    integer,
    map_error,
)
from digest_stream.store.routing import Call
from digest_stream.store.validate import MAX_OFFSET

LIBRARY_NAME = library.NAME
LIBRARY_SOURCE = library.SOURCE
#: Version of the library this code expects on the server.
LIBRARY_VERSION = library.VERSION
#: The client types RedisStore works over.
RedisClient = routing.RedisClient

#: Timelines with up to this many records live in one compact string (see digests.lua):
#: most timelines hold a handful of records, and one allocation each saves the per-entry
#: overhead of a hash. Past it (or past 8 KiB) a timeline becomes a hash.
DEFAULT_INLINE_RECORDS = 16
#: Same bound as INLINE_MAX_RECORDS in digests.lua.
MAX_INLINE_RECORDS = 128
#: Targets per ds_open_many / ds_close_many call: one partition's share of a delivery batch
#: in one call, yet a bound on how long one call (with large digests) holds Redis.
MANY_CHUNK = 256


def _short_ascii(value: object) -> bool:
    """A name validate.name accepts without encoding it (the common timeline and record id)."""
    return type(value) is str and value.isascii() and 0 < len(value) <= validate.MAX_NAME_BYTES


class RedisStore:
    """``DigestStore`` over Redis 7 Functions, single node or Redis Cluster."""

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
        if client.get_connection_kwargs().get("decode_responses"):
            raise InvalidArgument("the Redis client must not decode responses: payloads are bytes")
        self.client = client
        self.namespace = validate.namespace(namespace)
        default = policy if policy is not None else TimelinePolicy()
        self.policy = validate.policy(default, "<default>")
        self._resolver: PolicyResolver = resolver if resolver is not None else (lambda _: default)
        self._load_library = load_library
        if isinstance(inline_records, bool) or not isinstance(inline_records, int):
            raise InvalidArgument(f"inline_records must be an int, got {inline_records!r}")
        if not 0 <= inline_records <= MAX_INLINE_RECORDS:
            raise InvalidArgument(
                f"inline_records must be in [0, {MAX_INLINE_RECORDS}], got {inline_records}"
            )
        self.inline_records = inline_records
        self.ensure_library()

    # Library management -------------------------------------------------------

    def ensure_library(self) -> None:
        """Load (when allowed) and verify the library on every primary: its version, then
        its code (any user granted FUNCTION LOAD can replace the server-wide library)."""
        nodes = routing.primaries(self.client)
        if self._load_library:
            for node in nodes:
                routing.on_node(self.client, node, "FUNCTION", "LOAD", "REPLACE", LIBRARY_SOURCE)
        versions = library_versions(self.client)
        for node in nodes:
            where = routing.node_name(node)
            found = versions.get(where)
            if found is None:
                raise LibraryVersionMismatch(
                    f"Redis Functions library {LIBRARY_NAME!r} is not loaded on {where}; "
                    f"this code needs version {LIBRARY_VERSION} "
                    "(construct RedisStore with load_library=True to load it)"
                )
            if found != LIBRARY_VERSION:
                raise LibraryVersionMismatch(
                    f"Redis Functions library {LIBRARY_NAME!r} on {where} is version {found}, "
                    f"this code needs version {LIBRARY_VERSION} "
                    "(construct RedisStore with load_library=True to replace it)"
                )
            listed = routing.on_node(
                self.client,
                node,
                "FUNCTION",
                "LIST",
                "LIBRARYNAME",
                LIBRARY_NAME,
                "WITHCODE",
            )
            code = library.code_in(listed)
            if code != LIBRARY_SOURCE:
                seen = "none" if code is None else library.fingerprint(code)
                raise LibraryVersionMismatch(
                    f"Redis Functions library {LIBRARY_NAME!r} on {where} says version {found} "
                    f"but its code is not this version's (sha256 {seen}, expected "
                    f"{library.FINGERPRINT}): replaced by someone; an administrator must reload it"
                )

    # Calls --------------------------------------------------------------------

    def _fcall(
        self,
        function: str,
        call_keys: list[str],
        args: Sequence[str | bytes],
        *,
        read_only: bool = False,
    ) -> Reply:
        command = "FCALL_RO" if read_only else "FCALL"
        try:
            return routing.fcall(self.client, command, function, call_keys, args)
        except ResponseError as error:
            if "Function not found" in str(error) and self._load_library:
                # A primary that restarted empty or joined the cluster: load, retry once.
                self.ensure_library()
                try:
                    return routing.fcall(self.client, command, function, call_keys, args)
                except ResponseError as retry_error:
                    raise map_error(retry_error) from retry_error
            raise map_error(error) from error

    def _tag(self, partition: int) -> str:
        return keys.partition_tag(self.namespace, validate.partition(partition))

    def _policy(self, timeline: str) -> TimelinePolicy:
        return validate.policy(self._resolver(timeline), timeline)

    # DigestStore ----------------------------------------------------------------

    def add(
        self,
        partition: int,
        records: Sequence[NewRecord],
        now: float,
        *,
        expected_fence: int | None = None,
        through_offset: int | None = None,
        topic_id: str | None = None,
    ) -> AddResult:
        """Store a batch of records of one partition, fenced by offset (one FCALL; a batch
        with control operations: one per run of records and one per control, in order)."""
        tag = self._tag(partition)
        now = validate.time_value(now, "now")
        expected, through = validate.fence_arguments(expected_fence, through_offset)
        topic = validate.topic_id(topic_id)
        return self._add_call(tag, records, now, expected, through, topic)

    def _add_call(
        self,
        tag: str,
        records: Sequence[NewRecord],
        now: float,
        expected: int | None,
        through: int | None,
        topic: str | None,
    ) -> AddResult:
        """One ds_add; a batch holding controls goes to _add_with_controls instead."""
        index: dict[str, str] = {}
        policy_args: list[str | bytes] = []
        record_args: list[str | bytes] = []
        # Hot path (bench/hotpath_bench.py): a batch's timelines mostly share one policy
        # object (the default), so each object is checked and formatted once per call, not
        # once per timeline. The dict holds the object, so its id cannot be reused meanwhile.
        formatted: dict[int, tuple[object, list[str]]] = {}
        # A batch's records mostly share a few timestamps (milliseconds): format each once.
        stamps: dict[float, str] = {}
        last = MAX_OFFSET if through is None else through
        checked = False  # validate.records ran over the whole batch
        for record in records:
            # The common record passes these inline checks; on the first that does not, the
            # whole batch is judged (and refused with its precise error) by validate.records.
            if not checked and not (
                type(record) is NewRecord
                and type(record.payload) is bytes
                and type(record.offset) is int
                and 0 <= record.offset <= last
                and _short_ascii(record.timeline)
                and _short_ascii(record.id)
                and record.control is None
            ):
                if validate.records(records, through):  # the batch holds control operations
                    return self._add_with_controls(tag, records, now, expected, through, topic)
                checked = True
            timestamp = record.timestamp
            stamp = stamps.get(timestamp) if type(timestamp) is float else None
            if stamp is None:
                timestamp = validate.time_value(timestamp, "record timestamp")
                stamp = stamps[timestamp] = arg(timestamp)
            position = index.get(record.timeline)
            if position is None:
                position = index[record.timeline] = str(len(index) + 1)
                resolved = self._resolver(record.timeline)
                cached = formatted.get(id(resolved))
                if cached is None:
                    policy = validate.policy(resolved, record.timeline)
                    cached = formatted[id(resolved)] = (
                        resolved,
                        [
                            arg(policy.minimum_delay),
                            arg(policy.increment_delay),
                            arg(policy.maximum_delay),
                            arg(policy.ttl),
                            str(policy.capacity or 0),
                            str(policy.flush_at or 0),
                            "" if policy.schedule is None else arg(policy.next_fire(now) or now),
                        ],
                    )
                policy_args.append(record.timeline)
                policy_args += cached[1]
            record_args += (position, record.id, stamp, str(record.offset), record.payload)
        reply = self._fcall(
            "ds_add",
            [keys.fence_key(tag), keys.waiting_key(tag), keys.ready_key(tag)],
            [
                arg(now),
                arg(self.policy.ttl),
                str(self.inline_records),
                "" if expected is None else str(expected),
                "" if through is None else str(through),
                topic or "",
                str(len(index)),
                *policy_args,
                *record_args,
            ],
        )
        return replies.add_result(reply)

    def _add_with_controls(
        self,
        tag: str,
        records: Sequence[NewRecord],
        now: float,
        expected: int | None,
        through: int | None,
        topic: str | None,
    ) -> AddResult:
        """A batch with controls: each run of records (one ds_add) and each control (one
        ds_control) in offset order, each fenced, so a crash between two calls replays
        exactly what the fence has not seen. Control messages are rare; the plain path is
        untouched by them."""
        calls: list[NewRecord | list[NewRecord]] = []
        for record in records:
            if record.control is not None:
                calls.append(record)
            elif calls and isinstance(calls[-1], list):
                calls[-1].append(record)
            else:
                calls.append([record])
        ready: list[str] = []
        added = skipped = dropped = cancelled = 0
        fence_before: int | None = None
        fence_after: int | None = None
        fence_topic: str | None = None
        for position, item in enumerate(calls):
            last = position == len(calls) - 1
            # The caller's expectation guards the first call; each later one expects what
            # the previous left (Redis losing writes in between is noticed the same way).
            guard = expected if position == 0 else fence_after
            upto = through if last else None
            if isinstance(item, list):
                result = self._add_call(tag, item, now, guard, upto, topic)
            else:
                result = self._control_call(tag, item, now, guard, upto, topic)
            if topic is not None and result.fence_topic not in (None, topic):
                return result  # another topic's fence: nothing applied (see fence.py)
            if guard is not None and (result.fence_before is None or result.fence_before < guard):
                # The fence is behind (on a later call: Redis lost writes in between): report
                # the fence found, as a plain add does, so the caller replays from it.
                found = result.fence_before
                return AddResult([], 0, 0, 0, found, found, result.fence_topic)
            if position == 0:
                fence_before, fence_topic = result.fence_before, result.fence_topic
            fence_after = result.fence_after
            ready += [name for name in result.ready if name not in ready]
            added += result.added
            skipped += result.skipped
            dropped += result.dropped
            cancelled += result.cancelled
        return AddResult(
            ready, added, skipped, dropped, fence_before, fence_after, fence_topic, cancelled
        )

    def _control_call(
        self,
        tag: str,
        record: NewRecord,
        now: float,
        expected: int | None,
        through: int | None,
        topic: str | None,
    ) -> AddResult:
        """One ds_control: a flush or cancel of the record's timeline, fenced by its offset."""
        reply = self._fcall(
            "ds_control",
            [
                keys.fence_key(tag),
                keys.timeline_key(tag, record.timeline),
                keys.digest_key(tag, record.timeline),
                keys.waiting_key(tag),
                keys.ready_key(tag),
            ],
            [
                arg(now),
                str(record.offset),
                "" if expected is None else str(expected),
                "" if through is None else str(through),
                record.control or "",
                record.timeline,
                record.id,
                topic or "",
            ],
        )
        return replies.control_result(record.timeline, reply)

    def schedule(self, partition: int, now: float, *, limit: int = DEFAULT_SLICE) -> DueBatch:
        """Move up to ``limit`` due WAITING timelines to READY; ``.more`` when more are due."""
        tag = self._tag(partition)
        now = validate.time_value(now, "now")
        args = [arg(now), arg(self.policy.ttl), str(validate.limit(limit))]
        return replies.due_batch(self._fcall("ds_schedule", keys.partition_keys(tag), args))

    def maintenance(
        self, partition: int, deadline: float, now: float, *, limit: int = DEFAULT_SLICE
    ) -> DueBatch:
        """Move up to ``limit`` stale READY timelines back to WAITING; ``.more`` if more remain."""
        tag = self._tag(partition)
        deadline = validate.time_value(deadline, "deadline")
        now = validate.time_value(now, "now")
        args = [arg(deadline), arg(now), arg(self.policy.ttl), str(validate.limit(limit))]
        return replies.due_batch(self._fcall("ds_maintenance", keys.partition_keys(tag), args))

    def _checked(
        self, target: DigestTarget, now: float
    ) -> tuple[list[str], list[str | bytes], TimelinePolicy]:
        """A digest call's keys, its leading arguments (timeline, id, now) and the policy."""
        partition, timeline, digest_id = target
        tag = self._tag(partition)
        validate.name(timeline, "timeline")
        validate.digest_id(digest_id)
        now = validate.time_value(now, "now")
        return (
            keys.timeline_keys(tag, timeline),
            [timeline, digest_id, arg(now)],
            self._policy(timeline),
        )

    def _open_call(self, target: DigestTarget, now: float) -> Call:
        call_keys, args, policy = self._checked(target, now)
        return call_keys, [*args, arg(policy.ttl)]

    def _close_call(self, target: DigestTarget, now: float) -> Call:
        call_keys, args, policy = self._checked(target, now)
        fire = policy.next_fire(now)
        return call_keys, [
            *args,
            arg(policy.minimum_delay),
            arg(policy.ttl),
            arg(self.policy.ttl),
            "" if fire is None else arg(fire),
        ]

    def open(self, partition: int, timeline: str, digest_id: str, now: float) -> OpenDigest:
        """Open (or reopen) the timeline's digest; ``digest_id`` is used only for a new one."""
        call = self._open_call((partition, timeline, digest_id), now)
        return replies.open_digest(timeline, self._fcall("ds_open", *call))

    def close(self, partition: int, timeline: str, digest_id: str, now: float) -> bool:
        """Close that digest; False when the id is unknown or already closed."""
        call = self._close_call((partition, timeline, digest_id), now)
        return integer(self._fcall("ds_close", *call)) == 1

    def open_many(
        self, targets: Sequence[DigestTarget], now: float
    ) -> list[OpenDigest | InvalidState]:
        """open() for several timelines: one FCALL per partition (ds_open_many), pipelined in
        one round trip per Redis node; each open atomic on its own, in order."""
        now = validate.time_value(now, "now")
        fields: list[list[str | bytes]] = []
        for target in targets:
            timeline, digest_id, policy = self._target(target)
            fields.append([timeline, digest_id, arg(policy.ttl)])
        found = self._many("ds_open_many", targets, [arg(now)], fields)
        return [
            InvalidState(f"timeline is not ready: {target[1]}")
            if reply == 0
            else replies.open_digest(target[1], reply)
            for target, reply in zip(targets, found, strict=True)
        ]

    def close_many(self, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """close() for several digests: one FCALL per partition (ds_close_many), pipelined the
        same way."""
        now = validate.time_value(now, "now")
        fields: list[list[str | bytes]] = []
        for target in targets:
            timeline, digest_id, policy = self._target(target)
            fire = policy.next_fire(now)
            fields.append(
                [
                    timeline,
                    digest_id,
                    arg(policy.minimum_delay),
                    arg(policy.ttl),
                    "" if fire is None else arg(fire),
                ]
            )
        found = self._many("ds_close_many", targets, [arg(now), arg(self.policy.ttl)], fields)
        return [integer(reply) == 1 for reply in found]

    def _target(self, target: DigestTarget) -> tuple[str, str, TimelinePolicy]:
        _, timeline, digest_id = target
        validate.name(timeline, "timeline")
        validate.digest_id(digest_id)
        return timeline, digest_id, self._policy(timeline)

    def _many(
        self,
        function: str,
        targets: Sequence[DigestTarget],
        head: list[str | bytes],
        fields: Sequence[list[str | bytes]],
    ) -> list[Reply]:
        """One FCALL per partition (at most MANY_CHUNK targets each), pipelined by node;
        the per-target replies in target order."""
        groups: dict[int, list[int]] = {}
        for index, (partition, _, _) in enumerate(targets):
            groups.setdefault(partition, []).append(index)
        calls: list[Call] = []
        members: list[list[int]] = []
        for partition, indexes in groups.items():
            tag = self._tag(partition)
            call_keys = [keys.waiting_key(tag), keys.ready_key(tag)]
            for first in range(0, len(indexes), MANY_CHUNK):
                chunk = indexes[first : first + MANY_CHUNK]
                args = list(head)
                for index in chunk:
                    args += fields[index]
                calls.append((call_keys, args))
                members.append(chunk)
        out: list[Reply] = [None] * len(targets)
        for chunk, reply in zip(members, self._fcall_many(function, calls), strict=True):
            for index, value in zip(chunk, array(reply), strict=True):
                out[index] = value
        return out

    def _fcall_many(self, function: str, calls: Sequence[Call]) -> list[Reply]:
        """Pipelined FCALLs, one round trip per node, replies in call order.

        A reply the pipeline cannot settle (the library missing on a node, a cluster
        redirection while slots move) is redone by _fcall, which handles both.
        """
        found: list[Reply] = []
        for call, reply in zip(
            calls, routing.fcall_pipelined(self.client, function, calls), strict=True
        ):
            if isinstance(reply, ResponseError):
                mapped = map_error(reply)
                if mapped is not reply:
                    raise mapped from reply
                found.append(self._fcall(function, *call))
            elif isinstance(reply, Exception):
                raise reply
            else:
                found.append(reply)
        return found

    def delete(self, partition: int, timeline: str) -> bool:
        """Remove the timeline and everything it owns; False when it did not exist."""
        tag = self._tag(partition)
        validate.name(timeline, "timeline")
        return integer(self._fcall("ds_delete", keys.timeline_keys(tag, timeline), [timeline])) == 1

    def inspect(self, partition: int, timeline: str) -> TimelineInfo:
        """Describe one timeline (read-only)."""
        tag = self._tag(partition)
        validate.name(timeline, "timeline")
        reply = self._fcall(
            "ds_inspect", keys.timeline_keys(tag, timeline), [timeline], read_only=True
        )
        return replies.timeline_info(timeline, reply)

    def stats(self, partition: int) -> PartitionStats:
        """Count WAITING and READY timelines of a partition (read-only)."""
        tag = self._tag(partition)
        reply = self._fcall("ds_stats", keys.partition_keys(tag), [], read_only=True)
        return replies.partition_stats(partition, reply)

    def server_time(self) -> float:
        """Redis's own clock (TIME on the first primary), in seconds since the epoch."""
        (node, *_) = routing.primaries(self.client)
        reply: object = routing.on_node(self.client, node, "TIME")
        # redis-py parses TIME into a (seconds, microseconds) tuple.
        if not isinstance(reply, list | tuple) or len(reply) != 2:
            raise TypeError(f"unexpected TIME reply {reply!r}")
        seconds, micros = (int(part) for part in reply)
        return seconds + micros / 1e6

    def applied_offset(self, partition: int) -> int | None:
        """The partition's fence: last applied offset, or None when absent."""
        return self.fence(partition).offset

    def fence(self, partition: int) -> Fence:
        """The partition's fence with the topic id it belongs to."""
        tag = self._tag(partition)
        reply = self._fcall("ds_fence_get", [keys.fence_key(tag)], [], read_only=True)
        return replies.fence(reply)

    def set_applied_offset(
        self, partition: int, offset: int | None, *, topic_id: str | None = None
    ) -> None:
        """Write exactly this fence (a new topic, admin replays); both None remove it."""
        tag = self._tag(partition)
        value = "" if offset is None else str(validate.offset(offset))
        topic = validate.topic_id(topic_id) or ""
        self._fcall("ds_fence_set", [keys.fence_key(tag)], [value, topic])
