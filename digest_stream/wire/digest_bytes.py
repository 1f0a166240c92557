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
from functools import lru_cache
from typing import Final

from digest_stream.wire.avro_scan import long_bytes as _long
from digest_stream.wire.models import DigestReason
from digest_stream.wire.symbols import REASON_INDEX

# count = 1 (zig-zag 2), first_seen = null (union branch 0): a record standing for itself.
_PLAIN_RECORD_TAIL: Final = b"\x02\x00"


# The reason union of each DigestReason: branch 1, then its Avro index (its position in
# schemas/digest.avsc), encoded once.
_REASON_BYTES: Final = {reason: b"\x02" + _long(index) for reason, index in REASON_INDEX.items()}

# A record's tail, then the array's end (an empty array is that byte alone: never published).
_LAST_RECORD_END: Final = _PLAIN_RECORD_TAIL + b"\x00"

# A delivery batch's digests share their opened_at and next_delivery_at (one clock reading,
# one policy): each is encoded once per batch, even when the tails around them differ.
_shared_long = lru_cache(maxsize=64)(_long)


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _long(len(raw)) + raw


def _optional(value: int | None) -> bytes:
    """A ["null", int|long] union."""
    return b"\x00" if value is None else b"\x02" + _long(value)


# The digest's fields after its records' time span: the leading digests of a batch share
# all of them (one clock reading, one policy, one record, nothing dropped), so each distinct
# tail is encoded once; a tail of its own (delivery's totals vary) still finds its times
# encoded (_shared_long).
@lru_cache(maxsize=64)
def _tail(
    dropped: int,
    opened_at: int,
    reason: DigestReason | None,
    total: int | None,
    next_delivery_at: int | None,
) -> bytes:
    return b"".join(
        (
            _long(dropped),
            _shared_long(opened_at),
            b"\x02\x02",  # part 1 of 1
            b"\x00" if reason is None else _REASON_BYTES[reason],
            _optional(total),
            b"\x00" if next_delivery_at is None else b"\x02" + _shared_long(next_delivery_at),
        )
    )


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
    tail = _tail(dropped, opened_at, reason, total, next_delivery_at)
    if len(events) == 1:  # most leading digests: one record, its time both start and end
        start = _long(timestamps[0])
        return b"".join(
            (_string(digest_id), _string(timeline), b"\x02", events[0], _LAST_RECORD_END,
             start, start, tail)
        )  # fmt: skip
    first, last = min(timestamps), max(timestamps)
    start = _long(first)
    parts = [_string(digest_id), _string(timeline), _long(len(events))]
    for event in events:
        parts += (event, _PLAIN_RECORD_TAIL)
    parts += (b"\x00", start, start if last == first else _long(last), tail)
    return b"".join(parts)
