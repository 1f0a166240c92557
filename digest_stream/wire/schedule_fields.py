"""A schedule entry's fields, read and written without fastavro or the pydantic model.

The delivery decodes every entry of the schedule topic, and at one event per timeline there
is one entry per digest: `codec.decode_schedule_entry` (fastavro's reader, then the model)
took 13-27% of the delivery thread's time. The entry is four small fields in Avro binary, so
`decode_schedule_fields` walks them once in plain Python and hands anything unusual to
`codec.decode_schedule_entry`, the one judge of what is valid and of every DecodeError's
reason (and so of the dead-letter reason):

- the fast path accepts only what the full decoder accepts: a timeline of 1 to
  MAX_TIMELINE_LENGTH bytes of valid UTF-8, 0 <= partition <= INT_MAX, 0 <= scheduled_at <=
  LONG_MAX, a known reason index, no trailing bytes;
- anything else (a writer schema, the schema registry's framing, a truncated or odd encoding,
  an unknown field's bytes) takes the full decode, which raises the precise DecodeError or,
  for a valid rarity, returns it.

tests/unit/wire/test_schedule_fields.py pins the agreement with the full decoder.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from digest_stream.wire import codec
from digest_stream.wire.avro_scan import Unusual, long_bytes, read_long
from digest_stream.wire.models import (
    INT_MAX,
    LONG_MAX,
    MAX_TIMELINE_LENGTH,
    ScheduleEntry,
    ScheduleReason,
)


class ScheduleFields(NamedTuple):
    """A schedule entry as the delivery uses it (attribute-compatible with `ScheduleEntry`)."""

    timeline: str
    partition: int
    scheduled_at: int  # milliseconds since the epoch
    reason: ScheduleReason

    @classmethod
    def of(cls, entry: ScheduleEntry) -> ScheduleFields:
        """The fields of a ScheduleEntry model."""
        return cls(entry.timeline, entry.partition, entry.scheduled_at, entry.reason)


#: The reasons by their Avro enum index (the schema's symbol order).
_REASONS: Final = tuple(
    ScheduleReason(symbol) for symbol in codec.SCHEDULE_ENTRY_SCHEMA["fields"][3]["type"]["symbols"]
)


#: Each reason's Avro enum index, for the lean writer.
_REASON_INDEX: Final = {reason: index for index, reason in enumerate(_REASONS)}


#: Builds a ScheduleFields from a tuple of its four values, skipping the generated __new__'s
#: Python frame (0.12 us instead of 0.28 here, of about 1.2 for a whole entry).
_fields: Final = tuple.__new__


def _fast(data: bytes) -> ScheduleFields:
    # The common shape inline (each call costs as much as a field here): a one-byte timeline
    # length, a one-byte partition and reason.
    size = data[0]
    if size & 0x81:  # a multi-byte length, or a negative one
        size, pos = read_long(data, 0)
    else:
        size, pos = size >> 1, 1
    end = pos + size
    # size 0 is an empty timeline (invalid-value) or the registry's magic byte: both the
    # full decoder's; so is one too long (invalid-value) or cut short (truncated).
    if size <= 0 or size > MAX_TIMELINE_LENGTH or end > len(data):
        raise Unusual
    timeline = str(data[pos:end], "utf-8")  # strict: surrogates refused, as the model's Text
    byte = data[end]
    if byte & 0x81:  # a multi-byte partition, or a negative one
        partition, pos = read_long(data, end)
    else:
        partition, pos = byte >> 1, end + 1
    scheduled_at, pos = read_long(data, pos)
    index = data[pos]  # zigzag: 0, 2 and 4 are the three symbols
    if (
        pos + 1 != len(data)
        or index & 0x81
        or index >> 1 >= len(_REASONS)
        or not 0 <= partition <= INT_MAX
        or not 0 <= scheduled_at <= LONG_MAX
    ):
        raise Unusual
    return _fields(ScheduleFields, (timeline, partition, scheduled_at, _REASONS[index >> 1]))


def decode_schedule_fields(
    data: bytes, writer_schema: codec.WriterSchema | None = None
) -> ScheduleFields:
    """`codec.decode_schedule_entry`'s fields, and its DecodeError for anything it refuses."""
    if writer_schema is None and data:
        try:
            return _fast(data)
        except (Unusual, IndexError, UnicodeDecodeError):
            pass
    return ScheduleFields.of(codec.decode_schedule_entry(data, writer_schema))


def encode_schedule_fields(
    timeline: str, partition: int, scheduled_at: int, reason: ScheduleReason
) -> bytes:
    """`encode_schedule_entry(ScheduleEntry(...))`'s bytes without building the model.

    Every timeline the ingest finds READY is announced, so at one event per timeline the
    model and fastavro's writer cost 3.4 us an event (of a catch-up's ~45 us). Values the
    model would refuse, or that need its judgement, take the model path and its errors.
    """
    if (
        type(timeline) is str
        and type(partition) is int
        and type(scheduled_at) is int
        and 0 <= partition <= INT_MAX
        and 0 <= scheduled_at <= LONG_MAX
        and type(reason) is ScheduleReason
    ):
        try:
            name = timeline.encode()  # strict UTF-8: a lone surrogate raises, as Text refuses
        except UnicodeEncodeError:
            name = b""
        if 0 < len(name) <= MAX_TIMELINE_LENGTH:
            return b"".join(
                (
                    long_bytes(len(name)),
                    name,
                    long_bytes(partition),
                    long_bytes(scheduled_at),
                    long_bytes(_REASON_INDEX[reason]),
                )
            )
    return codec.encode_schedule_entry(
        ScheduleEntry(
            timeline=timeline, partition=partition, scheduled_at=scheduled_at, reason=reason
        )
    )
