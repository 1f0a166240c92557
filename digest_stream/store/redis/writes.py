"""Adding records and the schedule over Redis: one FCALL per operation per partition batch,
never one per record (``RedisWrites``, a part of RedisStore).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from digest_stream.store import validate
from digest_stream.store.base import DEFAULT_SLICE, AddResult, DueBatch, NewRecord, new_nonce
from digest_stream.store.limits import MAX_OFFSET
from digest_stream.store.policy import TimelinePolicy
from digest_stream.store.redis import protocol, replies
from digest_stream.store.redis.calls import RedisCalls
from digest_stream.store.redis.policy_wire import PolicyTable
from digest_stream.store.redis.replies import arg
from digest_stream.store.validate import plain_name

#: Packed forms of ds_add's timelines, records and controls (protocol.TIMELINE, RECORD and
#: CONTROL, which the Lua reads as TIMELINE_FORMAT, ...), each a struct per fixed run up to a
#: string's length, the string's bytes after it. One argument per record field cost the
#: client more than the Lua did (bench.lua_cost).
(_TIMELINE_HEAD,) = (head.pack for head in protocol.TIMELINE.heads)  # policy index, name length
# timeline index, id length; then timestamp, offset, payload length
_RECORD_HEAD, _RECORD_TAIL = (head.pack for head in protocol.RECORD.heads)
# records before it, offset, operation code, policy index, timeline name length; then the
# id's length
_CONTROL_HEAD, _NAME_LENGTH = (head.pack for head in protocol.CONTROL.heads)


class RedisWrites:
    """``add``, ``schedule`` and ``maintenance`` of ``RedisStore``."""

    def __init__(self, calls: RedisCalls) -> None:
        self.calls = calls

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
        tag = self.calls.tag(partition)
        now, expected, through, topic, nonce = validate.add_arguments(
            now, expected_fence, through_offset, topic_id, open_nonce
        )
        return self._add_call(tag, records, now, expected, through, topic, nonce)

    def _add_call(
        self,
        tag: str,
        records: Sequence[NewRecord],
        now: float,
        expected: int | None,
        through: int | None,
        topic: str | None,
        nonce: str | None,
    ) -> AddResult:
        """One ds_add, a batch holding controls included (packed as its last argument)."""
        index: dict[str, int] = {}
        resolved: list[TimelinePolicy] = []  # each packed timeline's policy, in order
        # Hot path (bench/hotpath_bench.py): a batch's timelines mostly share one policy
        # object (the default); the table checks and packs each object once per call.
        policies = PolicyTable(now)
        timeline_parts: list[bytes] = []
        record_parts: list[bytes] = []
        control_parts: list[bytes] = []
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
                and plain_name(timeline)
                and plain_name(record_id)
                and control is None
            ):
                validate.records(records, through)
                checked = True
                timeline, record_id, timestamp, payload, offset, control = record
            if checked and control is not None:
                # Placed after the records packed so far (4 parts each): Lua applies it there.
                name, encoded_id = timeline.encode(), record_id.encode()
                number = policies.index(self.calls.resolver(timeline), timeline)
                control_parts += (
                    _CONTROL_HEAD(
                        len(record_parts) // 4,
                        offset,
                        protocol.CONTROL_CODES[control],
                        number,
                        len(name),
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
                policy = self.calls.resolver(timeline)
                resolved.append(policy)
                number = policies.index(policy, timeline)
                name = timeline.encode()
                timeline_parts += (_TIMELINE_HEAD(number, len(name)), name)
            encoded_id = record_id.encode()
            record_parts += (
                _RECORD_HEAD(position, len(encoded_id)),
                encoded_id,
                _RECORD_TAIL(timestamp, offset, len(payload)),
                payload,
            )
        head = {
            "now": arg(now),
            "partition_ttl": self.calls.partition_ttl,
            "inline_records": str(self.calls.inline_records),
            "expected_fence": "" if expected is None else str(expected),
            "through_offset": "" if through is None else str(through),
            "topic_id": topic or "",
            "open_nonce": nonce or "",
            "numbering": protocol.ADD_NUMBERING,
        }
        reply = self.calls.call(
            protocol.DS_ADD,
            tag,
            [
                *(head[name] for name in protocol.ADD_HEAD),
                *policies.args(),
                b"".join(timeline_parts),
                b"".join(record_parts),
                *((b"".join(control_parts),) if control_parts else ()),
            ],
        )
        # the leading edge's digests, each with its timeline's due rule (store.due)
        return replies.add_result(reply, records, now, [*index], resolved, nonce)

    def schedule(
        self, partition: int, now: float, *, limit: int = DEFAULT_SLICE, nonce: str | None = None
    ) -> DueBatch:
        """Move up to ``limit`` due WAITING timelines to READY; ``.more`` when more are due.

        The call carries a nonce (``nonce``, or a fresh one): a client whose retry re-sends a
        call whose reply it lost (redis-py's default retry does, with the same arguments) is
        answered the first run's reply (ds_schedule), so what it moved is announced."""
        tag = self.calls.tag(partition)
        now = validate.time_value(now, "now")
        nonce = validate.open_nonce(nonce, "schedule nonce") or new_nonce()
        args = protocol.DS_SCHEDULE.arguments(
            now=arg(now),
            partition_ttl=self.calls.partition_ttl,
            limit=str(validate.limit(limit)),
            nonce=nonce,
        )
        return replies.due_batch(self.calls.call(protocol.DS_SCHEDULE, tag, args))

    def maintenance(
        self, partition: int, deadline: float, now: float, *, limit: int = DEFAULT_SLICE
    ) -> DueBatch:
        """Move up to ``limit`` stale READY timelines back to WAITING; ``.more`` if more remain."""
        tag = self.calls.tag(partition)
        deadline = validate.time_value(deadline, "deadline")
        now = validate.time_value(now, "now")
        args = protocol.DS_MAINTENANCE.arguments(
            deadline=arg(deadline),
            now=arg(now),
            partition_ttl=self.calls.partition_ttl,
            limit=str(validate.limit(limit)),
        )
        return replies.due_batch(self.calls.call(protocol.DS_MAINTENANCE, tag, args))
