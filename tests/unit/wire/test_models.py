"""The pydantic models: what they accept, what they refuse, and that they are frozen."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from pydantic import ValidationError

from digest_stream.store.limits import MAX_NAME_BYTES
from digest_stream.wire.models import (
    INT_MAX,
    LONG_MAX,
    MAX_TIMELINE_LENGTH,
    Digest,
    Event,
    Record,
    ScheduleEntry,
    ScheduleReason,
    validate_timeline,
)

T0 = 1_700_000_000_000


def event(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"id": "e1", "timestamp": T0, "payload": b"{}", "attributes": {}}
    fields.update(overrides)
    return fields


def record(id: str = "r1", timestamp: int = T0) -> Record:
    return Record(id=id, timestamp=timestamp, payload=b"x")


# ---------------------------------------------------------------------------------- Event


def test_event_defaults_attributes_to_empty() -> None:
    e = Event(id="e1", timestamp=T0, payload=b"p")
    assert e.attributes == {}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("id", ""),
        ("id", 5),
        ("timestamp", -1),
        ("timestamp", LONG_MAX + 1),
        ("timestamp", 1.7e12),  # float milliseconds (or worse, time.time() seconds)
        ("timestamp", True),
        ("timestamp", "1700000000000"),
        ("payload", "text, not bytes"),
        ("id", "lone \ud800 surrogate"),
        ("attributes", {"k": 1}),
        ("attributes", {1: "v"}),
        # Strings are encoded as UTF-8: a lone surrogate must be refused, not crash the encoder.
        ("attributes", {"k": "\udfff"}),
        ("attributes", {"\ud800": "v"}),
    ],
)
def test_event_refuses(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as info:
        Event.model_validate(event(**{field: value}))
    assert info.value.errors()[0]["loc"][0] == field


def test_event_refuses_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="extra"):
        Event.model_validate(event(timeline="t"))


def test_event_accepts_the_timestamp_range() -> None:
    assert Event.model_validate(event(timestamp=0)).timestamp == 0
    assert Event.model_validate(event(timestamp=LONG_MAX)).timestamp == LONG_MAX


def test_models_are_frozen() -> None:
    e = Event.model_validate(event())
    with pytest.raises(ValidationError, match="frozen"):
        e.id = "other"  # type: ignore[misc]
    d = Digest.build(id="d", timeline="t", records=[record()], opened_at=T0)
    with pytest.raises(ValidationError, match="frozen"):
        d.dropped = 3  # type: ignore[misc]
    assert isinstance(d.records, tuple)


def test_record_from_event() -> None:
    e = Event(id="e1", timestamp=T0, payload=b"p", attributes={"a": "b"})
    assert Record.from_event(e) == Record(
        id="e1", timestamp=T0, payload=b"p", attributes={"a": "b"}
    )


# ---------------------------------------------------------------------------------- timeline


def test_timeline_limit_is_the_stores_without_importing_the_store() -> None:
    # The same number on both sides (a timeline models accept, the store accepts), but not
    # imported: the client library must not load the store and redis-py with it.
    assert MAX_TIMELINE_LENGTH == MAX_NAME_BYTES
    code = "import sys, digest_stream.client; print(sorted(m for m in sys.modules if m in B))"
    blocked = "B = {'redis', 'digest_stream.store'}; "
    out = subprocess.run(
        [sys.executable, "-c", blocked + code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_timeline_limit_is_in_utf8_bytes() -> None:
    assert validate_timeline("a" * MAX_TIMELINE_LENGTH) == "a" * MAX_TIMELINE_LENGTH
    with pytest.raises(ValidationError, match="1025 bytes"):
        validate_timeline("a" * (MAX_TIMELINE_LENGTH + 1))
    four_byte = "\U0001f600"
    assert validate_timeline(four_byte * (MAX_TIMELINE_LENGTH // 4))
    with pytest.raises(ValidationError, match="MAX_TIMELINE_LENGTH"):
        validate_timeline(four_byte * (MAX_TIMELINE_LENGTH // 4 + 1))
    # 342 characters of 3 bytes: few enough characters, too many bytes.
    with pytest.raises(ValidationError, match="1026 bytes"):
        validate_timeline("\u20ac" * 342)


@pytest.mark.parametrize("bad", ["", "lone \ud800 surrogate"])
def test_timeline_refuses(bad: str) -> None:
    with pytest.raises(ValidationError):
        validate_timeline(bad)


# ---------------------------------------------------------------------------------- schedule


def test_schedule_entry_accepts_reason_symbols() -> None:
    entry = ScheduleEntry(timeline="t", partition=0, scheduled_at=T0, reason="RECOVERED")
    assert entry.reason is ScheduleReason.RECOVERED
    assert [r.value for r in ScheduleReason] == ["IMMEDIATE", "SCHEDULED", "RECOVERED"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("reason", "LATER"), ("partition", -1), ("partition", INT_MAX + 1), ("timeline", "")],
)
def test_schedule_entry_refuses(field: str, value: object) -> None:
    fields: dict[str, Any] = {
        "timeline": "t",
        "partition": 0,
        "scheduled_at": T0,
        "reason": ScheduleReason.IMMEDIATE,
    }
    fields[field] = value
    with pytest.raises(ValidationError):
        ScheduleEntry.model_validate(fields)


# ---------------------------------------------------------------------------------- digest


def test_digest_build_computes_start_and_end() -> None:
    records = [record("c", T0 + 20), record("b", T0 + 30), record("a", T0)]
    d = Digest.build(id="d", timeline="t", records=records, opened_at=T0 + 40, dropped=2)
    assert (d.start, d.end) == (T0, T0 + 30)
    assert (d.part, d.parts, d.dropped) == (1, 1, 2)
    assert d.is_whole
    assert d.records == tuple(records)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"part": 2, "parts": 1}, "beyond parts"),
        ({"part": 0}, "greater than or equal to 1"),
        ({"parts": 0}, "greater than or equal to 1"),
        ({"dropped": -1}, "greater than or equal to 0"),
        ({"dropped": INT_MAX + 1}, "less than or equal to"),
        ({"records": []}, "at least 1"),
        ({"id": ""}, "at least 1"),
        ({"timeline": "x" * (MAX_TIMELINE_LENGTH + 1)}, "MAX_TIMELINE_LENGTH"),
        ({"start": T0 - 1}, "oldest/newest"),
        ({"end": T0 + 1}, "oldest/newest"),
    ],
)
def test_digest_refuses(overrides: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {
        "id": "d",
        "timeline": "t",
        "records": [record()],
        "start": T0,
        "end": T0,
        "opened_at": T0,
    }
    fields.update(overrides)
    with pytest.raises(ValidationError, match=message):
        Digest.model_validate(fields)


def test_digest_build_refuses_no_records() -> None:
    with pytest.raises(ValidationError, match="at least 1"):
        Digest.build(id="d", timeline="t", records=[], opened_at=T0)


def test_digest_accepts_records_as_dicts() -> None:
    d = Digest.model_validate(
        {
            "id": "d",
            "timeline": "t",
            "records": [{"id": "r", "timestamp": T0, "payload": b"p"}],
            "start": T0,
            "end": T0,
            "opened_at": T0,
            "part": 2,
            "parts": 3,
        }
    )
    assert d.records[0] == Record(id="r", timestamp=T0, payload=b"p")
    assert not d.is_whole
