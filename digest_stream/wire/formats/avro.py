"""The Avro digest format (schemas/digest.avsc): the default, and the only one a schema
registry frames (the Confluent wire format, the Digest schema registered at start).

Its own optimisation: the store keeps each event's Avro encoding, which is a digest record's
head, so a common digest (one part, no collapse) is laid out from those bytes as they are
(``digest_bytes.whole_digest``) instead of decoded into models and encoded again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

from digest_stream.wire import codec, envelope, registry
from digest_stream.wire.digest_bytes import whole_digest
from digest_stream.wire.event_head import decode_event_head
from digest_stream.wire.formats.base import DigestHead, Header, StoredEvent
from digest_stream.wire.models import INT_MAX, Digest


def _plain(value: bytes) -> bytes:
    return value


class AvroFormat:
    """Digests as Avro binary, plain or behind the registry's 5-byte prefix."""

    name: Final[Literal["avro"]] = "avro"

    def __init__(self, frame: Callable[[bytes], bytes] = _plain) -> None:
        self.frame = frame

    @classmethod
    def for_topic(cls, url: str | None, config: Mapping[str, Any], topic: str) -> AvroFormat:
        """Plain without a registry URL; with one, the Digest schema registered for ``topic``
        now (SchemaRefused / RegistryUnavailable at start) and each value framed under it."""
        return cls(registry.output_frame(url, config, topic, codec.DIGEST_SCHEMA))

    def encode(self, digest: Digest) -> bytes:
        """Avro binary of the digest."""
        return codec.encode_digest(digest)

    def size(self, digest: Digest) -> int:
        """The Avro size, computed without encoding."""
        return codec.encoded_digest_size(digest)

    def event_size(self, event: bytes) -> int:
        """The event's own bytes: a record's first fields are its encoding as it is."""
        return len(event)

    def surely_fits(self, room: int) -> int:
        """``room``: an event's fields take exactly its own bytes."""
        return room

    def split(self, digest: Digest, max_bytes: int) -> list[Digest]:
        """Parts whose Avro encodings fit ``max_bytes``."""
        return codec.split_digest(digest, max_bytes)

    def decode(self, value: bytes) -> Digest:
        """A plain value (a framed one is read with its writer schema: DigestReader)."""
        return codec.decode_digest(value)

    def from_stored(
        self, head: DigestHead, records: Sequence[StoredEvent], checked: bool
    ) -> tuple[bytes, list[Header]] | None:
        """The digest laid out from the stored Event bytes (one encode pass, no models)."""
        events: list[bytes] = []
        timestamps: list[int] = []
        carried: list[list[Header]] = []
        for stored in records:
            try:
                headers, event = envelope.unwrap(stored.payload)
                if checked:  # the event's milliseconds, as the ingest divided them
                    timestamps.append(round(stored.timestamp * 1000))
                else:
                    timestamps.append(decode_event_head(event).timestamp)  # and checks the bytes
            except ValueError:
                return None  # the models path says which and counts it lost
            events.append(event)
            if headers:
                carried.append(headers)
        digest_id, timeline, dropped, opened_at, reason, total, next_at = head  # one unpack
        if not events or dropped > INT_MAX:
            return None  # nothing to publish, or a count the models path refuses loudly
        value = whole_digest(
            digest_id,
            timeline,
            events,
            timestamps,
            dropped,
            opened_at,
            reason=reason,
            total=total,
            next_delivery_at=next_at,
        )
        return value, envelope.digest_headers(carried) if carried else []
