"""What the ingest needs of an Event (its id and timestamp), read without building the Event.

The ingest stores an event's own bytes and never looks at its payload or attributes, so it
does not need fastavro's dict, the pydantic model, or a copy of the payload: it needs the id,
the timestamp, and the certainty that the bytes are a valid Event. `decode_event_head` walks
the Avro binary once in plain Python (bench/hotpath_bench.py: about a third of
`codec.decode_event`'s time on a 200-byte payload) and hands anything unusual to
`codec.decode_event`, the one judge of what is valid and of every DecodeError's reason:

- the fast path accepts only what `decode_event` accepts (a non-empty id, 0 <= timestamp <=
  LONG_MAX, valid UTF-8 in every string, a map that ends, no trailing bytes);
- anything else (a writer schema, a truncated or odd encoding, a negative map block) takes
  the full decode, which raises the precise DecodeError or, for a valid rarity, returns it.

tests/unit/wire/test_event_head.py pins the agreement with `decode_event` on random bytes.
"""

from __future__ import annotations

from typing import NamedTuple

from digest_stream.wire import codec
from digest_stream.wire.models import LONG_MAX

# A zigzag varint of a 64-bit long takes at most ten bytes; past that fastavro decides.
_MAX_VARINT_SHIFT = 63


class EventHead(NamedTuple):
    """The fields of an Event the ingest uses (attribute-compatible with `Event`)."""

    id: str
    timestamp: int  # milliseconds since the epoch


class _Unusual(Exception):
    """The fast path does not vouch for these bytes: the full decode decides."""


def _long(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at pos: (value, position after it)."""
    byte = data[pos]
    pos += 1
    value = byte & 0x7F
    shift = 7
    while byte & 0x80:
        if shift > _MAX_VARINT_SHIFT:
            raise _Unusual
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
    return (value >> 1) ^ -(value & 1), pos


def _string_end(data: bytes, pos: int) -> int:
    """Check the UTF-8 string at pos; returns the position after it."""
    size, pos = _long(data, pos)
    end = pos + size
    if size < 0 or end > len(data):
        raise _Unusual
    if size:
        # Strict UTF-8 refuses surrogates too: exactly what the model's Text accepts.
        str(data[pos:end], "utf-8")
    return end


def _attributes_end(data: bytes, pos: int) -> int:
    """Check the attributes map at pos (every key and value UTF-8); returns its end."""
    while True:
        count, pos = _long(data, pos)
        if count == 0:
            return pos
        if count < 0:
            raise _Unusual  # a block with a byte size: rare, the full decode handles it
        for _ in range(count):
            pos = _string_end(data, _string_end(data, pos))


def _fast(data: bytes) -> EventHead:
    # The common shapes inline (each call costs as much as a field here): a one-byte id
    # length, a timestamp and payload length of a few bytes, an empty attributes map.
    size = data[0]
    if size & 0x81:  # a multi-byte length, or a negative one
        size, pos = _long(data, 0)
    else:
        size, pos = size >> 1, 1
    end = pos + size
    if size <= 0 or end > len(data):
        raise _Unusual  # an empty id is invalid-value, a short one truncated: decode_event says
    event_id = str(data[pos:end], "utf-8")
    byte = data[end]
    pos = end + 1
    value = byte & 0x7F
    shift = 7
    while byte & 0x80:
        if shift > _MAX_VARINT_SHIFT:
            raise _Unusual
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
    if value & 1 or value >> 1 > LONG_MAX:
        raise _Unusual  # a negative timestamp (zigzag odd) or past a long
    timestamp = value >> 1
    byte = data[pos]
    pos += 1
    value = byte & 0x7F
    shift = 7
    while byte & 0x80:
        if shift > _MAX_VARINT_SHIFT:
            raise _Unusual
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
    if value & 1:
        raise _Unusual  # a negative payload length
    pos += value >> 1
    if pos >= len(data):
        raise _Unusual  # the attributes map needs at least its end byte
    if data[pos] == 0:  # no attributes: the common case
        pos += 1
    else:
        pos = _attributes_end(data, pos)
    if pos != len(data):
        raise _Unusual
    return EventHead(event_id, timestamp)


def decode_event_head(data: bytes, writer_schema: codec.WriterSchema | None = None) -> EventHead:
    """`codec.decode_event`'s id and timestamp, and its DecodeError for anything it refuses."""
    if writer_schema is None and data:
        try:
            return _fast(data)
        except (_Unusual, IndexError, UnicodeDecodeError):
            pass
    event = codec.decode_event(data, writer_schema)
    return EventHead(event.id, event.timestamp)
