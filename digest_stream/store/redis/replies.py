"""Arguments to and replies from the Lua library (and Redis's TIME), as redis-py hands them over.

Replies arrive as RESP2 or RESP3 values with ``decode_responses`` off: bytes, ints,
lists, None. These helpers turn them into Python values and map the library's typed
error replies to the store's exceptions; the packed arguments are ``packing``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from redis.exceptions import ResponseError

from digest_stream.store.base import (
    AddResult,
    DigestTarget,
    DueBatch,
    DueTimeline,
    Fence,
    NewRecord,
    OpenDigest,
    PartitionStats,
    StoredRecord,
    TimelineInfo,
    age_key,
    leading_id,
    reason_of,
)
from digest_stream.store.due import NextDue, next_due
from digest_stream.store.errors import InvalidArgument, InvalidState
from digest_stream.store.limits import CAUSES
from digest_stream.store.policy import TimelinePolicy
from digest_stream.store.redis import protocol
from digest_stream.vocabulary import State

#: A reply piece, before it is checked.
Reply = object

#: The reason each cause letter of the library's replies stands for.
REASON_OF_LETTER = {letter: reason for reason, letter in CAUSES.items()}


def cause(value: Reply) -> str | None:
    """A cause letter (or nil) as a reason name."""
    if value is None:
        return None
    letter = text(value)
    if letter not in REASON_OF_LETTER:
        raise TypeError(f"unexpected cause {letter!r}")
    return REASON_OF_LETTER[letter]


def text(value: Reply) -> str:
    """A UTF-8 string reply."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, str):
        return value
    raise TypeError(f"unexpected reply {value!r}")


def optional_text(value: Reply) -> str | None:
    """A UTF-8 string or nil."""
    return None if value is None else text(value)


def raw_bytes(value: Reply) -> bytes:
    """A bulk-string reply kept as bytes (payloads)."""
    if isinstance(value, bytes):
        return value
    raise TypeError(f"unexpected reply {value!r}")


def number(value: Reply) -> float:
    """A float, sent by the library as a string for exactness."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return float(text(value))


def optional_number(value: Reply) -> float | None:
    """A float or nil."""
    return None if value is None else number(value)


def integer(value: Reply) -> int:
    """An integer reply (or an integer sent as a string)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(text(value))


def optional_integer(value: Reply) -> int | None:
    """An integer or nil."""
    return None if value is None else integer(value)


def array(value: Reply) -> list[Reply]:
    """An array reply."""
    if isinstance(value, list):
        return cast(list[Reply], value)
    raise TypeError(f"unexpected reply {value!r}")


def arg(value: float) -> str:
    """A float argument that parses back to the same double."""
    # repr() of a float is the shortest string that parses back to the same double.
    return repr(float(value))


def map_error(error: ResponseError) -> Exception:
    """The store exception for a library error reply; other errors come back unchanged."""
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


# Whole replies of the library's functions (positions: protocol.py's replies) ----------

_ADD = protocol.ADD_REPLY.at
_OPEN = protocol.OPEN_REPLY.at
_DUE = protocol.DUE_REPLY.at
_INSPECT = protocol.INSPECT_REPLY.at
_STATS = protocol.STATS_REPLY.at
_FENCE = protocol.FENCE_REPLY.at
_CLOSE_LEADING = protocol.CLOSE_LEADING_REPLY.at


def add_result(
    reply: Reply,
    records: Sequence[NewRecord],
    now: float,
    timelines: Sequence[str],
    policies: Sequence[TimelinePolicy],
    nonce: str | None,
) -> AddResult:
    """``ds_add`` (protocol.ADD_REPLY); ``records``, ``now`` and ``nonce``: the call's (a led
    digest holds its timeline's records of the call, not sent back, and its id is the nonce
    and its number); ``timelines`` and ``policies``: the call's packed timelines in order and
    each one's policy, whose due rule its led digest carries."""
    values = array(reply)
    led = array(values[_ADD["led"]])
    fence_before = optional_integer(values[_ADD["fence_before"]])
    opened = (
        led_digests(led, records, fence_before, now, timelines, policies, nonce or "")
        if led
        else []
    )
    return AddResult(
        ready=[text(name) for name in array(values[_ADD["ready"]])],
        added=integer(values[_ADD["added"]]),
        skipped=integer(values[_ADD["skipped"]]),
        dropped=integer(values[_ADD["dropped"]]),
        fence_before=fence_before,
        fence_after=optional_integer(values[_ADD["fence_after"]]),
        fence_topic=optional_text(values[_ADD["fence_topic"]]),
        cancelled=integer(values[_ADD["cancelled"]]),
        opened=opened,
    )


def led_digests(
    led: list[Reply],
    records: Sequence[NewRecord],
    fence_before: int | None,
    now: float,
    timelines: Sequence[str],
    policies: Sequence[TimelinePolicy],
    nonce: str,
) -> list[OpenDigest]:
    """The digests an add led ({number, ...}: timeline k's id is the nonce and k, timeline k
    the call's k-th of ``timelines``, in the order its records name them), from the call's
    own records: those the add applied, one per id (its first place, its last value), newest
    first."""
    # Hot path: the rule of each distinct policy object once (most timelines share one).
    rules: dict[int, NextDue] = {}
    if len(led) == len(records):
        # As many led as records, each with at least one applied: every record applied and
        # its timeline's only one, so timeline k's record is the k-th (the common add).
        digests = []
        for number in led:
            k = number if type(number) is int else integer(number)
            timeline, record_id, timestamp, payload, _, _, _ = records[k - 1]
            policy = policies[k - 1]
            rule = rules.get(id(policy))
            if rule is None:
                rule = rules[id(policy)] = next_due(policy)
            digests.append(
                OpenDigest(
                    leading_id(nonce, k),
                    timeline,
                    [StoredRecord(record_id, float(timestamp), payload)],
                    0,
                    now,
                    next_due=rule,
                )
            )
        return digests
    numbers = {timelines[integer(number) - 1]: integer(number) for number in led}
    fence = -1 if fence_before is None else fence_before
    held: dict[str, dict[str, StoredRecord]] = {name: {} for name in numbers}
    for timeline, record_id, timestamp, payload, offset, _, _ in records:
        # the running fence, as the add applies them (docs/store.md): a record at or below
        # an offset applied before it in the call is skipped, whatever its timeline
        if offset <= fence:
            continue
        fence = offset
        kept = held.get(timeline)
        if kept is not None:
            kept[record_id] = StoredRecord(record_id, float(timestamp), payload)
    digests = []
    for name, number in numbers.items():
        kept = held[name]
        # most led timelines hold one record: nothing to order
        ordered = (
            [*kept.values()] if len(kept) == 1 else sorted(kept.values(), key=age_key, reverse=True)
        )
        policy = policies[number - 1]
        rule = rules.get(id(policy))
        if rule is None:
            rule = rules[id(policy)] = next_due(policy)
        digests.append(OpenDigest(leading_id(nonce, number), name, ordered, 0, now, next_due=rule))
    return digests


def fence(reply: Reply) -> Fence:
    """``ds_fence_get`` (protocol.FENCE_REPLY)."""
    values = array(reply)
    return Fence(
        optional_integer(values[_FENCE["offset"]]), optional_text(values[_FENCE["topic_id"]])
    )


def closed_leading(reply: Reply, targets: Sequence[DigestTarget]) -> list[bool]:
    """``ds_close_leading`` (protocol.CLOSE_LEADING_REPLY): whether the batch form closed, and
    each digest of the ordinary form by timeline {timeline, closed, ...}; one answer per target."""
    values = array(reply)
    batch_closed = integer(values[_CLOSE_LEADING["closed"]]) == 1
    flat = array(values[_CLOSE_LEADING["ordinary"]])
    ordinary = {text(flat[i]): integer(flat[i + 1]) == 1 for i in range(0, len(flat), 2)}
    return [ordinary.get(timeline, batch_closed) for _, timeline, _ in targets]


def server_time(reply: Reply) -> float:
    """Redis's TIME, which redis-py parses into (seconds, microseconds), in seconds."""
    if not isinstance(reply, list | tuple) or len(reply) != 2:
        raise TypeError(f"unexpected TIME reply {reply!r}")
    seconds, micros = (int(part) for part in reply)
    return seconds + micros / 1e6


def due_batch(reply: Reply) -> DueBatch:
    """``ds_schedule`` / ``ds_maintenance`` (protocol.DUE_REPLY): moved {timeline, due, ...}."""
    values = array(reply)
    flat = array(values[_DUE["moved"]])
    return DueBatch(
        (DueTimeline(text(flat[i]), number(flat[i + 1])) for i in range(0, len(flat), 2)),
        more=integer(values[_DUE["more"]]) == 1,
    )


def open_digest(timeline: str, reply: Reply, rule: NextDue) -> OpenDigest:
    """``ds_open`` (protocol.OPEN_REPLY): records {id, timestamp, payload, ...}; ``rule``:
    the timeline's due rule (store.due), which every opened digest carries."""
    values = array(reply)
    flat = array(values[_OPEN["records"]])
    records = [
        StoredRecord(text(flat[i]), number(flat[i + 1]), raw_bytes(flat[i + 2]))
        for i in range(0, len(flat), 3)
    ]
    return OpenDigest(
        id=text(values[_OPEN["id"]]),
        timeline=timeline,
        records=records,
        dropped=integer(values[_OPEN["dropped"]]),
        opened_at=number(values[_OPEN["opened_at"]]),
        expired=integer(values[_OPEN["expired"]]) == 1,
        reason=cause(values[_OPEN["cause"]]) or "IMMEDIATE",
        next_due=rule,
    )


def timeline_info(timeline: str, reply: Reply) -> TimelineInfo:
    """``ds_inspect`` (protocol.INSPECT_REPLY)."""
    values = array(reply)
    digest = values[_INSPECT["digest_id"]]
    state = State(text(values[_INSPECT["state"]]))
    last_delivery = optional_number(values[_INSPECT["last_delivery"]])
    return TimelineInfo(
        timeline=timeline,
        state=state,
        due=optional_number(values[_INSPECT["due"]]),
        last_delivery=last_delivery,
        pending=integer(values[_INSPECT["pending"]]),
        open_digest=None if digest is None else text(digest),
        open_records=integer(values[_INSPECT["open_records"]]),
        dropped=integer(values[_INSPECT["dropped"]]),
        reason=None
        if state is State.ABSENT
        else reason_of(cause(values[_INSPECT["cause"]]), last_delivery),
        snoozed_until=optional_number(values[_INSPECT["snoozed"]]),
    )


def partition_stats(partition: int, reply: Reply) -> PartitionStats:
    """``ds_stats`` (protocol.STATS_REPLY)."""
    values = array(reply)
    return PartitionStats(
        partition=partition,
        waiting=integer(values[_STATS["waiting"]]),
        ready=integer(values[_STATS["ready"]]),
        oldest_due=optional_number(values[_STATS["oldest_due"]]),
        applied_offset=optional_integer(values[_STATS["fence"]]),
    )
