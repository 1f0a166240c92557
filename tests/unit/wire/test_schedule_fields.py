"""The delivery's lean schedule entry decoder agrees with codec.decode_schedule_entry."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from digest_stream.wire import codec, framing
from digest_stream.wire.codec import (
    SCHEDULE_ENTRY_SCHEMA,
    decode_schedule_entry,
    encode_schedule_entry,
)
from digest_stream.wire.models import INT_MAX, LONG_MAX, ScheduleEntry, ScheduleReason
from digest_stream.wire.schedule_fields import ScheduleFields, decode_schedule_fields
from tests.support.avro import assert_agree, verdict, write

T0 = 1_700_000_000_000

entries = st.builds(
    ScheduleEntry,
    # Up to 300 code points: past MAX_TIMELINE_LENGTH bytes when they are wide ones.
    timeline=st.text(min_size=1, max_size=300).filter(lambda t: len(t.encode()) <= 1024),
    partition=st.integers(min_value=0, max_value=INT_MAX),
    scheduled_at=st.integers(min_value=0, max_value=LONG_MAX),
    reason=st.sampled_from(ScheduleReason),
)


def _fields(value: Any) -> object:
    """What the lean decode gives, from either decoder's value."""
    return ScheduleFields(value.timeline, value.partition, value.scheduled_at, value.reason)


def _agree(data: bytes) -> None:
    assert_agree(decode_schedule_fields, decode_schedule_entry, _fields, data)


@given(entries)
def test_a_valid_entry_gives_its_fields(entry: ScheduleEntry) -> None:
    assert decode_schedule_fields(encode_schedule_entry(entry)) == ScheduleFields.of(entry)


@given(entries)
def test_a_valid_entry_takes_the_fast_path(entry: ScheduleEntry) -> None:
    data = encode_schedule_entry(entry)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codec, "decode_schedule_entry", _refuse)
        assert decode_schedule_fields(data) == ScheduleFields.of(entry)


def _refuse(*_: object) -> None:
    raise AssertionError("the full decoder ran")


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=40))
def test_random_bytes_get_the_same_verdict_and_reason(data: bytes) -> None:
    _agree(data)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.integers(min_value=-(2**64), max_value=2**64),
            st.binary(max_size=8),
            st.sampled_from([b"\x00", b"\x7f", b"\x80", b"\xff", b"\xed\xa0\x80", b"\xc3"]),
        ),
        max_size=6,
    )
)
def test_avro_shaped_bytes_get_the_same_verdict_and_reason(parts: list[int | bytes]) -> None:
    # Varints of any size and sign among odd bytes: close to the encoding, unlike random bytes.
    _agree(b"".join(_zigzag(part) if isinstance(part, int) else part for part in parts))


def _zigzag(value: int) -> bytes:
    """The Avro varint of value (bigger than a long when asked: the decoders must cope)."""
    value = -2 * value - 1 if value < 0 else 2 * value
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@given(entries, st.integers(min_value=0), st.binary(min_size=1, max_size=4))
def test_damaged_entries_get_the_same_verdict_and_reason(
    entry: ScheduleEntry, at: int, noise: bytes
) -> None:
    data = encode_schedule_entry(entry)
    cut = at % (len(data) + 1)
    _agree(data[:cut])  # truncated anywhere
    _agree(data + noise)  # trailing bytes (a field this schema lacks)
    _agree(data[:cut] + noise + data[cut + len(noise) :])  # overwritten anywhere


@given(entries, st.integers(min_value=0, max_value=2**32 - 1), st.binary(max_size=2))
def test_framed_entries_get_the_same_verdict_and_reason(
    entry: ScheduleEntry, schema_id: int, noise: bytes
) -> None:
    # Schema registry mode: the full decoder reads the body after the 5-byte prefix.
    framed = b"\x00" + schema_id.to_bytes(4, "big") + encode_schedule_entry(entry)
    assert decode_schedule_fields(framed) == ScheduleFields.of(entry)
    _agree(framed + noise)
    _agree(framed[: len(framed) - len(noise)])


def test_every_prefix_and_byte_flip_of_a_sample_agrees() -> None:
    rng = random.Random(13)
    data = encode_schedule_entry(
        ScheduleEntry(
            timeline="é-timeline", partition=300, scheduled_at=T0, reason=ScheduleReason.RECOVERED
        )
    )
    for cut in range(len(data) + 1):
        _agree(data[:cut])
    for at in range(len(data)):
        for _ in range(16):
            _agree(data[:at] + bytes([rng.randrange(256)]) + data[at + 1 :])


def _entry(**fields: Any) -> dict[str, Any]:
    return {"timeline": "t", "partition": 0, "scheduled_at": T0, "reason": "IMMEDIATE", **fields}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated"),
        # An empty timeline starts with byte 0: read as the registry's framing, cut short.
        (write(SCHEDULE_ENTRY_SCHEMA, _entry(timeline="")), "truncated"),
        (write(SCHEDULE_ENTRY_SCHEMA, _entry(timeline="x" * 1025)), "invalid-value"),
        (write(SCHEDULE_ENTRY_SCHEMA, _entry(partition=-1)), "invalid-value"),
        (write(SCHEDULE_ENTRY_SCHEMA, _entry(scheduled_at=-1)), "invalid-value"),
        (b"\x02\xff\x00\x02\x00", "invalid-avro"),  # a timeline that is not UTF-8
        (b"\x06\xed\xa0\x80\x00\x02\x00", "invalid-avro"),  # a surrogate
        (b"\x02t\x00\x02\x06", "invalid-avro"),  # a fourth reason
        (b"\x04t", "truncated"),
        (write(SCHEDULE_ENTRY_SCHEMA, _entry()) + b"\x00", "trailing-bytes"),
        (framing.prefix(7)[:3], "truncated"),
    ],
)
def test_each_refusal_keeps_the_codecs_reason(data: bytes, reason: str) -> None:
    assert verdict(decode_schedule_entry, data, _fields) == ("error", reason)
    assert verdict(decode_schedule_fields, data, _fields) == ("error", reason)


def test_a_writer_schema_takes_the_full_decoder() -> None:
    # An evolved writer: a field the current schema lacks, resolved away by Avro rules.
    newer = {
        **SCHEDULE_ENTRY_SCHEMA,
        "fields": [*SCHEDULE_ENTRY_SCHEMA["fields"], {"name": "note", "type": "string"}],
    }
    data = write(newer, {**_entry(), "note": "n"})
    expected = ScheduleFields("t", 0, T0, ScheduleReason.IMMEDIATE)
    assert decode_schedule_fields(data, newer) == expected
    assert verdict(decode_schedule_fields, data, _fields) == ("error", "trailing-bytes")


@pytest.mark.parametrize(
    "data",
    [
        b"\x02t\x00\x02\x80\x00",  # reason 0 in two bytes
        b"\x02t\x00\x02\x01",  # reason -1: fastavro reads the last symbol
    ],
)
def test_a_rarity_the_fast_path_leaves_alone_decodes_as_the_model_does(data: bytes) -> None:
    assert decode_schedule_fields(data) == ScheduleFields.of(decode_schedule_entry(data))
