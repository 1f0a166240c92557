"""The ingest's lean event decoder agrees with codec.decode_event on every input."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from digest_stream.wire import codec
from digest_stream.wire.codec import EVENT_SCHEMA, decode_event, encode_event
from digest_stream.wire.event_head import EventHead, decode_event_head, event_attribute
from digest_stream.wire.models import LONG_MAX, Event
from tests.support.avro import assert_agree, verdict, write

T0 = 1_700_000_000_000

events = st.builds(
    Event,
    id=st.text(min_size=1, max_size=300),
    timestamp=st.integers(min_value=0, max_value=LONG_MAX),
    payload=st.binary(max_size=300),
    attributes=st.dictionaries(st.text(max_size=20), st.text(max_size=20), max_size=4),
)


def _head(value: Any) -> object:
    """What the lean decode gives: the id and the timestamp."""
    return (value.id, value.timestamp)


def _agree(data: bytes) -> None:
    assert_agree(decode_event_head, decode_event, _head, data)


@given(events)
def test_a_valid_event_gives_its_id_and_timestamp(event: Event) -> None:
    assert decode_event_head(encode_event(event)) == EventHead(event.id, event.timestamp)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes_get_the_same_verdict_and_reason(data: bytes) -> None:
    _agree(data)


@given(events, st.integers(min_value=0), st.binary(min_size=1, max_size=4))
def test_damaged_events_get_the_same_verdict_and_reason(
    event: Event, at: int, noise: bytes
) -> None:
    data = encode_event(event)
    cut = at % (len(data) + 1)
    _agree(data[:cut])  # truncated anywhere
    _agree(data + noise)  # trailing bytes
    _agree(data[:cut] + noise + data[cut + len(noise) :])  # overwritten anywhere


def test_every_prefix_and_byte_flip_of_a_sample_agrees() -> None:
    rng = random.Random(13)
    data = encode_event(
        Event(id="é-1", timestamp=T0, payload=b"p" * 40, attributes={"k": "v", "ü": ""})
    )
    for cut in range(len(data) + 1):
        _agree(data[:cut])
    for at in range(len(data)):
        for _ in range(8):
            _agree(data[:at] + bytes([rng.randrange(256)]) + data[at + 1 :])


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated"),
        (write(EVENT_SCHEMA, {"id": "", "timestamp": T0, "payload": b""}), "invalid-value"),
        (write(EVENT_SCHEMA, {"id": "x", "timestamp": -5, "payload": b""}), "invalid-value"),
        (b"\x02\xff", "invalid-avro"),  # an id that is not UTF-8
        (b"\x02a\x02\x05abc\x00", "invalid-avro"),  # a negative payload length
        (b"\x02a\x02\x00\x02\x02\xff\x00\x00", "invalid-avro"),  # an attribute key not UTF-8
        (b"\x02a\x02\x00\x02\x00\x00\x02\xed\xa0\x80\x00", "invalid-avro"),  # a surrogate value
        (encode_event(Event(id="x", timestamp=T0, payload=b"")) + b"\x00", "trailing-bytes"),
    ],
)
def test_each_refusal_keeps_the_codecs_reason(data: bytes, reason: str) -> None:
    assert verdict(decode_event, data, _head) == ("error", reason)
    assert verdict(decode_event_head, data, _head) == ("error", reason)


def test_a_map_in_sized_blocks_is_read_by_the_full_decoder() -> None:
    # A negative block count carries the block's byte size: valid Avro the fast path leaves to
    # decode_event. Block of one pair, size 4: "k" -> "v".
    data = b"\x02x\x00\x00" + b"\x01\x08\x02k\x02v" + b"\x00"
    assert decode_event(data).attributes == {"k": "v"}
    assert decode_event_head(data) == EventHead("x", 0)


def test_the_fast_path_takes_the_common_event_without_the_full_decoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("the full decoder ran")

    monkeypatch.setattr(codec, "decode_event", refuse)
    data = encode_event(Event(id="e-1", timestamp=T0, payload=b"x" * 200, attributes={"a": "b"}))
    assert decode_event_head(data) == EventHead("e-1", T0)


def test_a_writer_schema_takes_the_full_decoder() -> None:
    old = {
        **EVENT_SCHEMA,
        "fields": [f for f in EVENT_SCHEMA["fields"] if f["name"] != "attributes"],
    }
    data = write(old, {"id": "x", "timestamp": T0, "payload": b"p"})
    assert decode_event_head(data, old) == EventHead("x", T0)


@pytest.mark.parametrize(
    "timestamp", [0, 1, 2**34 - 1, 2**34, T0, 2**41 - 1, 2**41, 2**48, LONG_MAX]
)
def test_timestamps_around_the_six_byte_varint_take_the_fast_path(
    timestamp: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Milliseconds from mid-1970 to 2039 (2**34 to 2**41) are six-byte varints, read unrolled;
    # the lengths around them take the loop. Each is the fast path's, none the full decoder's.
    data = encode_event(Event(id="e", timestamp=timestamp, payload=b"x"))
    monkeypatch.setattr(codec, "decode_event", None)
    assert decode_event_head(data) == EventHead("e", timestamp)
    for cut in range(len(data)):
        monkeypatch.undo()
        _agree(data[:cut])  # truncated within the timestamp too: the codec's reason


@given(events, st.text(max_size=20))
def test_an_attribute_read_off_the_bytes_is_the_decoded_events(event: Event, name: str) -> None:
    # urgent_when's lookup (issue 39, item 3): the attribute asked for, or one the event has
    for wanted in (name, *event.attributes):
        found = event_attribute(encode_event(event), wanted.encode("utf-8"))
        assert found == event.attributes.get(wanted)


def test_an_attribute_in_a_map_written_with_block_sizes_takes_the_full_decode() -> None:
    # Avro lets a writer give a map block's byte size (a negative count): fastavro's decode
    # reads it; the lean walk hands it over.
    value = write(EVENT_SCHEMA, {"id": "r", "timestamp": 1, "payload": b"p", "attributes": {}})
    # the same event with its map as one block of -1 entries, sized, then the end
    entry = b"\x06sev\x08crit"
    blocked = value[:-1] + b"\x01" + bytes([len(entry) << 1]) + entry + b"\x00"
    assert decode_event(blocked).attributes == {"sev": "crit"}
    assert event_attribute(blocked, b"sev") == "crit"
