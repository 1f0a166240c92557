"""Control messages on the events topic: told apart from events by one prefix, parsed into store
control operations at their offset, refused with a reason when malformed (issue 15)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from digest_stream.roles.ingest.check import CONTROL_ID, Rejected, Rules, check
from digest_stream.store.base import CANCEL, CANCEL_ALL, FLUSH, NewRecord
from digest_stream.wire import codec, control
from digest_stream.wire.models import Event

RULES = Rules(max_event_bytes=1000, max_event_age=None, carry_headers=frozenset())
NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("message", "operation", "record_id"),
    [
        (control.Control("flush"), FLUSH, CONTROL_ID),
        (control.Control("cancel"), CANCEL_ALL, CONTROL_ID),
        (control.Control("cancel", "r-7"), CANCEL, "r-7"),
    ],
)
def test_a_control_message_becomes_a_control_operation_at_its_offset(
    message: control.Control, operation: str, record_id: str
) -> None:
    outcome = check(b"user:1", control.encode(message), None, 41, NOW, RULES)
    assert outcome == NewRecord("user:1", record_id, NOW, b"", 41, operation)


@pytest.mark.parametrize(
    "value",
    [
        control.MAGIC + b"not json",
        control.MAGIC + b'{"op": "explode"}',
        control.MAGIC + b'{"op": "flush", "record": "r1"}',
        control.MAGIC + b'{"op": "cancel", "record": ""}',
        control.MAGIC + b'{"op": "cancel", "record": 5}',
        control.MAGIC + b"\xff\xfe",
    ],
)
def test_a_malformed_control_message_is_dead_lettered(value: bytes) -> None:
    outcome = check(b"t", value, None, 0, NOW, RULES)
    assert isinstance(outcome, Rejected)
    assert outcome.reason == "invalid-control"


@given(
    st.text(min_size=1, max_size=300),
    st.binary(max_size=50),
    st.integers(0, 2**62),
)
def test_no_event_can_be_taken_for_a_control_message(
    record_id: str, payload: bytes, timestamp: int
) -> None:
    try:
        value = codec.encode_event(Event(id=record_id, timestamp=timestamp, payload=payload))
    except ValueError:
        return  # not a valid event (a lone surrogate): nothing is sent
    assert not value.startswith(control.MAGIC[:1])
    # nor is a schema-registry framed value (magic byte 0, then a 4-byte schema id)
    assert not (b"\x00\x00\x00\x00\x01" + value).startswith(control.MAGIC[:1])
