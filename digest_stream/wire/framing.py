"""The Confluent wire-format prefix: magic byte 0, then the 4-byte big-endian schema id.

confluent-kafka's own `SchemaId` reads and writes it, so this module only names the outcomes
the service needs (which id, or why the bytes are not framed). A plain-Avro Event, Digest or
ScheduleEntry never starts with byte 0: its first field is a non-empty string, whose length
is a positive zigzag varint. So a value starting with 0 is framed, anything else is plain.
"""

from __future__ import annotations

import functools
import io
from typing import TYPE_CHECKING, Final, Literal

from confluent_kafka.serialization import SerializationError

if TYPE_CHECKING:
    from confluent_kafka.schema_registry.serde import SchemaId

#: The first byte of a framed value whose schema is named by a 4-byte id.
MAGIC: Final = 0
#: magic byte + schema id.
PREFIX_BYTES: Final = 5

FramingReason = Literal["not-registry-framed", "truncated", "unknown-schema-id"]


class FramingError(ValueError):
    """Bytes that are not a value in the Confluent framing; `reason` is a DLQ reason."""

    def __init__(self, reason: FramingReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: FramingReason = reason
        self.detail = detail


@functools.cache
def _schema_id() -> type[SchemaId]:
    """confluent_kafka's SchemaId, imported on first use and kept."""
    # Not at module level: confluent_kafka.schema_registry loads the registry client, an HTTP
    # stack and OAuth/JOSE libraries (about 85 ms of every start, `-X importtime`), and a
    # service without a registry never frames anything. Not a function-local import either:
    # split() runs twice per framed event on the ingest thread, and an import statement costs
    # 0.6 us each time (half of split), the cached call 0.03.
    from confluent_kafka.schema_registry.serde import SchemaId

    return SchemaId


def prefix(schema_id: int) -> bytes:
    """The 5 bytes that precede the Avro body of a value written with schema_id."""
    return bytes(_schema_id()("AVRO", schema_id).id_to_bytes())


def is_framed(value: bytes) -> bool:
    """Whether the value starts like the Confluent framing (cheap; no validation)."""
    return bool(value) and value[0] == MAGIC


def split(value: bytes) -> tuple[int, bytes]:
    """(schema id, Avro body) of a framed value; FramingError names what is wrong."""
    if not value or value[0] not in (0, 1):
        first = f"0x{value[0]:02x}" if value else "nothing"
        raise FramingError(
            "not-registry-framed",
            f"value starts with {first}, not the schema registry's magic byte 0 "
            "(plain Avro sent to a service in schema registry mode?)",
        )
    if len(value) < PREFIX_BYTES:
        raise FramingError("truncated", f"{len(value)} bytes, shorter than the 5-byte prefix")
    buffer = io.BytesIO(value)
    schema = _schema_id()("AVRO")
    try:
        schema.from_bytes(buffer)
    except (SerializationError, ValueError) as exc:  # a GUID prefix cut short
        raise FramingError("truncated", f"damaged schema prefix: {exc}") from exc
    if schema.id is None:
        # Magic byte 1: a schema GUID (newer Confluent clients, opt-in). Apicurio's and
        # Confluent's ccompat v7 APIs look schemas up by id, so it is refused by name.
        raise FramingError(
            "unknown-schema-id", f"schema GUID {schema.guid} (magic byte 1) is not supported"
        )
    return int(schema.id), value[buffer.tell() :]
