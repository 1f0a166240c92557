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
from digest_stream.wire.avro_scan import MAX_VARINT_SHIFT, Unusual, read_long, string_end
from digest_stream.wire.models import LONG_MAX


class EventHead(NamedTuple):
    """The fields of an Event the ingest uses (attribute-compatible with `Event`)."""

    id: str
    timestamp: int  # milliseconds since the epoch


# tuple.__new__ makes the named tuple without its generated __new__ (a Python-level call):
# once per event on the hot path.
_tuple_new = tuple.__new__

# Six bytes that are no six-byte varint (the last one goes on): what _fast reads the
# timestamp's bytes as when fewer are left, so the loop reads them.
_NOT_SIX = (0, 0, 0, 0, 0, 0x80)


def _attributes_end(data: bytes, pos: int) -> int:
    """Check the attributes map at pos (every key and value UTF-8); returns its end."""
    while True:
        count, pos = read_long(data, pos)
        if count == 0:
            return pos
        if count < 0:
            raise Unusual  # a block with a byte size: rare, the full decode handles it
        for _ in range(count):
            pos = string_end(data, string_end(data, pos))


def _fast(data: bytes) -> EventHead:
    # The common shapes inline (each call costs as much as a field here): a one-byte id
    # length, a timestamp and payload length of a few bytes, an empty attributes map.
    size = data[0]
    if size & 0x81:  # a multi-byte length, or a negative one
        size, pos = read_long(data, 0)
    else:
        size, pos = size >> 1, 1
    end = pos + size
    if size <= 0 or end > len(data):
        raise Unusual  # an empty id is invalid-value, a short one truncated: decode_event says
    event_id = str(data[pos:end], "utf-8")
    # A timestamp in milliseconds from mid-1970 to 2039 is a six-byte varint: read without a
    # loop (later ones take the shared reader, as slow as before).
    b0, b1, b2, b3, b4, b5 = data[end : end + 6] if len(data) >= end + 6 else _NOT_SIX
    if b0 & b1 & b2 & b3 & b4 & 0x80 and b5 < 0x80:
        value = (
            (b0 & 0x7F) | (b1 & 0x7F) << 7 | (b2 & 0x7F) << 14 | (b3 & 0x7F) << 21
            | (b4 & 0x7F) << 28 | b5 << 35
        )  # fmt: skip
        if value & 1:
            raise Unusual  # a negative timestamp (zigzag odd)
        timestamp, pos = value >> 1, end + 6
    else:  # any other length: the shared reader
        timestamp, pos = read_long(data, end)
        if not 0 <= timestamp <= LONG_MAX:
            raise Unusual  # a negative timestamp or past a long
    byte = data[pos]
    pos += 1
    value = byte & 0x7F
    shift = 7
    while byte & 0x80:
        if shift > MAX_VARINT_SHIFT:
            raise Unusual
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
    if value & 1:
        raise Unusual  # a negative payload length
    pos += value >> 1
    if pos >= len(data):
        raise Unusual  # the attributes map needs at least its end byte
    if data[pos] == 0:  # no attributes: the common case
        pos += 1
    else:
        pos = _attributes_end(data, pos)
    if pos != len(data):
        raise Unusual
    return _tuple_new(EventHead, (event_id, timestamp))  # the NamedTuple's own __new__ costs 10x


def decode_event_head(data: bytes, writer_schema: codec.WriterSchema | None = None) -> EventHead:
    """`codec.decode_event`'s id and timestamp, and its DecodeError for anything it refuses."""
    if writer_schema is None and data:
        try:
            return _fast(data)
        except (Unusual, IndexError, UnicodeDecodeError):
            pass
    event = codec.decode_event(data, writer_schema)
    return EventHead(event.id, event.timestamp)


def event_attribute(data: bytes, name: bytes) -> str | None:
    """The value of attribute ``name`` (UTF-8) of the Event ``data`` (plain Avro that
    ``decode_event_head`` accepted), None when it has none; read off the bytes (id, timestamp
    and payload skipped), without building the Event. A repeated key counts by its last
    value, as in the decoded Event."""
    try:
        _, pos = read_long(data, string_end(data, 0))  # past the id and the timestamp
        size, pos = read_long(data, pos)
        pos += size  # past the payload
        found = None
        while True:
            count, pos = read_long(data, pos)
            if count == 0:
                return found
            if count < 0:
                raise Unusual  # a block with a byte size: the full decode
            for _ in range(count):
                size, pos = read_long(data, pos)
                key, pos = data[pos : pos + size], pos + size
                size, pos = read_long(data, pos)
                if key == name:
                    found = str(data[pos : pos + size], "utf-8")
                pos += size
    except (Unusual, IndexError):
        return codec.decode_event(data).attributes.get(name.decode("utf-8"))
