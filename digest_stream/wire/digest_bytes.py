"""A whole digest's Avro bytes assembled from its records' stored Event bytes.

A digest record has exactly an Event's fields (schemas/digest.avsc), and the store keeps each
event's own Avro encoding, so the delivery need not decode records into models and encode them
again: the `records` array is the stored bytes, one after another, behind a block count. Only
the digest's own fields are encoded here. Avro's encoding of a value is not unique (a map's
order or blocks), but every reader decodes these bytes to the same Digest as
`codec.encode_digest` of it (tests/unit/wire/test_digest_bytes.py).
"""

from __future__ import annotations

from collections.abc import Sequence


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


def whole_digest(
    digest_id: str,
    timeline: str,
    events: Sequence[bytes],
    timestamps: Sequence[int],
    dropped: int,
    opened_at: int,
) -> bytes:
    """A digest of one part (1 of 1): `events` are valid Event encodings, newest first, and
    `timestamps` their timestamps (start and end are computed from them)."""
    return b"".join(
        (
            _string(digest_id),
            _string(timeline),
            _long(len(events)),
            *events,
            b"\x00",  # the array's end (an empty array is this byte alone: never published)
            _long(min(timestamps)),
            _long(max(timestamps)),
            _long(dropped),
            _long(opened_at),
            b"\x02\x02",  # part 1 of 1
        )
    )
