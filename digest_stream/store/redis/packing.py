"""The packed arguments of RedisStore's calls: ds_add's batch (its timelines, records and
controls) and the targets of ds_open_many, ds_close_many and ds_close_leading, each as
``protocol.py`` declares it (``Packed``), with the call's policies (``policy_wire.PolicyTable``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from digest_stream.store import validate
from digest_stream.store.base import DigestTarget, NewRecord
from digest_stream.store.limits import DIGEST_ID_LENGTH, MAX_OFFSET
from digest_stream.store.policy import PolicyResolver, TimelinePolicy
from digest_stream.store.redis import protocol
from digest_stream.store.redis.policy_wire import PolicyTable
from digest_stream.store.validate import plain_name

# ds_add's batch ---------------------------------------------------------------------------

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


def add_batch(
    records: Sequence[NewRecord], now: float, through: int | None, resolver: PolicyResolver
) -> tuple[list[str | bytes], list[str], list[TimelinePolicy]]:
    """ds_add's arguments after its head (its policies, timelines, records and, for a batch
    holding controls, the controls; for a batch holding urgent records, the controls or "" and
    their marks, protocol.URGENT_MARK), the call's timelines in packed order and each one's
    policy (what the led digests' due rules are read from)."""
    index: dict[str, int] = {}
    resolved: list[TimelinePolicy] = []  # each packed timeline's policy, in order
    # Hot path (bench/hotpath_bench.py): a batch's timelines mostly share one policy
    # object (the default); the table checks and packs each object once per call.
    policies = PolicyTable(now)
    timeline_parts: list[bytes] = []
    record_parts: list[bytes] = []
    control_parts: list[bytes] = []
    urgent: list[int] = []  # the urgent records' places among the packed ones, from 0
    last = MAX_OFFSET if through is None else through
    checked = False  # validate.records ran over the whole batch
    for record in records:
        # The common record passes these inline checks; on the first that does not, the
        # whole batch is judged (and refused with its precise error) by validate.records.
        # Its fields are unpacked once (NewRecord is a tuple): cheaper than each lookup.
        if checked or type(record) is NewRecord:
            timeline, record_id, timestamp, payload, offset, control, is_urgent = record
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
            timeline, record_id, timestamp, payload, offset, control, is_urgent = record
        if checked and control is not None:
            # Placed after the records packed so far (4 parts each): Lua applies it there.
            name, encoded_id = timeline.encode(), record_id.encode()
            number = policies.index(resolver(timeline), timeline)
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
            policy = resolver(timeline)
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
        if is_urgent is not False:  # one identity test per record; a non-bool is judged
            if is_urgent is not True and not checked:
                validate.records(records, through)
            urgent.append(len(record_parts) // 4 - 1)
    args = [
        *policies.args(),
        b"".join(timeline_parts),
        b"".join(record_parts),
        *((b"".join(control_parts),) if control_parts or urgent else ()),
    ]
    if urgent:
        marks = bytearray(b"0" * (len(record_parts) // 4))
        for place in urgent:
            marks[place : place + 1] = protocol.URGENT_MARK
        args.append(bytes(marks))
    return args, [*index], resolved


# The targets of ds_open_many, ds_close_many and ds_close_leading -------------------------

#: A packed target (protocol.TARGET): its policy index and timeline length, then (after the
#: timeline) its digest id's length: always DIGEST_ID_LENGTH once validate.digest_id passed it.
_TARGET_HEAD, _ID_LENGTH = (head.pack for head in protocol.TARGET.heads)
_ID = _ID_LENGTH(DIGEST_ID_LENGTH)


def targets(
    values: Sequence[DigestTarget], now: float, resolver: PolicyResolver
) -> tuple[PolicyTable, list[bytes], list[TimelinePolicy]]:
    """The policies of a many-target call (each sent once), each target packed
    (protocol.TARGET: the index of its policy, its timeline, its digest id) and each
    target's checked policy."""
    policies = PolicyTable(now)
    packed: list[bytes] = []
    resolved: list[TimelinePolicy] = []
    policy, number = None, 0
    for _, timeline, digest_id in values:
        if not plain_name(timeline):  # judged, with its precise error, by validate.name
            validate.name(timeline, "timeline")
        validate.digest_id(digest_id)
        found = resolver(timeline)
        if found is not policy:  # most targets of a call share one policy object
            policy, number = found, policies.index(found, timeline)  # checks the policy
        name = timeline.encode()
        head = _TARGET_HEAD(number, len(name))
        packed.append(b"".join((head, name, _ID, digest_id.encode())))
        resolved.append(found)
    return policies, packed, resolved
