"""The JSON digest format: one UTF-8 JSON object per message, for consumers without Avro.

The object has the fields of the Avro Digest (schemas/digest.avsc) under the same names, with
the same meaning: times are integers (milliseconds since the epoch), ``reason`` the symbol's
name or null, and each record an object with ``id``, ``timestamp``, ``payload`` (the event's
payload bytes in standard base64), ``attributes``, ``count`` and ``first_seen``. A digest too
large for one message is split into parts exactly as in Avro (``part``/``parts``, records
newest first across parts, ``dropped`` on part 1); the carried event headers ride on every
part. It is never framed: a schema registry (if set) still reads the events, but registers no
JSON schema for the digests.

Each record is encoded once: a part's value is its head and its records' encodings joined,
so a split sizes records without encoding them twice.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any, Final, Literal

from pydantic import ValidationError

from digest_stream.wire.codec import DecodeError, decode_record, digest_fields
from digest_stream.wire.formats.base import DigestHead, Header, StoredEvent
from digest_stream.wire.models import Digest, Record
from digest_stream.wire.split import numbered_parts

#: Widest decimal of a field a split rewrites per part (an Avro long: 20 characters).
_WIDEST_NUMBER: Final = -(2**63)
_NUMBERED = ("start", "end", "dropped", "part", "parts")


def _dumps(value: Any) -> bytes:
    # Compact, and UTF-8 as it is (no \\u escapes for non-ASCII text): the smallest value.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _event_fields(record: Record) -> dict[str, Any]:
    """The record's object up to its event's fields (id, timestamp, payload, attributes)."""
    return {
        "id": record.id,
        "timestamp": record.timestamp,
        "payload": base64.b64encode(record.payload).decode("ascii"),
        "attributes": record.attributes,
    }


def _record(record: Record) -> bytes:
    fields = _event_fields(record)
    fields["count"] = record.count
    fields["first_seen"] = record.first_seen
    return _dumps(fields)


#: The event fields' object of the smallest event (a one-character id, nothing else).
_EMPTY_FIELDS: Final = len(_dumps(_event_fields(Record(id="x", timestamp=0, payload=b""))))
#: JSON bytes an Avro byte of an event can become: a control character is six (\u0001); a
#: quote or backslash two; other text is its own UTF-8; base64 is four for three; a length
#: or a varint prefix is at least one byte where JSON's quotes, colons and commas are fixed.
_MOST_PER_BYTE: Final = 6


def _head(digest: Digest, **numbers: int) -> bytes:
    """The digest's object without its records, open where the records array goes."""
    fields = {**digest_fields(digest), **numbers}
    return _dumps(fields)[:-1] + b',"records":['


def _joined(head: bytes, records: Sequence[bytes]) -> bytes:
    return head + b",".join(records) + b"]}"


class JsonFormat:
    """Digests as JSON objects (unframed)."""

    name: Final[Literal["json"]] = "json"

    def encode(self, digest: Digest) -> bytes:
        """The digest's JSON object, UTF-8."""
        return _joined(_head(digest), [_record(record) for record in digest.records])

    def size(self, digest: Digest) -> int:
        """``len(encode(digest))`` (JSON has no cheaper exact size)."""
        return len(self.encode(digest))

    def event_size(self, event: bytes) -> int:
        """Bytes the Avro event's fields take in its record, by the encoder itself (its
        escapes, base64); DecodeError when they do not decode."""
        return len(_dumps(_event_fields(decode_record(event))))

    def surely_fits(self, room: int) -> int:
        """The largest Avro event whose fields take at most ``room`` bytes of JSON, whatever
        they hold (six bytes for each of its own, past the fields' names)."""
        return max(0, (room - _EMPTY_FIELDS) // _MOST_PER_BYTE)

    def split(self, digest: Digest, max_bytes: int) -> list[Digest]:
        """Greedy parts, in record order, each encoding within ``max_bytes``."""
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        sizes = [len(_record(record)) for record in digest.records]
        whole = len(_head(digest)) + sum(sizes) + len(sizes) - 1 + 2
        if whole <= max_bytes:
            return [digest]
        if digest.parts != 1:
            raise ValueError(
                f"digest {digest.id} is already part {digest.part} of {digest.parts}; "
                "split the whole digest"
            )
        # Every part's head is at most this long: its rewritten numbers at their widest.
        room = max_bytes - len(_head(digest, **dict.fromkeys(_NUMBERED, _WIDEST_NUMBER))) - 2
        records = digest.records
        bounds: list[tuple[int, int, int, int]] = []
        first = 0
        while first < len(records):
            end, used = first, -1  # n records take their sizes plus n - 1 commas
            while end < len(records) and (end == first or used + 1 + sizes[end] <= room):
                used += 1 + sizes[end]
                end += 1
            times = [record.timestamp for record in records[first:end]]
            bounds.append((first, end, min(times), max(times)))
            first = end
        return numbered_parts(digest, bounds)

    def frame(self, value: bytes) -> bytes:
        """Unframed: the JSON object is the whole value."""
        return value

    def decode(self, value: bytes) -> Digest:
        """The Digest a value holds; DecodeError ("invalid-value") when it does not."""
        try:
            fields = json.loads(value)
            if not isinstance(fields, dict) or not isinstance(fields.get("records"), list):
                raise ValueError("not a digest object")
            records = [
                {**r, "payload": base64.b64decode(r["payload"], validate=True)}
                for r in fields["records"]
            ]
            return Digest.model_validate({**fields, "records": records})
        except (ValueError, TypeError, KeyError, binascii.Error, ValidationError) as exc:
            raise DecodeError("invalid-value", f"not a JSON digest: {exc}") from exc

    def from_stored(
        self, head: DigestHead, records: Sequence[StoredEvent], checked: bool
    ) -> tuple[bytes, list[Header]] | None:
        """No fast path: the stored events are Avro; the models decode them."""
        return None
