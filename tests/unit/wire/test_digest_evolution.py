"""The Digest schema evolved compatibly (issue 15): an old reader reads a new digest, a new
reader an old one, and sizes stay exact with the new fields."""

from __future__ import annotations

import copy
import io
from typing import Any

import fastavro
import pytest

from digest_stream.wire import codec
from digest_stream.wire.models import Digest, DigestReason, Event, Record
from tests.support.avro import write


def _explained() -> Digest:
    return Digest.build(
        id="d1",
        timeline="user:42",
        records=[
            Record(id="b", timestamp=2_000, payload=b"B", count=3, first_seen=1_000),
            Record(id="a", timestamp=1_500, payload=b"A", attributes={"k": "v"}),
        ],
        opened_at=2_100,
        dropped=4,
        reason=DigestReason.FLUSH_AT,
        total=9,
        next_delivery_at=2_600_000,
    )


def _read(data: bytes, writer: Any, reader: Any) -> dict[str, Any]:
    parsed_writer = fastavro.parse_schema(writer)
    parsed_reader = fastavro.parse_schema(reader)
    datum = fastavro.schemaless_reader(io.BytesIO(data), parsed_writer, parsed_reader)
    assert isinstance(datum, dict)
    return datum


def test_an_old_reader_reads_a_new_digest() -> None:
    new = codec.encode_digest(_explained())
    old = _read(new, codec.DIGEST_SCHEMA, codec.DIGEST_SCHEMA_V1)
    assert set(old) == {f["name"] for f in codec.DIGEST_SCHEMA_V1["fields"]}
    assert [r["id"] for r in old["records"]] == ["b", "a"]
    assert set(old["records"][0]) == {"id", "timestamp", "payload", "attributes"}
    assert (old["dropped"], old["part"], old["parts"]) == (4, 1, 1)


def _old_bytes() -> bytes:
    return write(
        codec.DIGEST_SCHEMA_V1,
        {
            "id": "d0", "timeline": "t", "start": 5, "end": 7, "dropped": 1, "opened_at": 8,
            "part": 1, "parts": 1,
            "records": [
                {"id": "y", "timestamp": 7, "payload": b"Y", "attributes": {}},
                {"id": "x", "timestamp": 5, "payload": b"X", "attributes": {}},
            ],
        },
    )  # fmt: skip


@pytest.mark.parametrize("writer", [codec.DIGEST_SCHEMA_V1, None])
def test_a_new_reader_reads_an_old_digest(writer: Any) -> None:
    # With the writer schema given (a registry), and without (plain bytes on the topic).
    digest = codec.decode_digest(_old_bytes(), writer)
    assert (digest.reason, digest.total, digest.next_delivery_at) == (None, None, None)
    assert [(r.id, r.count, r.first_seen) for r in digest.records] == [
        ("y", 1, None),
        ("x", 1, None),
    ]
    assert digest.dropped == 1


def test_a_truncated_new_digest_is_still_reported_truncated() -> None:
    data = codec.encode_digest(_explained())
    with pytest.raises(codec.DecodeError) as caught:
        codec.decode_digest(data[:-3])
    assert caught.value.reason == "truncated"


def test_new_fields_round_trip_and_sizes_stay_exact() -> None:
    digest = _explained()
    data = codec.encode_digest(digest)
    assert codec.decode_digest(data) == digest
    assert codec.encoded_digest_size(digest) == len(data)
    plain = Digest.build(id="d", timeline="t", records=[Record(id="r", timestamp=1, payload=b"")],
                         opened_at=1)  # fmt: skip
    assert codec.encoded_digest_size(plain) == len(codec.encode_digest(plain))


def test_split_parts_share_reason_total_and_next_delivery_and_fit() -> None:
    records = [
        Record(id=f"r{i:03d}", timestamp=10_000 - i, payload=b"x" * 200, count=1 + i % 3,
               first_seen=None if i % 2 else 5_000 - i)
        for i in range(60)
    ]  # fmt: skip
    whole = Digest.build(
        id="d", timeline="t", records=records, opened_at=10_001, dropped=2,
        reason=DigestReason.RECOVERED, total=62, next_delivery_at=99_999_999,
    )  # fmt: skip
    parts = codec.split_digest(whole, 2_000)
    assert len(parts) > 1
    for part in parts:
        assert (part.reason, part.total, part.next_delivery_at) == (
            DigestReason.RECOVERED,
            62,
            99_999_999,
        )
        assert len(codec.encode_digest(part)) <= 2_000
        assert codec.encoded_digest_size(part) == len(codec.encode_digest(part))


def test_the_fast_path_bytes_carry_the_explanation_like_the_model_encoding() -> None:
    from digest_stream.wire.digest_bytes import whole_digest

    events = [
        codec.encode_event(Event(id="b", timestamp=2_000, payload=b"B")),
        codec.encode_event(Event(id="a", timestamp=1_000, payload=b"A", attributes={"k": "v"})),
    ]
    value = whole_digest(
        "d", "t", events, [2_000, 1_000], 3, 2_100,
        reason=DigestReason.SCHEDULE, total=5, next_delivery_at=86_400_000,
    )  # fmt: skip
    digest = codec.decode_digest(value)
    assert (digest.reason, digest.total, digest.next_delivery_at) == (
        DigestReason.SCHEDULE,
        5,
        86_400_000,
    )
    assert [(r.id, r.count, r.first_seen) for r in digest.records] == [
        ("b", 1, None),
        ("a", 1, None),
    ]
    assert codec.encode_digest(digest) == value


def _with_reasons(symbols: list[str], default: str | None) -> dict[str, Any]:
    """The Digest schema with its DigestReason enum made of ``symbols`` (and ``default``)."""
    schema = copy.deepcopy(dict(codec.DIGEST_SCHEMA))
    (field,) = [f for f in schema["fields"] if f["name"] == "reason"]
    enum = field["type"][1]
    enum["symbols"] = symbols
    enum.pop("default", None)
    if default is not None:
        enum["default"] = default
    return schema


#: The schema before URGENT (issue 39, item 3): no URGENT, no default on the enum.
BEFORE_URGENT = ["IMMEDIATE", "COOLDOWN", "FLUSH_AT", "SCHEDULE", "FLUSHED", "RECOVERED"]


@pytest.mark.parametrize("reason", [r for r in DigestReason if r is not DigestReason.URGENT])
def test_a_reader_from_before_urgent_reads_every_other_reason(reason: DigestReason) -> None:
    # URGENT was added at the end: every older symbol kept its position (its Avro encoding).
    data = codec.encode_digest(_explained().model_copy(update={"reason": reason}))
    old = _read(data, codec.DIGEST_SCHEMA, _with_reasons(BEFORE_URGENT, None))
    assert old["reason"] == reason.value


def test_a_reader_from_before_urgent_cannot_read_urgent() -> None:
    # Why its readers are upgraded before urgent_when is set (docs/operations.md).
    data = codec.encode_digest(_explained().model_copy(update={"reason": DigestReason.URGENT}))
    with pytest.raises(fastavro.read.SchemaResolutionError):
        _read(data, codec.DIGEST_SCHEMA, _with_reasons(BEFORE_URGENT, None))


def test_this_version_reads_a_reason_added_later_as_its_default() -> None:
    later = _with_reasons([*(r.value for r in DigestReason), "LATER"], None)
    datum = _read(codec.encode_digest(_explained()), codec.DIGEST_SCHEMA, codec.DIGEST_SCHEMA)
    datum["reason"] = "LATER"
    data = write(later, datum)
    assert _read(data, later, codec.DIGEST_SCHEMA)["reason"] == "IMMEDIATE"
