"""The ``DigestFormat`` seam: what every digest format offers (see ``wire.formats``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from digest_stream.wire.models import Digest, DigestReason

#: The names of the formats (the ``output_format`` setting), each one module here.
FormatName = Literal["avro", "json"]

Header = tuple[str, bytes]


#: A digest's own fields (everything but its records and their times), as composed: id,
#: timeline, dropped, opened_at (ms), reason, total, next_delivery_at (ms). A plain tuple:
#: one is made per digest on the publish path's hot loop, and an exact tuple is the
#: cheapest to make and to unpack (a named tuple cost 5% of an Avro digest's build).
DigestHead = tuple[str, str, int, int, DigestReason, int, int]


class StoredEvent(Protocol):
    """A record as the store gives it back: its stored payload and its time (seconds)."""

    @property
    def payload(self) -> bytes: ...

    @property
    def timestamp(self) -> float: ...


class DigestFormat(Protocol):
    """How digests are written to (and read from) the output topic."""

    @property
    def name(self) -> FormatName:
        """Its name (the ``output_format`` setting)."""
        ...

    def encode(self, digest: Digest) -> bytes:
        """The message value (unframed) of one digest or part."""
        ...

    def size(self, digest: Digest) -> int:
        """Exactly ``len(encode(digest))``."""
        ...

    def event_size(self, event: bytes) -> int:
        """Bytes an event (its plain Avro value) takes in a digest record of this format: its
        fields (id, timestamp, payload, attributes) as the encoder writes them; the record's
        count and first_seen are the digest's own, in ``MESSAGE_OVERHEAD_BYTES``. May decode
        it (``codec.DecodeError``)."""
        ...

    def surely_fits(self, room: int) -> int:
        """The largest event (bytes of Avro) whose ``event_size`` is at most ``room`` whatever
        it holds: an event no larger needs no measuring."""
        ...

    def split(self, digest: Digest, max_bytes: int) -> list[Digest]:
        """``[digest]`` when it encodes within ``max_bytes``, else numbered parts that do
        (a record too large on its own gets a part to itself); see ``split.split_digest``."""
        ...

    def frame(self, value: bytes) -> bytes:
        """The value as it goes on the wire (e.g. behind a schema registry prefix)."""
        ...

    def decode(self, value: bytes) -> Digest:
        """A framed-or-plain value read back; ``codec.DecodeError`` when it is not one."""
        ...

    def from_stored(
        self, head: DigestHead, records: Sequence[StoredEvent], checked: bool
    ) -> tuple[bytes, list[Header]] | None:
        """The whole digest's value and carried headers from its stored records' bytes (a
        format's fast path), or None: the digest goes through the models (no fast path, a
        record it cannot read, or a count the models refuse loudly). ``checked``: the
        records' timestamps are taken as stored (the ingest's own bytes)."""
        ...
