"""Digest sizes without encoding, and splitting a digest too large for one message into parts.

The sizes follow the Avro binary encoding of `schemas/digest.avsc` byte for byte (zig-zag
varints, length-prefixed strings, blocked arrays and maps), so a split never encodes to measure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from digest_stream.wire.models import INT_MAX, Digest, Record
from digest_stream.wire.symbols import REASON_INDEX


def _varint_size(value: int) -> int:
    # Avro ints and longs are zig-zag varints: 7 bits per byte.
    zigzag = value << 1 if value >= 0 else ((-value) << 1) - 1
    return 1 if zigzag < 0x80 else (zigzag.bit_length() + 6) // 7


def _string_size(value: str) -> int:
    length = len(value) if value.isascii() else len(value.encode("utf-8"))
    return _varint_size(length) + length


def _map_size(mapping: Mapping[str, str]) -> int:
    # fastavro writes one block (count, entries) then the 0 terminator; an empty map is just 0.
    if not mapping:
        return 1
    body = sum(_string_size(key) + _string_size(value) for key, value in mapping.items())
    return _varint_size(len(mapping)) + body + 1


def _optional_size(value: int | None) -> int:
    # A ["null", int|long] union: the branch index (one byte), then the value if any.
    return 1 if value is None else 1 + _varint_size(value)


def _record_size(record: Record) -> int:
    payload = len(record.payload)
    return (
        _string_size(record.id)
        + _varint_size(record.timestamp)
        + _varint_size(payload)
        + payload
        + _map_size(record.attributes)
        + _varint_size(record.count)
        + _optional_size(record.first_seen)
    )


def _explained_size(digest: Digest) -> int:
    # reason (an enum in a union: branch, then symbol index), total, next_delivery_at.
    reason = 1 if digest.reason is None else 1 + _varint_size(REASON_INDEX[digest.reason])
    return reason + _optional_size(digest.total) + _optional_size(digest.next_delivery_at)


def _array_size(count: int, body: int) -> int:
    return (_varint_size(count) + body + 1) if count else 1


def _digest_size(digest: Digest, record_sizes: list[int]) -> int:
    # record_sizes: _record_size of each of digest.records, in order.
    return (
        _string_size(digest.id)
        + _string_size(digest.timeline)
        + _array_size(len(record_sizes), sum(record_sizes))
        + sum(
            _varint_size(value)
            for value in (
                digest.start,
                digest.end,
                digest.dropped,
                digest.opened_at,
                digest.part,
                digest.parts,
            )
        )
        + _explained_size(digest)
    )


def encoded_digest_size(digest: Digest) -> int:
    """Exactly len(encode_digest(digest)), computed without encoding."""
    return _digest_size(digest, [_record_size(record) for record in digest.records])


# Room kept for `part` and `parts` while packing, before the number of parts is known: the
# longest zig-zag varint of an Avro int. Costs at most 8 bytes of a part's budget.
_PART_FIELDS_RESERVE: Final = 2 * _varint_size(INT_MAX)


def split_digest(digest: Digest, max_bytes: int) -> list[Digest]:
    """Split a digest whose encoding exceeds max_bytes into numbered parts that share its id.

    Returns `[digest]` unchanged when it fits. Otherwise parts 1..n (`parts` = n) take the
    records in order, so part 1 holds the newest and concatenating the parts' records gives the
    original newest-first list. Each part's start/end cover its own records. `dropped` is
    reported on part 1 only (0 on the others), so summing over parts counts it once. Every part
    encodes to at most max_bytes, except that a single record too large for max_bytes on its
    own gets a part to itself that exceeds it: splitting never loses a record, and whether such
    a part fits the producer's limits (message.max.bytes, key and header overhead) is the
    caller's check. Linear in the number of records: each record's size is computed once.
    """
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    sizes = [_record_size(record) for record in digest.records]
    if _digest_size(digest, sizes) <= max_bytes:
        return [digest]
    if digest.parts != 1:
        raise ValueError(
            f"digest {digest.id} is already part {digest.part} of {digest.parts}; "
            "split the whole digest"
        )

    records = digest.records
    fixed = _string_size(digest.id) + _string_size(digest.timeline)
    fixed += _varint_size(digest.opened_at) + _explained_size(digest)
    # (first index, end index, oldest, newest) of each part, packed greedily in order.
    bounds: list[tuple[int, int, int, int]] = []
    first = 0
    while first < len(records):
        budget = max_bytes - fixed - _PART_FIELDS_RESERVE
        budget -= _varint_size(digest.dropped if not bounds else 0)
        body = 0
        oldest = newest = records[first].timestamp
        end = first
        while end < len(records):
            timestamp = records[end].timestamp
            low, high = min(oldest, timestamp), max(newest, timestamp)
            count = end - first + 1
            size = _array_size(count, body + sizes[end]) + _varint_size(low) + _varint_size(high)
            if size > budget and end > first:
                break
            body += sizes[end]
            oldest, newest = low, high
            end += 1
        bounds.append((first, end, oldest, newest))
        first = end

    return numbered_parts(digest, bounds)


def numbered_parts(digest: Digest, bounds: list[tuple[int, int, int, int]]) -> list[Digest]:
    """The parts of ``digest`` holding its records ``[first:end]`` for each (first, end,
    oldest, newest) of ``bounds``, numbered from 1; ``dropped`` on part 1 only."""
    parts = len(bounds)
    # model_copy skips validation: every field is valid by construction, and re-validating
    # thousands of records per part would cost more than the split itself.
    records = digest.records
    return [
        digest.model_copy(
            update={
                "records": records[first:end],
                "start": oldest,
                "end": newest,
                "dropped": digest.dropped if number == 1 else 0,
                "part": number,
                "parts": parts,
            }
        )
        for number, (first, end, oldest, newest) in enumerate(bounds, start=1)
    ]
