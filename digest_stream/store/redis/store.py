"""RedisStore: the digest store over the ``digest_stream`` Redis Functions library.

Works unchanged over ``redis.Redis`` and ``redis.cluster.RedisCluster``: every call
touches the keys of one input partition (one hash tag, one slot) and is routed by
that tag. One FCALL per operation per partition batch, never one per record.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

from digest_stream.store import validate
from digest_stream.store.base import (
    CONTROLS,
    DEFAULT_SLICE,
    AddResult,
    DueBatch,
    NewRecord,
)
from digest_stream.store.due import next_due
from digest_stream.store.limits import MAX_NAME_BYTES, MAX_OFFSET
from digest_stream.store.redis import keys, replies
from digest_stream.store.redis.admin import RedisAdmin
from digest_stream.store.redis.digests import RedisDigests
from digest_stream.store.redis.replies import arg

#: Packed forms of ds_add's timelines and records (TIMELINE_FORMAT and RECORD_FORMAT in
#: lua/add.lua), written without their variable-length strings, which follow each head.
#: One argument per record field cost the client more than the Lua did (bench.lua_cost).
_TIMELINE_HEAD = struct.Struct(">IH").pack  # policy index, name length; then the name
_RECORD_HEAD = struct.Struct(">IH").pack  # timeline index, id length; then the id
_RECORD_TAIL = struct.Struct(">ddI").pack  # timestamp, offset, payload length; then payload
#: A control operation (CONTROL_FORMAT): records before it, offset, operation code, timeline
#: name length; then the name, the record id's length (_NAME_LENGTH) and the id.
_CONTROL_HEAD = struct.Struct(">IdBH").pack
_NAME_LENGTH = struct.Struct(">H").pack
#: Operation codes of CONTROL_FORMAT: each control's position in CONTROLS, from 1 (the Lua's
#: CONTROL_CODES is written from the same tuple).
CONTROL_CODES: dict[str, int] = {control: code for code, control in enumerate(CONTROLS, start=1)}


def _short_ascii(value: object) -> bool:
    """A name validate.name accepts without encoding it (the common timeline and record id)."""
    return type(value) is str and value.isascii() and 0 < len(value) <= MAX_NAME_BYTES


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
        open_nonce: str | None = None,
    ) -> AddResult:
        """Store a batch of records of one partition, fenced by offset: one FCALL, control
        operations included (applied in offset order among the records), the leading
        edge's digests opened in it when ``open_nonce`` asks."""
        tag = self._tag(partition)
        now = validate.time_value(now, "now")
        expected, through = validate.fence_arguments(expected_fence, through_offset)
        topic = validate.topic_id(topic_id)
        nonce = validate.open_nonce(open_nonce)
        return self._add_call(tag, records, now, expected, through, topic, nonce)

    def _add_call(
        self,
        tag: str,
        records: Sequence[NewRecord],
        now: float,
        expected: int | None,
        through: int | None,
        topic: str | None,
        nonce: str | None = None,
    ) -> AddResult:
        """One ds_add, a batch holding controls included (packed as its last argument)."""
        index: dict[str, int] = {}
        policy_args: list[str | bytes] = []
        timeline_parts: list[bytes] = []
        record_parts: list[bytes] = []
        control_parts: list[bytes] = []
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
                validate.records(records, through)
                checked = True
                timeline, record_id, timestamp, payload, offset, control = record
            if checked and control is not None:
                # Placed after the records packed so far (4 parts each): Lua applies it there.
                name, encoded_id = timeline.encode(), record_id.encode()
                control_parts += (
                    _CONTROL_HEAD(
                        len(record_parts) // 4, offset, CONTROL_CODES[control], len(name)
                    ),
                    name,
                    _NAME_LENGTH(len(encoded_id)),
                    encoded_id,
                )
                continue
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
                nonce or "",
                str(len(policies)),
                *policy_args,
                b"".join(timeline_parts),
                b"".join(record_parts),
                *((b"".join(control_parts),) if control_parts else ()),
            ],
        )
        result = replies.add_result(reply, records, now)
        for digest in result.opened:  # the leading edge's: each with its due rule (store.due)
            digest.next_due = next_due(self._resolver(digest.timeline))
        return result

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
