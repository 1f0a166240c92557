"""RedisStore: the digest store over the ``digest_stream`` Redis Functions library.

Works unchanged over ``redis.Redis`` and ``redis.cluster.RedisCluster``: every call
touches the keys of one input partition (one hash tag, one slot) and is routed by
that tag. One FCALL per operation per partition batch, never one per record.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

from digest_stream.store import keys, replies, validate
from digest_stream.store.base import DEFAULT_SLICE, AddResult, DueBatch, NewRecord
from digest_stream.store.redis_admin import RedisAdmin
from digest_stream.store.redis_calls import (
    DEFAULT_INLINE_RECORDS,
    LIBRARY_NAME,
    LIBRARY_SOURCE,
    LIBRARY_VERSION,
    MAX_INLINE_RECORDS,
    RedisClient,
)
from digest_stream.store.redis_digests import MANY_CHUNK, RedisDigests
from digest_stream.store.replies import arg
from digest_stream.store.validate import MAX_OFFSET

__all__ = [
    "DEFAULT_INLINE_RECORDS",
    "LIBRARY_NAME",
    "LIBRARY_SOURCE",
    "LIBRARY_VERSION",
    "MANY_CHUNK",
    "MAX_INLINE_RECORDS",
    "RedisClient",
    "RedisStore",
]


#: Packed forms of ds_add's timelines and records (TIMELINE_FORMAT and RECORD_FORMAT in
#: digests.lua), written without their variable-length strings, which follow each head.
#: One argument per record field cost the client more than the Lua did (bench.lua_cost).
_TIMELINE_HEAD = struct.Struct(">IH").pack  # policy index, name length; then the name
_RECORD_HEAD = struct.Struct(">IH").pack  # timeline index, id length; then the id
_RECORD_TAIL = struct.Struct(">ddI").pack  # timestamp, offset, payload length; then payload


def _short_ascii(value: object) -> bool:
    """A name validate.name accepts without encoding it (the common timeline and record id)."""
    return type(value) is str and value.isascii() and 0 < len(value) <= validate.MAX_NAME_BYTES


class RedisStore(RedisDigests, RedisAdmin):
    """``DigestStore`` over Redis 7 Functions, single node or Redis Cluster.

    Construction and the library check: ``RedisCalls``; open/close: ``RedisDigests``;
    inspect, admin and the fence: ``RedisAdmin``; adding and the schedule here.
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
        index: dict[str, int] = {}
        policy_args: list[str | bytes] = []
        timeline_parts: list[bytes] = []
        record_parts: list[bytes] = []
        # Hot path (bench/hotpath_bench.py): a batch's timelines mostly share one policy
        # object (the default), so each object is checked and formatted once per call, not
        # once per timeline. The dict holds the object, so its id cannot be reused meanwhile.
        formatted: dict[int, tuple[object, int]] = {}
        # Equal policies of distinct objects are sent once too: their index by fields.
        policies: dict[tuple[str, ...], int] = {}
        last = MAX_OFFSET if through is None else through
        checked = False  # validate.records ran over the whole batch
        for record in records:
            # The common record passes these inline checks; on the first that does not, the
            # whole batch is judged (and refused with its precise error) by validate.records.
            # Its fields are unpacked once (NewRecord is a tuple): cheaper than each lookup.
            if checked or type(record) is NewRecord:
                timeline, record_id, timestamp, payload, offset, control = record
            if not checked and not (
                type(record) is NewRecord
                and type(payload) is bytes
                and type(offset) is int
                and 0 <= offset <= last
                and _short_ascii(timeline)
                and _short_ascii(record_id)
                and control is None
            ):
                if validate.records(records, through):  # the batch holds control operations
                    return self._add_with_controls(tag, records, now, expected, through, topic)
                checked = True
                timeline, record_id, timestamp, payload, offset, control = record
            if not (type(timestamp) is float and 0.0 <= timestamp < math.inf):
                timestamp = validate.time_value(timestamp, "record timestamp")
            position = index.get(timeline)
            if position is None:
                position = index[timeline] = len(index) + 1
                resolved = self._resolver(timeline)
                cached = formatted.get(id(resolved))
                if cached is None:
                    policy = validate.policy(resolved, timeline)
                    fields = (
                        arg(policy.minimum_delay),
                        arg(policy.increment_delay),
                        arg(policy.maximum_delay),
                        arg(policy.ttl),
                        str(policy.capacity or 0),
                        str(policy.flush_at or 0),
                        "" if policy.schedule is None else arg(policy.next_fire(now) or now),
                    )
                    number = policies.get(fields)
                    if number is None:
                        number = policies[fields] = len(policies) + 1
                        policy_args += fields
                    cached = formatted[id(resolved)] = (resolved, number)
                name = timeline.encode()
                timeline_parts += (_TIMELINE_HEAD(cached[1], len(name)), name)
            encoded_id = record_id.encode()
            record_parts += (
                _RECORD_HEAD(position, len(encoded_id)),
                encoded_id,
                _RECORD_TAIL(timestamp, offset, len(payload)),
                payload,
            )
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
                str(len(policies)),
                *policy_args,
                b"".join(timeline_parts),
                b"".join(record_parts),
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
