"""RedisStore: the digest store over the ``digest_stream`` Redis Functions library.

Works unchanged over ``redis.Redis`` and ``redis.cluster.RedisCluster``: every call
touches the keys of one input partition (one hash tag, one slot) and is routed by
that tag. One FCALL per operation per partition batch, never one per record.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import partial
from importlib import resources
from typing import cast

from redis import Redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import ResponseError

from digest_stream.store import keys, validate
from digest_stream.store.base import (
    AddResult,
    DigestTarget,
    DueTimeline,
    InvalidArgument,
    InvalidState,
    LibraryVersionMismatch,
    NewRecord,
    OpenDigest,
    PartitionStats,
    PolicyResolver,
    StoredRecord,
    TimelineInfo,
    TimelinePolicy,
)

LIBRARY_NAME = "digest_stream"
#: The Lua source, read once; the version constant inside it is the single source of truth.
LIBRARY_SOURCE = resources.files("digest_stream.store").joinpath("digests.lua").read_text("utf-8")


def _library_version(source: str) -> str:
    found = re.search(r"^local LIBRARY_VERSION = '([^']+)'", source, re.MULTILINE)
    if found is None:
        raise RuntimeError("digests.lua declares no LIBRARY_VERSION")
    return found.group(1)


#: Version of the library this code expects on the server.
LIBRARY_VERSION = _library_version(LIBRARY_SOURCE)

RedisClient = Redis | RedisCluster
#: One FCALL's keys and arguments.
_Call = tuple[list[str], list[str | bytes]]

#: Timelines with up to this many records live in one compact string (see digests.lua):
#: most timelines hold a handful of records, and one allocation each saves the per-entry
#: overhead of a hash. Past it (or past 8 KiB) a timeline becomes a hash.
DEFAULT_INLINE_RECORDS = 16
#: Same bound as INLINE_MAX_RECORDS in digests.lua.
MAX_INLINE_RECORDS = 128

# Reply pieces as redis-py hands them over (RESP2 or RESP3, decode_responses off).
_Reply = object


def _text(value: _Reply) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, str):
        return value
    raise TypeError(f"unexpected reply {value!r}")


def _bytes(value: _Reply) -> bytes:
    if isinstance(value, bytes):
        return value
    raise TypeError(f"unexpected reply {value!r}")


def _float(value: _Reply) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return float(_text(value))


def _optional_float(value: _Reply) -> float | None:
    return None if value is None else _float(value)


def _int(value: _Reply) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(_text(value))


def _optional_int(value: _Reply) -> int | None:
    return None if value is None else _int(value)


def _list(value: _Reply) -> list[_Reply]:
    if isinstance(value, list):
        return cast(list[_Reply], value)
    raise TypeError(f"unexpected reply {value!r}")


def _arg(number: float) -> str:
    # repr() of a float is the shortest string that parses back to the same double.
    return repr(float(number))


def _map_error(error: ResponseError) -> Exception:
    message = str(error)
    # Redis appends " script: <name>, on @user_function:<line>." to function errors.
    clean = message.split(" script: ", 1)[0]
    for marker, kind in (
        ("invalid_argument: ", InvalidArgument),
        ("invalid_state: ", InvalidState),
    ):
        if marker in clean:
            return kind(clean.split(marker, 1)[1])
    return error


def library_versions(client: RedisClient) -> dict[str, str | None]:
    """The Functions library version on every primary ("redis" for a single node); None: absent.

    Read-only (FCALL_RO ds_version): the one check behind RedisStore.ensure_library and /readyz.
    """
    if isinstance(client, RedisCluster):
        return {
            node.name: _version(partial(client.execute_command, *_VERSION, target_nodes=node))
            for node in client.get_primaries()
        }
    return {"redis": _version(partial(client.execute_command, *_VERSION))}


_VERSION = ("FCALL_RO", "ds_version", 0)


def _version(call: Callable[[], object]) -> str | None:
    try:
        return _text(call())
    except ResponseError as error:
        if "Function not found" not in str(error):
            raise
        return None


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

    def _primaries(self) -> list[ClusterNode | None]:
        if isinstance(self.client, RedisCluster):
            return list(self.client.get_primaries())
        return [None]

    def _on(self, node: ClusterNode | None, *args: object) -> _Reply:
        if isinstance(self.client, RedisCluster):
            return cast(_Reply, self.client.execute_command(*args, target_nodes=node))
        return cast(_Reply, self.client.execute_command(*args))

    def ensure_library(self) -> None:
        """Load (when allowed) and verify the library on every primary."""
        if self._load_library:
            for node in self._primaries():
                self._on(node, "FUNCTION", "LOAD", "REPLACE", LIBRARY_SOURCE)
        for where, found in library_versions(self.client).items():
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

    # Calls --------------------------------------------------------------------

    def _fcall(
        self,
        function: str,
        call_keys: list[str],
        args: Sequence[str | bytes],
        *,
        read_only: bool = False,
    ) -> _Reply:
        command = "FCALL_RO" if read_only else "FCALL"
        try:
            return self._send(command, function, call_keys, args)
        except ResponseError as error:
            if "Function not found" in str(error) and self._load_library:
                # A primary that restarted empty or joined the cluster: load, retry once.
                self.ensure_library()
                try:
                    return self._send(command, function, call_keys, args)
                except ResponseError as retry_error:
                    raise _map_error(retry_error) from retry_error
            raise _map_error(error) from error

    def _send(
        self, command: str, function: str, call_keys: list[str], args: Sequence[str | bytes]
    ) -> _Reply:
        node = None
        if isinstance(self.client, RedisCluster):
            # Route by the partition tag ourselves: redis-py would otherwise ask
            # the server (COMMAND GETKEYS) on every FCALL, doubling the traffic.
            # MOVED/ASK redirections are still followed by redis-py.
            node = self.client.get_node_from_key(call_keys[0])
        return self._on(node, command, function, len(call_keys), *call_keys, *args)

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
    ) -> AddResult:
        """Store a batch of records of one partition, fenced by offset (one FCALL)."""
        tag = self._tag(partition)
        now = validate.time_value(now, "now")
        expected, through = validate.fence_arguments(expected_fence, through_offset)
        validate.records(records, through)
        index: dict[str, str] = {}
        policy_args: list[str | bytes] = []
        record_args: list[str | bytes] = []
        # Hot path (bench/hotpath_bench.py): a batch's timelines mostly share one policy
        # object (the default), so each object is checked and formatted once per call, not
        # once per timeline. The dict holds the object, so its id cannot be reused meanwhile.
        formatted: dict[int, tuple[object, list[str]]] = {}
        for record in records:
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
                            _arg(policy.minimum_delay),
                            _arg(policy.increment_delay),
                            _arg(policy.maximum_delay),
                            _arg(policy.ttl),
                            str(policy.capacity or 0),
                        ],
                    )
                policy_args.append(record.timeline)
                policy_args += cached[1]
            record_args += (
                position,
                record.id,
                _arg(record.timestamp),
                str(record.offset),
                record.payload,
            )
        reply = _list(
            self._fcall(
                "ds_add",
                [keys.fence_key(tag), keys.waiting_key(tag), keys.ready_key(tag)],
                [
                    _arg(now),
                    _arg(self.policy.ttl),
                    str(self.inline_records),
                    "" if expected is None else str(expected),
                    "" if through is None else str(through),
                    str(len(index)),
                    *policy_args,
                    *record_args,
                ],
            )
        )
        return AddResult(
            ready=[_text(name) for name in _list(reply[0])],
            added=_int(reply[1]),
            skipped=_int(reply[2]),
            dropped=_int(reply[3]),
            fence_before=_optional_int(reply[4]),
            fence_after=_optional_int(reply[5]),
        )

    @staticmethod
    def _due_list(reply: _Reply) -> list[DueTimeline]:
        flat = _list(reply)
        return [DueTimeline(_text(flat[i]), _float(flat[i + 1])) for i in range(0, len(flat), 2)]

    def schedule(self, partition: int, now: float) -> list[DueTimeline]:
        """Move WAITING timelines due at or before ``now`` to READY and return them."""
        tag = self._tag(partition)
        now = validate.time_value(now, "now")
        reply = self._fcall(
            "ds_schedule", keys.partition_keys(tag), [_arg(now), _arg(self.policy.ttl)]
        )
        return self._due_list(reply)

    def maintenance(self, partition: int, deadline: float, now: float) -> list[DueTimeline]:
        """Move READY timelines scheduled before ``deadline`` back to WAITING; return them."""
        tag = self._tag(partition)
        deadline = validate.time_value(deadline, "deadline")
        now = validate.time_value(now, "now")
        reply = self._fcall(
            "ds_maintenance",
            keys.partition_keys(tag),
            [_arg(deadline), _arg(now), _arg(self.policy.ttl)],
        )
        return self._due_list(reply)

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
            [timeline, digest_id, _arg(now)],
            self._policy(timeline),
        )

    def _open_call(self, target: DigestTarget, now: float) -> _Call:
        call_keys, args, policy = self._checked(target, now)
        return call_keys, [*args, _arg(policy.ttl)]

    @staticmethod
    def _open_result(timeline: str, raw: _Reply) -> OpenDigest:
        reply = _list(raw)
        flat = _list(reply[3])
        records = [
            StoredRecord(_text(flat[i]), _float(flat[i + 1]), _bytes(flat[i + 2]))
            for i in range(0, len(flat), 3)
        ]
        return OpenDigest(
            id=_text(reply[0]),
            timeline=timeline,
            records=records,
            dropped=_int(reply[2]),
            opened_at=_float(reply[1]),
        )

    def _close_call(self, target: DigestTarget, now: float) -> _Call:
        call_keys, args, policy = self._checked(target, now)
        return call_keys, [
            *args,
            _arg(policy.minimum_delay),
            _arg(policy.ttl),
            _arg(self.policy.ttl),
        ]

    def open(self, partition: int, timeline: str, digest_id: str, now: float) -> OpenDigest:
        """Open (or reopen) the timeline's digest; ``digest_id`` is used only for a new one."""
        call = self._open_call((partition, timeline, digest_id), now)
        return self._open_result(timeline, self._fcall("ds_open", *call))

    def close(self, partition: int, timeline: str, digest_id: str, now: float) -> bool:
        """Close that digest; False when the id is unknown or already closed."""
        call = self._close_call((partition, timeline, digest_id), now)
        return _int(self._fcall("ds_close", *call)) == 1

    def open_many(
        self, targets: Sequence[DigestTarget], now: float
    ) -> list[OpenDigest | InvalidState]:
        """open() for several timelines in one round trip per Redis node (each call atomic)."""
        calls = [self._open_call(target, now) for target in targets]
        return [
            reply if isinstance(reply, InvalidState) else self._open_result(target[1], reply)
            for target, reply in zip(targets, self._fcall_many("ds_open", calls), strict=True)
        ]

    def close_many(self, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """close() for several digests in one round trip per Redis node (each call atomic)."""
        calls = [self._close_call(target, now) for target in targets]
        replies = self._fcall_many("ds_close", calls)
        if any(isinstance(reply, InvalidState) for reply in replies):
            raise InvalidState("ds_close never refuses a state; got " + repr(replies))
        return [_int(reply) == 1 for reply in replies]

    def _fcall_many(self, function: str, calls: Sequence[_Call]) -> list[_Reply | InvalidState]:
        """Pipelined FCALLs, grouped by node; InvalidState comes back in place, others raise.

        A reply the pipeline cannot settle (the library missing on a node, a cluster
        redirection while slots move) is redone by _fcall, which handles both.
        """
        groups: dict[str, list[int]] = {}
        nodes: dict[str, ClusterNode] = {}  # empty for a single node: one group, ""
        for index, (call_keys, _) in enumerate(calls):
            name = ""
            if isinstance(self.client, RedisCluster):
                node = self.client.get_node_from_key(call_keys[0])
                name = node.name
                nodes[name] = node
            groups.setdefault(name, []).append(index)
        replies: list[_Reply | InvalidState] = [None] * len(calls)
        for name, indexes in groups.items():
            connection = (
                self.client.get_redis_connection(nodes[name])
                if isinstance(self.client, RedisCluster)
                else self.client
            )
            pipe = connection.pipeline(transaction=False)
            for index in indexes:
                call_keys, args = calls[index]
                pipe.execute_command("FCALL", function, len(call_keys), *call_keys, *args)
            for index, reply in zip(indexes, pipe.execute(raise_on_error=False), strict=True):
                if isinstance(reply, ResponseError):
                    mapped = _map_error(reply)
                    if isinstance(mapped, InvalidState):
                        replies[index] = mapped
                        continue
                    if isinstance(mapped, InvalidArgument):
                        raise mapped from reply
                    replies[index] = self._fcall_or_state(function, calls[index])
                elif isinstance(reply, Exception):
                    raise reply
                else:
                    replies[index] = reply
        return replies

    def _fcall_or_state(self, function: str, call: _Call) -> _Reply | InvalidState:
        try:
            return self._fcall(function, *call)
        except InvalidState as state:
            return state

    def delete(self, partition: int, timeline: str) -> bool:
        """Remove the timeline and everything it owns; False when it did not exist."""
        tag = self._tag(partition)
        validate.name(timeline, "timeline")
        return _int(self._fcall("ds_delete", keys.timeline_keys(tag, timeline), [timeline])) == 1

    def inspect(self, partition: int, timeline: str) -> TimelineInfo:
        """Describe one timeline (read-only)."""
        tag = self._tag(partition)
        validate.name(timeline, "timeline")
        reply = _list(
            self._fcall("ds_inspect", keys.timeline_keys(tag, timeline), [timeline], read_only=True)
        )
        open_digest = reply[4]
        return TimelineInfo(
            timeline=timeline,
            state=_text(reply[0]),
            due=_optional_float(reply[1]),
            last_delivery=_optional_float(reply[2]),
            pending=_int(reply[3]),
            open_digest=None if open_digest is None else _text(open_digest),
            open_records=_int(reply[5]),
            dropped=_int(reply[6]),
        )

    def stats(self, partition: int) -> PartitionStats:
        """Count WAITING and READY timelines of a partition (read-only)."""
        tag = self._tag(partition)
        reply = _list(self._fcall("ds_stats", keys.partition_keys(tag), [], read_only=True))
        return PartitionStats(
            partition=partition,
            waiting=_int(reply[0]),
            ready=_int(reply[1]),
            oldest_due=_optional_float(reply[2]),
            applied_offset=_optional_int(reply[3]),
        )

    def applied_offset(self, partition: int) -> int | None:
        """The partition's fence: last applied offset, or None when absent."""
        tag = self._tag(partition)
        return _optional_int(self._fcall("ds_fence_get", [keys.fence_key(tag)], [], read_only=True))

    def set_applied_offset(self, partition: int, offset: int | None) -> None:
        """Reset the fence (admin replay drills); None removes it."""
        tag = self._tag(partition)
        value = "" if offset is None else str(validate.offset(offset))
        self._fcall("ds_fence_set", [keys.fence_key(tag)], [value])
