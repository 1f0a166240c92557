"""Avro binary in plain Python: reading for the lean decoders (event_head, schedule_fields),
and the varint the hand-written encoders (codec.encode_schedule_fields, digest_bytes) share.

A lean decoder walks the few shapes it vouches for and raises `Unusual` at anything else (a
varint longer than a long's, a negative or overlong length); the codec's full decoder then
decides, as the one judge of what is valid and of every DecodeError's reason.
"""

from __future__ import annotations

from typing import Final

MAX_VARINT_SHIFT: Final = 63
"""A zigzag varint of a 64-bit long takes at most ten bytes; past that the full decoder decides."""


#: Zig-zag varints of one byte, by zig-zag value: counts, lengths and small numbers.
_ONE_BYTE: Final = [bytes((zigzag,)) for zigzag in range(0x80)]


class Unusual(Exception):
    """The lean path does not vouch for these bytes: the full decoder decides."""


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (Avro int or long) at pos: (value, position after it)."""
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
    return (value >> 1) ^ -(value & 1), pos


def string_end(data: bytes, pos: int) -> int:
    """Check the UTF-8 string at pos; returns the position after it."""
    size, pos = read_long(data, pos)
    end = pos + size
    if size < 0 or end > len(data):
        raise Unusual
    if size:
        # Strict UTF-8 refuses surrogates too: exactly what the models' Text accepts.
        str(data[pos:end], "utf-8")
    return end


def write_long(value: int) -> bytes:
    """An Avro int or long of a non-negative value (every one the encoders write): its zig-zag
    varint. A negative one raises ValueError: zig-zagging it would cost every call."""
    zigzag = value << 1
    if 0 <= zigzag < 0x80:
        return _ONE_BYTE[zigzag]  # the common case: small fields, short lengths
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)
