"""Selected Kafka headers of an event, kept next to its Avro bytes in the stored payload.

The ingest stores an event's own Avro encoding as the record payload. When the
`carry_headers` setting names headers and an event has some of them, the payload becomes

    MAGIC (2 bytes) | count (u8) | count x (name length u8, name, value length u16, value) | event

An Avro ``Event`` can never start with byte 0x00 (its first field, the id, is a non-empty
string, so it starts with a positive zigzag length), so old payloads and payloads without
carried headers stay exactly the event bytes, and the store protocol is unchanged: the store
sees opaque bytes either way. Without `carry_headers` the ingest never looks at headers.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence

MAGIC = b"\x00\xd5"
#: Bounds that keep one record's metadata small; longer values are not carried.
MAX_NAME_BYTES = 255
MAX_VALUE_BYTES = 4096
MAX_HEADERS = 16
#: A digest carries at most this many distinct values per header name.
MAX_VALUES_PER_NAME = 64

Header = tuple[str, bytes]


def wrap(
    headers: Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None,
    names: frozenset[str],
    event: bytes,
) -> bytes:
    """The payload to store: the event alone, or with the selected headers in front."""
    if not headers:
        return event
    chosen: list[tuple[bytes, bytes]] = []
    for name, value in headers.items() if isinstance(headers, Mapping) else headers:
        if name not in names or value is None:
            continue
        raw = value.encode() if isinstance(value, str) else value
        key = name.encode()
        if len(key) <= MAX_NAME_BYTES and len(raw) <= MAX_VALUE_BYTES:
            chosen.append((key, raw))
        if len(chosen) == MAX_HEADERS:
            break
    if not chosen:
        return event
    parts = [MAGIC, bytes([len(chosen)])]
    for key, raw in chosen:
        parts += [bytes([len(key)]), key, struct.pack(">H", len(raw)), raw]
    parts.append(event)
    return b"".join(parts)


def unwrap(payload: bytes) -> tuple[list[Header], bytes]:
    """(carried headers, event bytes) of a stored payload; ValueError when truncated."""
    if not payload.startswith(MAGIC):
        return [], payload
    try:
        count = payload[2]
        at = 3
        headers: list[Header] = []
        for _ in range(count):
            size = payload[at]
            name = payload[at + 1 : at + 1 + size].decode()
            at += 1 + size
            (length,) = struct.unpack_from(">H", payload, at)
            value = payload[at + 2 : at + 2 + length]
            if len(value) != length:
                raise ValueError("truncated header value")
            at += 2 + length
            headers.append((name, value))
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"damaged header envelope: {exc}") from exc
    return headers, payload[at:]


def digest_headers(per_record: Iterable[Sequence[Header]]) -> list[Header]:
    """A digest's headers: each distinct (name, value) once, in record order (newest first)."""
    seen: set[Header] = set()
    counts: dict[str, int] = {}
    merged: list[Header] = []
    for headers in per_record:
        for header in headers:
            name = header[0]
            if header in seen or counts.get(name, 0) >= MAX_VALUES_PER_NAME:
                continue
            seen.add(header)
            counts[name] = counts.get(name, 0) + 1
            merged.append(header)
    return merged
