"""The message check, pure: one consumed message becomes a record, a rejection, or nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from digest_stream.store import validate
from digest_stream.store.base import CANCEL, CANCEL_ALL, FLUSH, InvalidArgument, NewRecord
from digest_stream.wire import codec, control, envelope
from digest_stream.wire.models import validate_timeline

Headers = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None


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
class Rules:
    """What the check needs from the settings."""

    max_event_bytes: int
    max_event_age: float | None
    carry_headers: frozenset[str]


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
        event = codec.decode_event(value)
    except codec.DecodeError as exc:
        return Rejected(exc.reason, exc.detail)
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
    return NewRecord(
        timeline=timeline,
        id=event.id,
        timestamp=timestamp,
        payload=envelope.wrap(headers, carry, value) if carry else value,
        offset=offset,
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
