"""The message check: every rejection reason, the age drop, and a good record."""

from __future__ import annotations

import pytest

from digest_stream.roles.ingest.check import TOO_OLD, Rejected, Rules, check, output_room
from digest_stream.settings import Settings
from digest_stream.store.base import NewRecord
from digest_stream.store.limits import MAX_NAME_BYTES
from digest_stream.wire import codec, envelope
from digest_stream.wire.models import Event

RULES = Rules(max_event_bytes=1000, max_event_age=None, carry_headers=frozenset())
NOW = 1_700_000_000.0


def _event(id: str = "r1", at: float = NOW) -> bytes:
    return codec.encode_event(Event(id=id, timestamp=int(at * 1000), payload=b"p"))


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, _event(), "missing-key"),
        (b"", _event(), "missing-key"),
        (b"\xff\xfe", _event(), "invalid-key"),
        (b"t", None, "missing-value"),
        (b"t", b"x" * 1001, "oversize"),
        (b"t", b"\x01\x02\x03", None),  # a decode reason from the codec
    ],
)
def test_bad_input_is_rejected_with_its_reason(
    key: bytes | None, value: bytes | None, reason: str | None
) -> None:
    outcome = check(key, value, None, 7, NOW, RULES)
    assert isinstance(outcome, Rejected)
    if reason is not None:
        assert outcome.reason == reason
    assert outcome.detail


def test_an_id_the_store_would_refuse_is_rejected_before_the_store_sees_it() -> None:
    rules = Rules(max_event_bytes=100_000, max_event_age=None, carry_headers=frozenset())
    outcome = check(b"t", _event(id="x" * (MAX_NAME_BYTES + 1)), None, 7, NOW, rules)
    assert isinstance(outcome, Rejected)
    assert outcome.reason == "invalid-id"


def test_old_events_are_dropped_not_dead_lettered() -> None:
    rules = Rules(max_event_bytes=1000, max_event_age=60.0, carry_headers=frozenset())
    assert check(b"t", _event(at=NOW - 61), None, 7, NOW, rules) is TOO_OLD
    assert isinstance(check(b"t", _event(at=NOW - 59), None, 7, NOW, rules), NewRecord)


def test_a_good_message_becomes_the_record_the_store_gets() -> None:
    value = _event()
    record = check(b"team-1", value, [("trace", b"abc")], 7, NOW, RULES)
    assert record == NewRecord(timeline="team-1", id="r1", timestamp=NOW, payload=value, offset=7)


def test_carried_headers_travel_in_the_stored_payload() -> None:
    rules = Rules(max_event_bytes=1000, max_event_age=None, carry_headers=frozenset({"trace"}))
    value = _event()
    record = check(b"t", value, [("trace", b"abc"), ("other", b"x")], 7, NOW, rules)
    assert isinstance(record, NewRecord)
    headers, event = envelope.unwrap(record.payload)
    assert event == value
    assert headers == [("trace", b"abc")]


def test_the_key_limit_is_in_bytes_on_either_side_of_the_fast_path() -> None:
    rules = Rules(max_event_bytes=100_000, max_event_age=None, carry_headers=frozenset())
    at_limit = "é" * (MAX_NAME_BYTES // 2)  # 2 bytes each: exactly the limit
    record = check(at_limit.encode(), _event(), None, 7, NOW, rules)
    assert isinstance(record, NewRecord)
    assert record.timeline == at_limit
    for key in ((at_limit + "x").encode(), at_limit + "x"):
        outcome = check(key, _event(), None, 7, NOW, rules)
        assert isinstance(outcome, Rejected)
        assert outcome.reason == "invalid-key"
    assert isinstance(check("team-1", _event(), None, 7, NOW, rules), NewRecord)


def test_a_record_id_at_the_byte_limit_passes_and_one_past_it_is_refused() -> None:
    rules = Rules(max_event_bytes=100_000, max_event_age=None, carry_headers=frozenset())
    at_limit = "€" * (MAX_NAME_BYTES // 4)  # 3 bytes each: under the limit, past 256 chars
    long_id = "€" * (MAX_NAME_BYTES // 3 + 1)  # 1,026 bytes
    assert isinstance(check(b"t", _event(id=at_limit), None, 7, NOW, rules), NewRecord)
    assert isinstance(check(b"t", _event(id="x" * MAX_NAME_BYTES), None, 7, NOW, rules), NewRecord)
    outcome = check(b"t", _event(id=long_id), None, 7, NOW, rules)
    assert isinstance(outcome, Rejected)
    assert outcome.reason == "invalid-id"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (_event() + b"\x00", "trailing-bytes"),
        (_event()[:-3], "truncated"),
        (b"\x00\x00\x00\x00", "invalid-value"),  # an empty id
        (b"\x02\xff\x00\x00\x00", "invalid-avro"),
    ],
)
def test_decode_refusals_keep_the_codecs_reason(value: bytes, reason: str) -> None:
    outcome = check(b"t", value, None, 7, NOW, RULES)
    assert isinstance(outcome, Rejected)
    assert outcome.reason == reason


def _issue_event() -> bytes:
    # Issue 36 b: an attribute of 255,000 control characters, about 255,017 bytes of Avro.
    attributes = {"a": "\x01" * 255_000}
    return codec.encode_event(
        Event(id="r1", timestamp=int(NOW * 1000), payload=b"", attributes=attributes)
    )


def _rules(**settings: object) -> Rules:
    config = Settings.model_validate(settings)
    output = output_room(config)
    return Rules(config.max_event_bytes, None, frozenset(), output=output)


def test_an_event_whose_json_record_outgrows_a_message_is_oversize_under_the_defaults() -> None:
    value = _issue_event()
    assert len(value) <= Settings().max_event_bytes
    outcome = check(b"t", value, None, 7, NOW, _rules(output_format="json"))
    assert isinstance(outcome, Rejected), outcome
    assert outcome.reason == "oversize"
    assert "1,530,0" in outcome.detail, outcome.detail
    assert "json output format" in outcome.detail
    assert "983,616" in outcome.detail  # 1,000,000 less the 16,384 bytes of overhead
    # Avro writes it as it is: it fits.
    assert isinstance(check(b"t", value, None, 7, NOW, _rules(output_format="avro")), NewRecord)


@pytest.mark.parametrize("output_format", ["json", "avro"])
def test_an_event_of_max_event_bytes_with_a_plain_payload_fits_every_format(
    output_format: str,
) -> None:
    # What the settings promise (check_sizes): base64's growth always fits.
    rules = _rules(output_format=output_format)
    head = len(codec.encode_event(Event(id="r1", timestamp=int(NOW * 1000), payload=b"")))
    payload = b"\xff" * (rules.max_event_bytes - head - 3)
    value = codec.encode_event(Event(id="r1", timestamp=int(NOW * 1000), payload=payload))
    assert rules.max_event_bytes - 3 <= len(value) <= rules.max_event_bytes
    assert len(value) > rules.output.surely_fits or output_format == "avro"  # measured
    assert isinstance(check(b"t", value, None, 7, NOW, rules), NewRecord)


def test_a_large_event_is_measured_with_its_whole_decode() -> None:
    # Past surely_fits the check decodes the attributes too: bytes that are no UTF-8 are
    # refused with the codec's reason (a smaller event is read whole only at delivery, which
    # counts such a record unreadable).
    rules = _rules(output_format="json", max_message_bytes=20_000, max_event_bytes=2_000)
    good = codec.encode_event(
        Event(id="r1", timestamp=int(NOW * 1000), payload=b"", attributes={"a": "é" * 800})
    )
    broken = good.replace("é".encode(), b"\xff\xfe", 1)
    assert len(good) > rules.output.surely_fits
    assert isinstance(check(b"t", good, None, 7, NOW, rules), NewRecord)
    outcome = check(b"t", broken, None, 7, NOW, rules)
    assert isinstance(outcome, Rejected)
    assert outcome.reason != "oversize"
