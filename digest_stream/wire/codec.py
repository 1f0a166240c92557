"""Plain Avro binary encoding of the wire formats (DESIGN §4), with precise decode errors.

The schemas ship in `digest_stream/wire/schemas/*.avsc` and are parsed once, at import.
Messages carry no schema id or header: the reader knows the schema from the topic. A reader
given the schema a message was written with (`writer_schema=`) resolves it by Avro rules, so
events written with an older schema version still decode.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any, Final, Literal, TypeVar, cast, get_args

import fastavro
from fastavro import _read_py
from fastavro.read import SchemaResolutionError
from pydantic import BaseModel, ValidationError

from digest_stream.wire import framing
from digest_stream.wire.models import (
    Digest,
    Event,
    Record,
    ScheduleEntry,
)
from digest_stream.wire.split import encoded_digest_size, split_digest

DecodeReason = Literal[
    "truncated",
    "invalid-avro",
    "trailing-bytes",
    "schema-mismatch",
    "invalid-writer-schema",
    "invalid-value",
    "not-registry-framed",
    "unknown-schema-id",
]
"""Why a value could not be decoded (DecodeError.reason; also the DLQ reason header)."""

DECODE_REASONS: Final[tuple[DecodeReason, ...]] = get_args(DecodeReason)
"""Every DecodeReason, in declaration order."""


class DecodeError(ValueError):
    """A value that is not a valid encoding of the expected schema.

    `reason` is one of:
    - "truncated": the bytes end before the value does (this includes a corrupt length prefix
      that points past the end: the two cannot be told apart);
    - "invalid-avro": bytes no encoding can produce (negative length, bad UTF-8, enum index out
      of range, ...);
    - "trailing-bytes": a whole value decoded but bytes were left over; random bytes often start
      with a valid encoding, so a full read is the only honest check;
    - "schema-mismatch": the given writer schema cannot be resolved against ours;
    - "invalid-writer-schema": the given writer schema is not a valid Avro schema;
    - "invalid-value": valid Avro whose content breaks the model's rules (an empty id, ...);
    - "not-registry-framed": schema registry mode, but the value lacks the Confluent framing
      (plain Avro, say);
    - "unknown-schema-id": schema registry mode, and the registry does not know the value's
      schema id.
    """

    def __init__(self, reason: DecodeReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: DecodeReason = reason
        self.detail = detail


Schema = Mapping[str, Any]
"""A JSON Avro schema, as parsed by json.loads."""

WriterSchema = Schema | str
"""A writer schema: the JSON object, or its JSON text (the faster form: it is cached by text)."""


def _load(name: str) -> dict[str, Any]:
    text = resources.files("digest_stream.wire").joinpath("schemas", name).read_text("utf-8")
    return cast(dict[str, Any], json.loads(text))


EVENT_SCHEMA: Final[Schema] = _load("event.avsc")
"""The Event schema as published (schemas/event.avsc). Do not mutate."""
SCHEDULE_ENTRY_SCHEMA: Final[Schema] = _load("schedule_entry.avsc")
"""The ScheduleEntry schema as published (schemas/schedule_entry.avsc). Do not mutate."""
DIGEST_SCHEMA: Final[Schema] = _load("digest.avsc")
"""The Digest schema as published (schemas/digest.avsc). Do not mutate."""
DIGEST_SCHEMA_V1: Final[Schema] = _load("digest.v1.avsc")
"""The first Digest schema (before reason, total, next_delivery_at, count, first_seen)."""


def _without_logical_types(schema: Any) -> Any:
    # fastavro turns timestamp-millis longs into timezone-aware datetimes on read (and the
    # models would turn them back): wasted work per field on the hot path, and the store and
    # scheduler do integer millisecond arithmetic anyway. A logical type only annotates the
    # underlying type and never changes the bytes, so the codec reads and writes the plain
    # longs. Default values are data, not schema: leave them alone.
    if isinstance(schema, Mapping):
        return {
            key: value if key == "default" else _without_logical_types(value)
            for key, value in schema.items()
            if key != "logicalType"
        }
    if isinstance(schema, list):
        return [_without_logical_types(item) for item in schema]
    return schema


def _parse(schema: Any) -> Any:
    # Any: a parsed schema is a dict for a record but a str or list for a primitive or union
    # (a caller's writer schema can be any of them).
    return fastavro.parse_schema(_without_logical_types(schema))


# Parsed once: fastavro re-parses an unparsed schema on every call.
_EVENT: Final[dict[str, Any]] = _parse(EVENT_SCHEMA)
_SCHEDULE_ENTRY: Final[dict[str, Any]] = _parse(SCHEDULE_ENTRY_SCHEMA)
_DIGEST: Final[dict[str, Any]] = _parse(DIGEST_SCHEMA)


@functools.lru_cache(maxsize=64)
def _parse_writer(text: str) -> Any:
    try:
        return _parse(json.loads(text))
    except Exception as exc:
        # fastavro raises a zoo of types for a bad schema (SchemaParseException, UnknownType,
        # KeyError, TypeError...): one reason covers them all.
        raise DecodeError("invalid-writer-schema", f"{type(exc).__name__}: {exc}") from exc


def _writer(schema: WriterSchema) -> Any:
    text = schema if isinstance(schema, str) else json.dumps(schema, sort_keys=True)
    return _parse_writer(text)


# ---------------------------------------------------------------------------------- encoding


def _encode(schema: dict[str, Any], datum: Mapping[str, Any]) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, datum)
    return buffer.getvalue()


def _record_datum(record: Event | Record) -> dict[str, Any]:
    return {
        "id": record.id,
        "timestamp": record.timestamp,
        "payload": record.payload,
        "attributes": record.attributes,
    }


def encode_event(event: Event) -> bytes:
    """Avro binary of an Event."""
    return _encode(_EVENT, _record_datum(event))


def encode_schedule_entry(entry: ScheduleEntry) -> bytes:
    """Avro binary of a ScheduleEntry."""
    return _encode(
        _SCHEDULE_ENTRY,
        {
            "timeline": entry.timeline,
            "partition": entry.partition,
            "scheduled_at": entry.scheduled_at,
            "reason": entry.reason.value,
        },
    )


def _digest_record_datum(record: Record) -> dict[str, Any]:
    return {
        "id": record.id,
        "timestamp": record.timestamp,
        "payload": record.payload,
        "attributes": record.attributes,
        "count": record.count,
        "first_seen": record.first_seen,
    }


def _digest_datum(digest: Digest) -> dict[str, Any]:
    return {
        **digest_fields(digest),
        "records": [_digest_record_datum(record) for record in digest.records],
    }


def digest_fields(digest: Digest) -> dict[str, Any]:
    """A digest's own fields (all but its records) by their schema names, the reason as its
    symbol: what every output format writes."""
    return {
        "id": digest.id,
        "timeline": digest.timeline,
        "start": digest.start,
        "end": digest.end,
        "dropped": digest.dropped,
        "opened_at": digest.opened_at,
        "part": digest.part,
        "parts": digest.parts,
        "reason": None if digest.reason is None else digest.reason.value,
        "total": digest.total,
        "next_delivery_at": digest.next_delivery_at,
    }


def encode_digest(digest: Digest) -> bytes:
    """Avro binary of a Digest."""
    return _encode(_DIGEST, _digest_datum(digest))


# ---------------------------------------------------------------------------------- decoding


class _ReadTracker(io.BytesIO):
    """A buffer that remembers the first suspicious read request, to classify a failure."""

    anomaly: Literal["short", "negative"] | None = None

    def read(self, size: int | None = -1, /) -> bytes:
        if self.anomaly is None:
            if size is None or size < 0:
                # The Avro reader only ever asks for a length it decoded: a negative one is
                # corrupt data (and BytesIO would happily read "everything" for it).
                self.anomaly = "negative"
            elif size > len(self.getbuffer()) - self.tell():
                self.anomaly = "short"
        return super().read(size)


def _classify(data: bytes, writer: Any, reader: Any) -> DecodeReason:
    # The C reader's exceptions say little (a truncated varint is an IndexError, like an enum
    # index out of range). Failures are rare, so replay them through fastavro's pure-Python
    # reader over a buffer that watches every read: running out of bytes means "truncated".
    tracker = _ReadTracker(data)
    try:
        _read_py.schemaless_reader(tracker, writer, reader)
    except SchemaResolutionError:
        return "schema-mismatch"
    except Exception:  # noqa: S110 - the tracker below holds the verdict, not the exception
        pass
    return "truncated" if tracker.anomaly == "short" else "invalid-avro"


def _schema_name(schema: Any) -> str:
    if isinstance(schema, Mapping):
        return str(schema.get("name", schema.get("type")))
    return str(schema) if isinstance(schema, str) else type(schema).__name__


def _decode_avro(
    data: bytes, schema: dict[str, Any], writer_schema: WriterSchema | None
) -> dict[str, Any]:
    if not data:
        # An empty value (or a tombstone passed through as None) holds no record at all.
        raise DecodeError("truncated", "empty value")
    writer, reader = (schema, None) if writer_schema is None else (_writer(writer_schema), schema)
    buffer = io.BytesIO(data)
    try:
        datum = fastavro.schemaless_reader(buffer, writer, reader)
    except SchemaResolutionError as exc:
        # fastavro's message embeds both schemas whole; name them instead.
        raise DecodeError(
            "schema-mismatch",
            f"writer schema {_schema_name(writer)!r} cannot be read as {_schema_name(schema)!r}",
        ) from exc
    except Exception as exc:
        # Broad on purpose: arbitrary bytes make the C reader raise EOFError, IndexError,
        # UnicodeDecodeError, ValueError, OverflowError... and bad input must become a
        # DecodeError, never crash a consumer.
        reason = _classify(bytes(data), writer, reader)
        raise DecodeError(reason, f"{type(exc).__name__}: {exc}") from exc
    consumed = buffer.tell()
    if consumed != len(data):
        raise DecodeError("trailing-bytes", f"value ends at byte {consumed} of {len(data)}")
    if not isinstance(datum, dict):
        raise DecodeError("schema-mismatch", f"expected a record, got {type(datum).__name__}")
    return datum


_M = TypeVar("_M", bound=BaseModel)


def _validate(model: type[_M], datum: dict[str, Any]) -> _M:
    try:
        return model.model_validate(datum)
    except ValidationError as exc:
        errors = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or model.__name__}: {error['msg']}"
            for error in exc.errors(include_url=False)[:5]
        )
        raise DecodeError("invalid-value", f"{model.__name__}: {errors}") from exc


def decode_event(data: bytes, writer_schema: WriterSchema | None = None) -> Event:
    """Decode an Event; writer_schema is the schema it was written with, when not the current."""
    # model_validate, not model_construct: it is the faster of the two (see models.py) and
    # it enforces what Avro cannot (non-empty id, timestamp >= 0).
    return _validate(Event, _decode_avro(data, _EVENT, writer_schema))


def decode_record(data: bytes, writer_schema: WriterSchema | None = None) -> Record:
    """Decode an Event's bytes straight into the Record it becomes (one validation, not two).

    Record has exactly Event's fields and rules, so this is `Record.from_event(decode_event(...))`
    without building the Event.
    """
    return _validate(Record, _decode_avro(data, _EVENT, writer_schema))


def decode_schedule_entry(data: bytes, writer_schema: WriterSchema | None = None) -> ScheduleEntry:
    """Decode a ScheduleEntry, plain or in the Confluent framing (schema registry mode).

    The schedule topic is internal: this service is its only writer, with this schema, so a
    framed entry's body is read with it and its schema id is not looked up.
    """
    if framing.is_framed(data):
        try:
            data = framing.split(data)[1]
        except framing.FramingError as exc:
            raise DecodeError(exc.reason, exc.detail) from exc
    return _validate(ScheduleEntry, _decode_avro(data, _SCHEDULE_ENTRY, writer_schema))


def decode_digest(data: bytes, writer_schema: WriterSchema | None = None) -> Digest:
    """Decode a Digest; writer_schema is the schema it was written with, when not the current.

    Without one, a value the current schema cannot read is tried as the first version wrote
    it, so a digest topic holding both versions stays readable after an upgrade (only failures
    pay for the second try; the first error is raised when that fails too). Plain Avro bytes
    carry no schema id, so this is a best effort: with the writer schema known (a registry)
    Avro resolution is exact.
    """
    try:
        datum = _decode_avro(data, _DIGEST, writer_schema)
    except DecodeError as error:
        if writer_schema is not None:
            raise
        try:
            datum = _decode_avro(data, _DIGEST, _DIGEST_V1_TEXT)
        except DecodeError:
            raise error from None
    return _validate(Digest, datum)


_DIGEST_V1_TEXT: Final = json.dumps(DIGEST_SCHEMA_V1, sort_keys=True)


__all__ = [
    "DECODE_REASONS",
    "DIGEST_SCHEMA",
    "DIGEST_SCHEMA_V1",
    "EVENT_SCHEMA",
    "SCHEDULE_ENTRY_SCHEMA",
    "DecodeError",
    "DecodeReason",
    "Schema",
    "WriterSchema",
    "decode_digest",
    "decode_event",
    "decode_record",
    "decode_schedule_entry",
    "encode_digest",
    "encode_event",
    "encode_schedule_entry",
    "encoded_digest_size",
    "split_digest",
]
