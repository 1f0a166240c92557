"""Avro encoding: the schemas as published, round trips, evolution, decode errors, splitting."""

from __future__ import annotations

import io
import json
import random
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from digest_stream.wire.codec import (
    DECODE_REASONS,
    DIGEST_SCHEMA,
    EVENT_SCHEMA,
    SCHEDULE_ENTRY_SCHEMA,
    DecodeError,
    decode_digest,
    decode_event,
    decode_record,
    decode_schedule_entry,
    encode_digest,
    encode_event,
    encode_schedule_entry,
    encoded_digest_size,
    split_digest,
)
from digest_stream.wire.models import (
    INT_MAX,
    LONG_MAX,
    Digest,
    Event,
    Record,
    ScheduleEntry,
    ScheduleReason,
)
from digest_stream.wire.schedule_fields import encode_schedule_fields
from tests.support import REPO_ROOT
from tests.support.avro import write

REPO = REPO_ROOT
T0 = 1_700_000_000_000

# ---------------------------------------------------------------------------------- strategies

texts = st.text(max_size=20)
ids = st.text(min_size=1, max_size=20)
timestamps = st.integers(min_value=0, max_value=LONG_MAX)
attributes = st.dictionaries(texts, texts, max_size=4)
events = st.builds(
    Event, id=ids, timestamp=timestamps, payload=st.binary(max_size=64), attributes=attributes
)
records = st.builds(
    Record, id=ids, timestamp=timestamps, payload=st.binary(max_size=64), attributes=attributes
)


@st.composite
def digests(draw: st.DrawFn, max_records: int = 20) -> Digest:
    parts = draw(st.integers(min_value=1, max_value=INT_MAX))
    return Digest.build(
        id=draw(ids),
        timeline=draw(st.text(min_size=1, max_size=40)),
        records=draw(st.lists(records, min_size=1, max_size=max_records)),
        opened_at=draw(timestamps),
        dropped=draw(st.integers(min_value=0, max_value=INT_MAX)),
        part=draw(st.integers(min_value=1, max_value=parts)),
        parts=parts,
    )


schedule_entries = st.builds(
    ScheduleEntry,
    timeline=st.text(min_size=1, max_size=40),
    partition=st.integers(min_value=0, max_value=INT_MAX),
    scheduled_at=timestamps,
    reason=st.sampled_from(list(ScheduleReason)),
)


def sample_event() -> Event:
    return Event(id="e-1", timestamp=T0, payload=b'{"n": 1}', attributes={"source": "test"})


def sample_digest(count: int = 3) -> Digest:
    recs = [Record(id=f"r{i}", timestamp=T0 - i, payload=b"p%d" % i) for i in range(count)]
    return Digest.build(id="d-1", timeline="user:1", records=recs, opened_at=T0 + 5, dropped=2)


# ---------------------------------------------------------------------------------- schemas


def test_schema_files_ship_in_the_package_and_at_the_top() -> None:
    top = REPO / "schemas"
    assert top.is_symlink(), "schemas/ must be a symlink to digest_stream/wire/schemas"
    assert not Path(top.readlink()).is_absolute(), "the symlink must be relative"
    assert top.resolve() == (REPO / "digest_stream" / "wire" / "schemas").resolve()
    packaged = resources.files("digest_stream.wire").joinpath("schemas")
    for name in ("event.avsc", "schedule_entry.avsc", "digest.avsc"):
        assert packaged.joinpath(name).read_text("utf-8") == (top / name).read_text("utf-8")
    data = (REPO / "pyproject.toml").read_text("utf-8")
    assert '"wire/schemas/*.avsc"' in data, "package-data must include the schemas"


def _fields(schema: Any) -> dict[str, Any]:
    return {field["name"]: field["type"] for field in schema["fields"]}


TIMESTAMP = {"type": "long", "logicalType": "timestamp-millis"}
STRING_MAP = {"type": "map", "values": "string"}


def test_schemas_match_the_contract() -> None:
    assert EVENT_SCHEMA["name"] == "Event"
    assert _fields(EVENT_SCHEMA) == {
        "id": "string",
        "timestamp": TIMESTAMP,
        "payload": "bytes",
        "attributes": STRING_MAP,
    }
    assert SCHEDULE_ENTRY_SCHEMA["name"] == "ScheduleEntry"
    entry = _fields(SCHEDULE_ENTRY_SCHEMA)
    assert entry["reason"]["name"] == "ScheduleReason"
    assert entry["reason"]["symbols"] == ["IMMEDIATE", "SCHEDULED", "RECOVERED"]
    assert {k: v for k, v in entry.items() if k != "reason"} == {
        "timeline": "string",
        "partition": "int",
        "scheduled_at": TIMESTAMP,
    }
    assert DIGEST_SCHEMA["name"] == "Digest"
    digest = _fields(DIGEST_SCHEMA)
    record = digest.pop("records")
    assert record["type"] == "array"
    assert record["items"]["name"] == "DigestRecord"
    assert _fields(record["items"]) == {
        **_fields(EVENT_SCHEMA),
        "count": "int",
        "first_seen": ["null", TIMESTAMP],
    }
    reason = digest.pop("reason")
    assert reason[0] == "null"
    assert reason[1]["name"] == "DigestReason"
    # A symbol is only ever added at the end (an enum's Avro binary is its position), and
    # the enum's default is what this version's readers read a later one as (Avro resolution).
    assert reason[1]["symbols"] == [
        "IMMEDIATE", "COOLDOWN", "FLUSH_AT", "SCHEDULE", "FLUSHED", "RECOVERED", "URGENT",
    ]  # fmt: skip
    assert reason[1]["default"] == "IMMEDIATE"
    assert digest == {
        "id": "string",
        "timeline": "string",
        "start": TIMESTAMP,
        "end": TIMESTAMP,
        "dropped": "int",
        "opened_at": TIMESTAMP,
        "part": "int",
        "parts": "int",
        "total": ["null", "int"],
        "next_delivery_at": ["null", TIMESTAMP],
    }
    # Every field added since the first version has a default (issue 15): old readers read
    # new digests and new readers old ones (tests/unit/wire/test_digest_evolution.py).
    added = {"count", "first_seen", "reason", "total", "next_delivery_at"}
    for schema in (DIGEST_SCHEMA, record["items"]):
        for field in schema["fields"]:
            assert field["name"] not in added or "default" in field, field["name"]
    for schema in (EVENT_SCHEMA, SCHEDULE_ENTRY_SCHEMA, DIGEST_SCHEMA):
        assert schema["namespace"] == "digest_stream"
    for schema in (EVENT_SCHEMA, SCHEDULE_ENTRY_SCHEMA, DIGEST_SCHEMA, record["items"]):
        assert schema.get("doc"), schema["name"]
        assert all(field.get("doc") for field in schema["fields"]), schema["name"]
    defaults = [f for f in EVENT_SCHEMA["fields"] if f["name"] == "attributes"]
    assert defaults[0]["default"] == {}


def test_a_generic_avro_reader_reads_our_bytes_with_logical_types() -> None:
    # The codec skips logical-type conversion internally; the bytes are still exactly what
    # any Avro library produces and expects for the published schemas.
    parsed = fastavro.parse_schema(dict(EVENT_SCHEMA))
    value: Any = fastavro.schemaless_reader(io.BytesIO(encode_event(sample_event())), parsed)
    assert value["timestamp"] == datetime.fromtimestamp(T0 / 1000, tz=UTC)
    assert decode_event(write(EVENT_SCHEMA, value)) == sample_event()


# ---------------------------------------------------------------------------------- round trips


def test_round_trips() -> None:
    assert decode_event(encode_event(sample_event())) == sample_event()
    entry = ScheduleEntry(
        timeline="user:1", partition=7, scheduled_at=T0, reason=ScheduleReason.RECOVERED
    )
    assert decode_schedule_entry(encode_schedule_entry(entry)) == entry
    assert decode_digest(encode_digest(sample_digest())) == sample_digest()


@given(events)
def test_event_round_trip_property(event: Event) -> None:
    assert decode_event(encode_event(event)) == event


@given(events)
def test_decode_record_is_the_decoded_events_record(event: Event) -> None:
    data = encode_event(event)
    assert decode_record(data) == Record.from_event(decode_event(data))


def test_decode_record_reads_old_writers_and_rejects_what_decode_event_rejects() -> None:
    old = write(EVENT_V1, {"id": "old", "timestamp": T0, "payload": b"p"})
    assert decode_record(old, writer_schema=EVENT_V1) == Record(
        id="old", timestamp=T0, payload=b"p"
    )
    empty_id = write(dict(EVENT_SCHEMA), {"id": "", "timestamp": T0, "payload": b""})
    assert _reason(empty_id, decode_record) == "invalid-value"
    assert _reason(encode_event(sample_event())[:-1], decode_record) == "truncated"


@given(digests())
def test_digest_round_trip_property(digest: Digest) -> None:
    data = encode_digest(digest)
    assert decode_digest(data) == digest
    assert encoded_digest_size(digest) == len(data)


@given(schedule_entries)
def test_schedule_entry_round_trip_property(entry: ScheduleEntry) -> None:
    assert decode_schedule_entry(encode_schedule_entry(entry)) == entry


@given(schedule_entries)
def test_schedule_fields_encode_exactly_as_the_model(entry: ScheduleEntry) -> None:
    fields = (entry.timeline, entry.partition, entry.scheduled_at, entry.reason)
    assert encode_schedule_fields(*fields) == encode_schedule_entry(entry)


@pytest.mark.parametrize(
    ("timeline", "partition", "scheduled_at"),
    [
        ("", 0, T0),  # empty timeline
        ("t" * 1025, 0, T0),  # past MAX_TIMELINE_LENGTH
        ("\u00e9" * 513, 0, T0),  # 513 characters, 1026 bytes of UTF-8
        ("\ud800", 0, T0),  # a lone surrogate: not UTF-8
        ("t", -1, T0),
        ("t", INT_MAX + 1, T0),
        ("t", 0, -1),
        ("t", 0, LONG_MAX + 1),
        ("t", True, T0),  # a bool is no int (strict, like the model)
        ("t", 0, float(T0)),
    ],
)
def test_schedule_fields_the_model_refuses_are_refused_by_it(
    timeline: Any, partition: Any, scheduled_at: Any
) -> None:
    with pytest.raises(ValidationError):
        encode_schedule_fields(timeline, partition, scheduled_at, ScheduleReason.IMMEDIATE)


# ---------------------------------------------------------------------------------- evolution

EVENT_V1 = {
    "type": "record",
    "name": "Event",
    "namespace": "digest_stream",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "payload", "type": "bytes"},
    ],
}


def test_reads_an_event_written_with_an_older_schema() -> None:
    data = write(EVENT_V1, {"id": "old", "timestamp": T0, "payload": b"p"})
    event = decode_event(data, writer_schema=EVENT_V1)
    assert event == Event(id="old", timestamp=T0, payload=b"p", attributes={})
    # The same, with the writer schema as JSON text (the cached fast form).
    assert decode_event(data, writer_schema=json.dumps(EVENT_V1)) == event
    # Without the writer schema the bytes are simply too short for the current one.
    with pytest.raises(DecodeError) as info:
        decode_event(data)
    assert info.value.reason == "truncated"


def test_reads_an_event_written_with_a_newer_schema() -> None:
    newer = json.loads(json.dumps(EVENT_SCHEMA))
    newer["fields"].insert(2, {"name": "source", "type": "string", "default": ""})
    data = write(
        newer, {"id": "new", "timestamp": T0, "payload": b"p", "source": "x", "attributes": {}}
    )
    assert decode_event(data, writer_schema=newer) == Event(id="new", timestamp=T0, payload=b"p")


# ---------------------------------------------------------------------------------- decode errors


def _reason(data: bytes, decode: Any = decode_event, **kwargs: Any) -> str:
    with pytest.raises(DecodeError) as info:
        decode(data, **kwargs)
    assert info.value.reason in DECODE_REASONS
    assert isinstance(info.value, ValueError)
    return info.value.reason


def test_truncated_avro_at_every_length() -> None:
    for data in (encode_event(sample_event()), encode_digest(sample_digest())):
        decode = decode_event if data == encode_event(sample_event()) else decode_digest
        for cut in range(len(data)):
            assert _reason(data[:cut], decode) == "truncated", cut


def test_trailing_bytes() -> None:
    data = encode_event(sample_event())
    assert _reason(data + b"\x00") == "trailing-bytes"
    assert _reason(encode_digest(sample_digest()) + b"junk", decode_digest) == "trailing-bytes"


def test_invalid_avro() -> None:
    # String length 1, then a byte that is not UTF-8.
    assert _reason(b"\x02\xff") == "invalid-avro"
    # A negative bytes length (zig-zag 0x05 is -3) for the payload.
    assert _reason(b"\x02a\x02\x05abc\x00") == "invalid-avro"
    # Enum index 5 of 3 symbols.
    entry = encode_schedule_entry(
        ScheduleEntry(timeline="t", partition=0, scheduled_at=T0, reason=ScheduleReason.IMMEDIATE)
    )
    assert _reason(entry[:-1] + b"\x0a", decode_schedule_entry) == "invalid-avro"


def test_valid_avro_with_invalid_content() -> None:
    empty_id = write(dict(EVENT_SCHEMA), {"id": "", "timestamp": T0, "payload": b""})
    with pytest.raises(DecodeError, match="id") as info:
        decode_event(empty_id)
    assert info.value.reason == "invalid-value"
    negative = write(dict(EVENT_SCHEMA), {"id": "x", "timestamp": -5, "payload": b""})
    assert _reason(negative) == "invalid-value"


def test_records_of_another_schema() -> None:
    entry = encode_schedule_entry(
        ScheduleEntry(timeline="t", partition=3, scheduled_at=T0, reason=ScheduleReason.SCHEDULED)
    )
    # With the writer schema declared, resolution itself refuses it.
    assert _reason(entry, writer_schema=SCHEDULE_ENTRY_SCHEMA) == "schema-mismatch"
    assert _reason(encode_event(sample_event()), decode_digest, writer_schema=EVENT_SCHEMA) == (
        "schema-mismatch"
    )
    # Without: the bytes are read as ours and fail on structure. The entry's scheduled_at lands
    # where the Event's payload length is: 1.7e12 bytes that are not there.
    assert _reason(entry) == "truncated"
    # An Event's payload lands on the ScheduleEntry enum index: far out of range.
    assert _reason(encode_event(sample_event()), decode_schedule_entry) == "invalid-avro"


def test_invalid_writer_schema() -> None:
    data = encode_event(sample_event())
    assert _reason(data, writer_schema="not json") == "invalid-writer-schema"
    assert _reason(data, writer_schema={"type": "no-such-type"}) == "invalid-writer-schema"


def test_empty_value() -> None:
    assert _reason(b"") == "truncated"


def test_random_bytes_with_a_fixed_seed() -> None:
    rng = random.Random(4)
    reasons = set()
    for _ in range(2000):
        data = rng.randbytes(rng.randrange(1, 80))
        for decode in (decode_event, decode_schedule_entry, decode_digest):
            try:
                decode(data)
            except DecodeError as error:
                reasons.add(error.reason)
    assert {"truncated", "invalid-avro"} <= reasons


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes_never_escape_as_other_errors(data: bytes) -> None:
    codecs: list[tuple[Any, Any]] = [
        (decode_event, encode_event),
        (decode_schedule_entry, encode_schedule_entry),
        (decode_digest, encode_digest),
    ]
    for decode, encode in codecs:
        reason = None
        try:
            value = decode(data)
        except DecodeError as error:
            reason = error.reason
        if reason is None:
            # Random bytes can be valid Avro; then they must be a whole, valid value.
            assert decode(encode(value)) == value
        else:
            assert reason in DECODE_REASONS


@given(events, st.binary(min_size=1, max_size=8))
def test_prefixes_are_truncated_and_suffixes_trailing(event: Event, suffix: bytes) -> None:
    data = encode_event(event)
    assert _reason(data + suffix) == "trailing-bytes"
    cut = len(data) // 2
    assert _reason(data[:cut]) == "truncated"


# ---------------------------------------------------------------------------------- split


def realistic_digest(count: int, payload_size: int = 300) -> Digest:
    rng = random.Random(7)
    recs = []
    for i in range(count):
        body = {
            "event": rng.choice(["comment.created", "issue.assigned", "build.failed"]),
            "actor": {"id": rng.randrange(10**9), "name": f"user-{rng.randrange(10**6)}"},
            "project": f"project-{rng.randrange(500)}",
            "url": f"https://example.test/p/{rng.randrange(10**6)}/issues/{i}",
        }
        text = json.dumps(body)
        body["message"] = "x" * max(0, payload_size - len(text) - 16)
        recs.append(
            Record(
                id=f"evt-{i:08d}",
                timestamp=T0 - i * 37,
                payload=json.dumps(body).encode(),
                attributes={"level": "info"} if i % 3 else {},
            )
        )
    return Digest.build(
        id="digest-big", timeline="org:42", records=recs, opened_at=T0 + 1, dropped=17
    )


def check_parts(original: Digest, parts: list[Digest], max_bytes: int) -> None:
    assert [p.part for p in parts] == list(range(1, len(parts) + 1))
    assert {p.parts for p in parts} == {len(parts)}
    assert {p.id for p in parts} == {original.id}
    assert {p.timeline for p in parts} == {original.timeline}
    assert {p.opened_at for p in parts} == {original.opened_at}
    assert [r for p in parts for r in p.records] == list(original.records)
    assert [p.dropped for p in parts] == [original.dropped] + [0] * (len(parts) - 1)
    for part in parts:
        data = encode_digest(part)
        assert len(data) <= max_bytes or len(part.records) == 1
        # Each part is a valid Digest on its own: start/end are its own records' span.
        assert decode_digest(data) == part


def test_split_a_ten_thousand_record_digest_under_one_megabyte() -> None:
    digest = realistic_digest(10_000)
    max_bytes = 1_000_000
    assert len(encode_digest(digest)) > 3 * max_bytes
    parts = split_digest(digest, max_bytes)
    assert len(parts) >= 4
    check_parts(digest, parts, max_bytes)
    assert all(len(encode_digest(p)) <= max_bytes for p in parts)
    # Greedy packing: every part but the last is nearly full.
    assert all(len(encode_digest(p)) > max_bytes - 500 for p in parts[:-1])


def test_a_digest_that_fits_is_returned_as_is() -> None:
    digest = sample_digest()
    assert split_digest(digest, len(encode_digest(digest))) == [digest]


def test_split_exactly_at_the_limit() -> None:
    digest = sample_digest(50)
    size = len(encode_digest(digest))
    parts = split_digest(digest, size - 1)
    assert len(parts) == 2
    check_parts(digest, parts, size - 1)


def test_a_record_larger_than_the_limit_gets_its_own_part() -> None:
    recs = [
        Record(id="a", timestamp=T0 + 2, payload=b"s" * 10),
        Record(id="b", timestamp=T0 + 1, payload=b"L" * 5000),
        Record(id="c", timestamp=T0, payload=b"s" * 10),
    ]
    digest = Digest.build(id="d", timeline="t", records=recs, opened_at=T0, dropped=1)
    parts = split_digest(digest, 1000)
    assert [[r.id for r in p.records] for p in parts] == [["a"], ["b"], ["c"]]
    assert len(encode_digest(parts[1])) > 1000
    check_parts(digest, parts, 1000)


def test_split_refuses_a_part_and_a_silly_limit() -> None:
    part = sample_digest(10).model_copy(update={"part": 1, "parts": 2})
    with pytest.raises(ValueError, match="already part"):
        split_digest(part, 50)
    with pytest.raises(ValueError, match="positive"):
        split_digest(sample_digest(), 0)


@settings(max_examples=200)
@given(digests(max_records=40), st.integers(min_value=1, max_value=2000))
def test_split_property(digest: Digest, max_bytes: int) -> None:
    whole = digest.model_copy(update={"part": 1, "parts": 1})
    parts = split_digest(whole, max_bytes)
    if len(encode_digest(whole)) <= max_bytes:
        assert parts == [whole]
    else:
        check_parts(whole, parts, max_bytes)


def test_split_sizes_each_record_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Linear by construction: one size computation per record, however many parts result.
    from digest_stream.wire import split

    calls = 0
    original = split._record_size

    def counting(record: Record) -> int:
        nonlocal calls
        calls += 1
        return original(record)

    monkeypatch.setattr(split, "_record_size", counting)
    digest = sample_digest(2_000)
    parts = split_digest(digest, 1_000)
    assert len(parts) > 20
    assert calls == len(digest.records)
