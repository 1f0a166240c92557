"""The message check, pure: one consumed message becomes a record, a rejection, or nothing."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from digest_stream.store import limits, validate
from digest_stream.store.base import CANCEL, CANCEL_ALL, FLUSH, NewRecord
from digest_stream.store.errors import InvalidArgument
from digest_stream.wire import codec, control, envelope
from digest_stream.wire.event_head import EventHead, decode_event_head
from digest_stream.wire.models import MAX_TIMELINE_LENGTH, Event, validate_timeline
from digest_stream.wire.registry import WriterSchemas

_tuple_new = tuple.__new__

Headers = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None

# A record id of at most this many characters is within the store's byte limit whatever they
# are (UTF-8 takes at most 4 bytes per character), so the common id needs no encode to check.
_SURELY_SHORT_ID = limits.MAX_NAME_BYTES // 4


@dataclass(frozen=True, slots=True)
class Rejected:
    """Bad input: dead-lettered with this reason (the DLQ header) and detail."""

    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class TooOld:
    """Older than ``max_event_age``: dropped and counted, not dead-lettered."""


TOO_OLD = TooOld()


@dataclass(frozen=True, slots=True)
class OutputRoom:
    """What one event may take in a digest record of the output format."""

    format: str  # its name, for the rejection's detail
    room: int  # bytes a digest message keeps for one event (max_message_bytes less overhead)
    surely_fits: int  # an event of at most this many bytes fits: it is not measured
    measure: Callable[[bytes], int]  # the format's event_size (may raise codec.DecodeError)


#: No output limit beyond max_event_bytes (tests and benchmarks of the check alone).
UNLIMITED = OutputRoom("any", sys.maxsize, sys.maxsize, len)


@dataclass(frozen=True, slots=True)
class Rules:
    """What the check needs from the settings."""

    max_event_bytes: int
    max_event_age: float | None
    carry_headers: frozenset[str]
    # Schema registry mode: the writer schemas the batch names, fetched before the check.
    schemas: WriterSchemas | None = None
    output: OutputRoom = UNLIMITED


def check(
    key: bytes | str | None,
    value: bytes | str | None,
    headers: Headers,
    offset: int,
    now: float,
    rules: Rules,
) -> NewRecord | Rejected | TooOld:
    """Decode and check one message's parts; the store will accept what this returns."""
    if not key:
        return Rejected("missing-key", "the Kafka key (timeline) is empty")
    try:
        if type(key) is bytes and len(key) <= MAX_TIMELINE_LENGTH:
            # Hot path: non-empty, short enough in bytes, and strict UTF-8 is valid text.
            timeline = str(key, "utf-8")
        else:  # the model's own check, for its exact message
            timeline = validate_timeline(key.decode("utf-8") if isinstance(key, bytes) else key)
    except (UnicodeDecodeError, ValueError) as exc:
        return Rejected("invalid-key", str(exc))
    if not value or not isinstance(value, bytes):
        return Rejected("missing-value", "the message has no value")
    if value.startswith(control.MAGIC):  # the one check ordinary events pay for controls
        return _control(timeline, value, offset, now)
    if len(value) > rules.max_event_bytes:
        return Rejected(
            "oversize",
            f"value is {len(value)} bytes, over DIGEST_STREAM_MAX_EVENT_BYTES "
            f"({rules.max_event_bytes})",
        )
    try:
        event: EventHead | Event
        if rules.schemas is None:
            # Only the id and timestamp: the payload and attributes stay the event's own bytes.
            event = decode_event_head(value)
        else:
            full, plain = rules.schemas.decode(value, codec.decode_event)
            # The store keeps our plain encoding whatever schema the producer wrote with,
            # so delivery reads every record the same way.
            value = plain if plain is not None else codec.encode_event(full)
            event = full
    except codec.DecodeError as exc:
        return Rejected(exc.reason, exc.detail)
    output = rules.output
    if len(value) > output.surely_fits:  # only a large event can outgrow its message
        rejected = _outgrown(value, output)
        if rejected is not None:
            return rejected
    if len(event.id) > _SURELY_SHORT_ID:
        try:
            # The store's own rule: a batch the store would refuse must never be sent to it.
            validate.name(event.id, "record id")
        except InvalidArgument as exc:
            return Rejected("invalid-id", str(exc))
    timestamp = event.timestamp / 1000.0
    if rules.max_event_age is not None and now - timestamp > rules.max_event_age:
        return TOO_OLD
    # The stored payload is the event's own encoding: delivery decodes it into a record.
    carry = rules.carry_headers
    payload = envelope.wrap(headers, carry, value) if carry else value
    # tuple.__new__: every field given, without NewRecord's generated __new__ (a tenth of
    # the check's time)
    return _tuple_new(NewRecord, (timeline, event.id, timestamp, payload, offset, None))


def _outgrown(value: bytes, output: OutputRoom) -> Rejected | None:
    """An event whose fields the output format makes larger than a digest message keeps for
    one event (JSON's escapes: a control character takes six bytes): a digest holding it could
    never be published, so it is refused here, as oversize."""
    try:
        size = output.measure(value)
    except codec.DecodeError as exc:
        return Rejected(exc.reason, exc.detail)
    if size <= output.room:
        return None
    return Rejected(
        "oversize",
        f"its record takes {size:,} bytes in the {output.format} output format, over the "
        f"{output.room:,} a digest message keeps for one event (DIGEST_STREAM_MAX_MESSAGE_BYTES "
        "less its own fields, key and carried headers)",
    )


#: The record id a control without one carries (never looked at by the store).
CONTROL_ID = "control"


def _control(timeline: str, value: bytes, offset: int, now: float) -> NewRecord | Rejected:
    """A control message: a store control operation at its offset, or a rejection."""
    try:
        parsed = control.decode(value)
        if parsed.record is not None:
            validate.name(parsed.record, "record id")
    except (ValueError, InvalidArgument) as exc:
        return Rejected("invalid-control", str(exc))
    if parsed.op == "flush":
        operation, record_id = FLUSH, CONTROL_ID
    elif parsed.record is None:
        operation, record_id = CANCEL_ALL, CONTROL_ID
    else:
        operation, record_id = CANCEL, parsed.record
    return NewRecord(timeline, record_id, now, b"", offset, operation)
