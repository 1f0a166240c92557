"""A whole digest's Avro bytes assembled from its records' stored Event bytes.

A digest record starts with exactly an Event's fields (schemas/digest.avsc), and the store keeps
each event's own Avro encoding, so the delivery need not decode records into models and encode
them again: the `records` array is the stored bytes, each followed by the two fields a record
adds (`count` 1, `first_seen` null: a record not collapsed), behind a block count. Only the
digest's own fields are encoded here. Avro's encoding of a value is not unique (a map's
order or blocks), but every reader decodes these bytes to the same Digest as
`codec.encode_digest` of it (tests/unit/wire/test_digest_bytes.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from digest_stream.wire.models import DigestReason

# count = 1 (zig-zag 2), first_seen = null (union branch 0): a record standing for itself.
_PLAIN_RECORD_TAIL: Final = b"\x02\x00"
# Avro index of each DigestReason symbol (schemas/digest.avsc declares them in this order).
_REASON_INDEX: Final = {reason: index for index, reason in enumerate(DigestReason)}


def _long(value: int) -> bytes:
    """An Avro int or long: a zig-zag varint."""
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _long(len(raw)) + raw


def _optional(value: int | None) -> bytes:
    """A ["null", int|long] union."""
    return b"\x00" if value is None else b"\x02" + _long(value)


def whole_digest(
    digest_id: str,
    timeline: str,
    events: Sequence[bytes],
    timestamps: Sequence[int],
    dropped: int,
    opened_at: int,
    *,
    reason: DigestReason | None = None,
    total: int | None = None,
    next_delivery_at: int | None = None,
) -> bytes:
    """A digest of one part (1 of 1): `events` are valid Event encodings, newest first, and
    `timestamps` their timestamps (start and end are computed from them)."""
    parts = [_string(digest_id), _string(timeline), _long(len(events))]
    for event in events:
        parts += (event, _PLAIN_RECORD_TAIL)
    parts += (
        b"\x00",  # the array's end (an empty array is this byte alone: never published)
        _long(min(timestamps)),
        _long(max(timestamps)),
        _long(dropped),
        _long(opened_at),
        b"\x02\x02",  # part 1 of 1
        b"\x00" if reason is None else b"\x02" + _long(_REASON_INDEX[reason]),
        _optional(total),
        _optional(next_delivery_at),
    )
    return b"".join(parts)
