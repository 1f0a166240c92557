"""The wire-format values of DESIGN §4 as frozen, validated pydantic models.

Event (input), Record (one record of a digest), ScheduleEntry (schedule topic) and Digest
(output). The Avro schemas in `digest_stream/wire/schemas/` are the contract; these models add the
constraints Avro cannot express (non-empty ids, bounded timeline, 1 <= part <= parts, ...).

Speed: the ingest decodes thousands of events per second, so the hot path matters. Measured with
pydantic 2.14 on a 300-byte event, strict `Event.model_validate(dict)` costs ~2.2 us while
`Event.model_construct(**dict)` costs ~4 us: in pydantic v2, construct is a Python loop over the
fields and validation is compiled Rust. So the fast path *is* validation, as long as every
constraint stays declarative (`Field(...)`, strict types) and runs in pydantic-core. Only the
timeline check is Python, and Event has no timeline. Keep it that way: a Python validator on
Event or Record would put a Python call on every decoded event.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Final, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBytes,
    StrictInt,
    StrictStr,
    TypeAdapter,
    model_validator,
)

from digest_stream.vocabulary import DigestReason

MAX_TIMELINE_LENGTH: Final = 1024
"""Longest timeline accepted, in bytes of UTF-8.

A timeline is the Kafka key and part of every Redis key of its state; an unbounded one would let
one producer bloat every key and message of it. The store's limit (store.limits.MAX_NAME_BYTES)
is the same number, pinned by tests/unit/wire/test_models.py rather than imported: importing
anything under digest_stream.store loads redis-py, which the client library (models, codec) does
not need.
"""

INT_MAX: Final = 2**31 - 1
"""Largest Avro `int`: fields of that type must stay below it or encoding fails."""

LONG_MAX: Final = 2**63 - 1
"""Largest Avro `long`."""


def _check_timeline(value: str) -> str:
    if not value:
        raise ValueError("timeline must not be empty")
    # len() counts code points and UTF-8 needs at most 4 bytes for one, so the common short
    # timeline never pays for an encode (Text already refused what cannot be encoded).
    if len(value) * 4 > MAX_TIMELINE_LENGTH:
        size = len(value.encode("utf-8"))
        if size > MAX_TIMELINE_LENGTH:
            raise ValueError(
                f"timeline is {size} bytes of UTF-8, more than MAX_TIMELINE_LENGTH "
                f"({MAX_TIMELINE_LENGTH})"
            )
    return value


# Strict types: a float timestamp (time.time()), a str payload or a bool where an int belongs is
# a caller bug that lax coercion would hide (1.7e9 seconds silently read as milliseconds).
#
# Every string goes on the wire as UTF-8, so a lone surrogate ("\ud800") must be refused here,
# not crash the encoder later. pydantic-core checks that a string is valid Unicode whenever it
# applies a length constraint (in Rust, at no measurable cost), hence the `min_length=0` that
# looks like a no-op; tests/unit/wire/test_models.py pins this.
Text = Annotated[StrictStr, Field(min_length=0)]
"""A string that is valid Unicode (encodable as UTF-8)."""
Timeline = Annotated[Text, AfterValidator(_check_timeline)]
"""A timeline name: non-empty, at most MAX_TIMELINE_LENGTH bytes of UTF-8."""
Id = Annotated[StrictStr, Field(min_length=1)]
"""A record or digest id: a non-empty string."""
TimestampMs = Annotated[StrictInt, Field(ge=0, le=LONG_MAX)]
"""Milliseconds since the Unix epoch (UTC), as an int."""
Attributes = dict[Text, Text]
"""Free-form string attributes."""
Count = Annotated[StrictInt, Field(ge=0, le=INT_MAX)]
"""A non-negative Avro int."""
PartNumber = Annotated[StrictInt, Field(ge=1, le=INT_MAX)]
"""A 1-based Avro int."""

_TIMELINE: Final = TypeAdapter(Timeline)


def validate_timeline(timeline: str) -> str:
    """Return timeline if it is a valid timeline name, else raise pydantic.ValidationError."""
    return _TIMELINE.validate_python(timeline)


class _Frozen(BaseModel):
    # Frozen: these are messages; a consumer must not be able to edit one another still holds.
    # extra="forbid": a misspelt field name fails loudly instead of being dropped.
    model_config = ConfigDict(frozen=True, extra="forbid")


class Event(_Frozen):
    """One input event (value of digests.events); its Kafka key is the timeline."""

    id: Id
    timestamp: TimestampMs
    payload: StrictBytes
    attributes: Attributes = Field(default_factory=dict)


class Record(_Frozen):
    """One record of a digest: an event as the store kept it.

    `count` > 1 when the timeline's `collapse_by` attribute collapsed that many records with the
    same value into this one (the newest); `first_seen` is then the oldest one's event time.
    """

    id: Id
    timestamp: TimestampMs
    payload: StrictBytes
    attributes: Attributes = Field(default_factory=dict)
    count: PartNumber = 1
    first_seen: TimestampMs | None = None

    @classmethod
    def from_event(cls, event: Event) -> Record:
        """The record an event becomes once stored."""
        return cls(
            id=event.id,
            timestamp=event.timestamp,
            payload=event.payload,
            attributes=event.attributes,
        )


class ScheduleReason(StrEnum):
    """Why a timeline was put on the schedule topic."""

    IMMEDIATE = "IMMEDIATE"
    """First event of a quiet timeline: deliver at once."""
    SCHEDULED = "SCHEDULED"
    """The timeline's cool-down ended with records waiting."""
    RECOVERED = "RECOVERED"
    """Maintenance found a delivery that never completed and rescheduled it."""


class ScheduleEntry(_Frozen):
    """A timeline ready for delivery (value of digests.schedule)."""

    timeline: Timeline
    partition: Count
    scheduled_at: TimestampMs
    # Lax on purpose: accept the symbol string ("SCHEDULED") as well as the enum member.
    reason: Annotated[ScheduleReason, Field(strict=False)]


class Digest(_Frozen):
    """One digest, or one part of a digest too large for a single Kafka message.

    `records` are newest first. `start`/`end` are the oldest/newest record times *of this
    message*; `dropped` counts records lost before delivery (capacity trimming plus expired
    payloads) and is reported on part 1 only. A digest with no records is never published, so
    `records` must not be empty; use `Digest.build` to get start/end computed.
    """

    id: Id
    timeline: Timeline
    records: Annotated[tuple[Record, ...], Field(min_length=1)]
    start: TimestampMs
    end: TimestampMs
    dropped: Count = 0
    opened_at: TimestampMs
    part: PartNumber = 1
    parts: PartNumber = 1
    # Lax on purpose, like ScheduleEntry.reason: the Avro symbol string is accepted.
    reason: Annotated[DigestReason | None, Field(strict=False)] = None
    total: Count | None = None
    next_delivery_at: TimestampMs | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.part > self.parts:
            raise ValueError(f"part {self.part} is beyond parts {self.parts}")
        oldest = min(record.timestamp for record in self.records)
        newest = max(record.timestamp for record in self.records)
        if (self.start, self.end) != (oldest, newest):
            raise ValueError(
                f"start/end ({self.start}, {self.end}) must be the oldest/newest record time "
                f"({oldest}, {newest})"
            )
        return self

    @classmethod
    def build(
        cls,
        *,
        id: str,
        timeline: str,
        records: tuple[Record, ...] | list[Record],
        opened_at: int,
        dropped: int = 0,
        part: int = 1,
        parts: int = 1,
        reason: DigestReason | None = None,
        total: int | None = None,
        next_delivery_at: int | None = None,
    ) -> Digest:
        """A validated digest whose start/end are computed from its records."""
        timestamps = [record.timestamp for record in records]
        return cls(
            id=id,
            timeline=timeline,
            records=tuple(records),
            # An empty record list makes these defaults, and validation then rejects it.
            start=min(timestamps, default=0),
            end=max(timestamps, default=0),
            dropped=dropped,
            opened_at=opened_at,
            part=part,
            parts=parts,
            reason=reason,
            total=total,
            next_delivery_at=next_delivery_at,
        )

    @property
    def is_whole(self) -> bool:
        """True when the digest was sent as one message (part 1 of 1)."""
        return self.parts == 1


__all__ = [
    "INT_MAX",
    "LONG_MAX",
    "MAX_TIMELINE_LENGTH",
    "Attributes",
    "Count",
    "Digest",
    "DigestReason",
    "Event",
    "Id",
    "PartNumber",
    "Record",
    "ScheduleEntry",
    "ScheduleReason",
    "Text",
    "Timeline",
    "TimestampMs",
    "validate_timeline",
]
