"""The DigestFormat seam: each format encodes, sizes, splits and reads digests back alike."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from digest_stream.settings import Settings
from digest_stream.wire import codec, formats
from digest_stream.wire.formats import FORMATS, DigestFormat, DigestHead
from digest_stream.wire.formats.json import JsonFormat
from digest_stream.wire.models import Digest, DigestReason, Event, Record
from tests.unit.wire.test_codec import check_parts, digests, realistic_digest, sample_digest

JSON = JsonFormat()


@pytest.fixture(params=sorted(FORMATS))
def output(request: pytest.FixtureRequest) -> DigestFormat:
    return formats.choose(request.param)


def _explained(count: int = 3) -> Digest:
    return sample_digest(count).model_copy(
        update={"reason": DigestReason.FLUSH_AT, "total": count + 2, "next_delivery_at": 9}
    )


def test_every_format_reads_back_what_it_wrote_and_sizes_it_exactly(output: DigestFormat) -> None:
    for digest in (sample_digest(), _explained(), sample_digest(1)):
        value = output.encode(digest)
        assert output.decode(output.frame(value)) == digest
        assert output.size(digest) == len(value)


@settings(max_examples=150, deadline=None)
@given(digests(max_records=30), st.integers(min_value=1, max_value=3000))
def test_every_format_splits_into_parts_within_the_limit(digest: Digest, max_bytes: int) -> None:
    whole = digest.model_copy(update={"part": 1, "parts": 1})
    for output in (formats.choose(name) for name in FORMATS):
        parts = output.split(whole, max_bytes)
        if output.size(whole) <= max_bytes:
            assert parts == [whole]
            continue
        check_parts(whole, parts, max_bytes + 10**9)  # numbering, records, dropped
        for part in parts:
            value = output.encode(part)
            assert len(value) <= max_bytes or len(part.records) == 1
            assert output.decode(value) == part


def test_a_large_json_digest_splits_greedily_under_one_megabyte() -> None:
    digest = realistic_digest(5_000)
    parts = JSON.split(digest, 1_000_000)
    assert len(parts) >= 2
    sizes = [len(JSON.encode(part)) for part in parts]
    assert all(size <= 1_000_000 for size in sizes)
    assert all(size > 1_000_000 - 2_000 for size in sizes[:-1])  # nearly full
    assert [r for p in parts for r in p.records] == list(digest.records)


def test_a_json_digest_is_one_object_with_the_avro_schemas_fields() -> None:
    digest = _explained(2)
    value = json.loads(JSON.encode(digest))
    fields = [field["name"] for field in codec.DIGEST_SCHEMA["fields"]]
    record_fields = [
        field["name"] for field in codec.DIGEST_SCHEMA["fields"][2]["type"]["items"]["fields"]
    ]
    assert sorted(value) == sorted(fields)
    assert all(sorted(record) == sorted(record_fields) for record in value["records"])
    assert value["reason"] == "FLUSH_AT"
    assert (value["start"], value["end"], value["next_delivery_at"]) == (
        digest.start,
        digest.end,
        9,
    )
    first = digest.records[0]
    assert value["records"][0]["payload"] == base64.b64encode(first.payload).decode()
    assert value["records"][0]["timestamp"] == first.timestamp


def test_json_keeps_text_as_utf8_and_frames_nothing() -> None:
    record = Record(id="é-1", timestamp=1, payload=b"\x00\xff", attributes={"k": "ü"})
    digest = Digest.build(id="d", timeline="t:ü", records=[record], opened_at=1)
    value = JSON.encode(digest)
    assert "t:ü".encode() in value
    assert b"\\u" not in value
    assert JSON.frame(value) is value
    assert JSON.decode(value) == digest


@pytest.mark.parametrize(
    "value",
    [b"", b"not json", b"[]", b'{"id": "d"}', b'{"records": [{"payload": "***"}]}'],
)
def test_json_that_is_no_digest_is_a_decode_error(value: bytes) -> None:
    with pytest.raises(codec.DecodeError) as caught:
        JSON.decode(value)
    assert caught.value.reason == "invalid-value"


def test_only_avro_lays_a_digest_out_from_the_stored_event_bytes() -> None:
    head: DigestHead = ("a" * 32, "t", 0, 1, DigestReason.IMMEDIATE, 1, 2)
    event = codec.encode_event(Event(id="e", timestamp=1, payload=b"p"))

    class Stored:
        payload = event
        timestamp = 0.001

    avro = formats.choose("avro").from_stored(head, [Stored()], False)
    assert avro is not None
    value, headers = avro
    assert headers == []
    assert codec.decode_digest(value).records[0].id == "e"
    assert JSON.from_stored(head, [Stored()], False) is None


def test_the_settings_choose_the_format_and_json_leaves_room_for_base64() -> None:
    assert Settings().output_format == "avro"
    assert Settings(output_format="json").output_format == "json"
    with pytest.raises(ValueError, match="json output format"):
        Settings(output_format="json", max_message_bytes=100_000, max_event_bytes=70_000)
    Settings(output_format="avro", max_message_bytes=100_000, max_event_bytes=70_000)


def test_the_reader_refuses_a_registry_for_json_digests() -> None:
    from digest_stream.client import DigestReader

    with pytest.raises(ValueError, match="never registry-framed"):
        DigestReader("127.0.0.1:1", "g", schema_registry_url="http://r", output_format="json")


def test_json_registers_nothing_even_with_a_registry_url() -> None:
    # No network: an Avro format would register its schema here; JSON is never framed.
    chosen = formats.choose("json", registry_url="http://127.0.0.1:1", topic="t")
    assert chosen.name == "json"
    assert chosen.frame(b"{}") == b"{}"


def _fields_json(event: Event) -> int:
    """An event's fields as a JSON record holds them, by json.dumps itself."""
    fields = {
        "id": event.id,
        "timestamp": event.timestamp,
        "payload": base64.b64encode(event.payload).decode(),
        "attributes": event.attributes,
    }
    return len(json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode())


@pytest.mark.parametrize(
    ("text", "json_bytes"),
    [
        ("\x01", 6),  # a control character is \u0001
        ("\n", 2),  # one with a short escape
        ('"', 2),
        ("\\", 2),
        ("é", 2),  # non-ASCII stays UTF-8 (ensure_ascii=False): its own two bytes
        ("\u2028", 3),
        ("a", 1),
    ],
)
def test_json_sizes_an_event_by_its_escapes_not_its_avro_bytes(text: str, json_bytes: int) -> None:
    plain = Event(id="r1", timestamp=1_700_000_000_000, payload=b"p")
    event = Event(id="r1", timestamp=plain.timestamp, payload=b"p", attributes={"a": text * 1000})
    grown = JSON.event_size(codec.encode_event(event)) - JSON.event_size(codec.encode_event(plain))
    assert grown == len('"a":""') + json_bytes * 1000
    assert JSON.event_size(codec.encode_event(event)) == _fields_json(event)


def test_json_sizes_the_issue_event_at_six_times_its_avro_bytes() -> None:
    # Issue 36 b: 255,017 bytes of Avro, within max_event_bytes; 1.53 MB of JSON.
    event = Event(
        id="r1", timestamp=1_700_000_000_000, payload=b"", attributes={"a": "\x01" * 255_000}
    )
    value = codec.encode_event(event)
    assert len(value) < Settings().max_event_bytes
    assert JSON.event_size(value) == _fields_json(event) > 1_530_000
    digest = Digest(
        id="d", timeline="t", records=[Record.from_event(event)], start=event.timestamp,
        end=event.timestamp, dropped=0, opened_at=event.timestamp, part=1, parts=1,
    )  # fmt: skip
    assert len(JSON.encode(digest)) > JSON.event_size(value)  # the message is larger still


def test_avro_sizes_an_event_by_its_own_bytes() -> None:
    avro = formats.choose("avro")
    value = codec.encode_event(
        Event(id="r1", timestamp=5, payload=b"x" * 99, attributes={"a": "\x01"})
    )
    assert avro.event_size(value) == len(value)
    assert avro.surely_fits(1000) == 1000


_texts = st.text(st.characters(codec="utf-8"), max_size=40)


@settings(max_examples=300, deadline=None)
@given(
    st.builds(
        Event,
        id=_texts.filter(bool),
        timestamp=st.integers(min_value=0, max_value=2**63 - 1),
        payload=st.binary(max_size=60),
        attributes=st.dictionaries(_texts, _texts, max_size=4),
    )
)
def test_an_event_within_surely_fits_is_within_the_room_in_every_format(event: Event) -> None:
    # The check measures only events over surely_fits: that bound must never let one through
    # whose fields are over the room, whatever their text (control characters at worst).
    value = codec.encode_event(event)
    for output in (formats.choose(name) for name in FORMATS):
        size = output.event_size(value)
        assert output.surely_fits(size - 1) < len(value)
    assert JSON.event_size(value) == _fields_json(event)
