"""A digest assembled from stored event bytes decodes to the digest the models would encode."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from digest_stream.wire.codec import decode_digest, encode_event
from digest_stream.wire.digest_bytes import whole_digest
from digest_stream.wire.models import INT_MAX, LONG_MAX, Digest, DigestReason, Event, Record

events = st.builds(
    Event,
    id=st.text(min_size=1, max_size=20),
    timestamp=st.integers(min_value=0, max_value=LONG_MAX),
    payload=st.binary(max_size=64),
    attributes=st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3),
)


@given(
    st.lists(events, min_size=1, max_size=30),
    st.text(min_size=1, max_size=40),
    st.integers(min_value=0, max_value=INT_MAX),
    st.integers(min_value=0, max_value=LONG_MAX),
)
def test_decodes_to_the_digest_of_the_same_records(
    records: list[Event], timeline: str, dropped: int, opened_at: int
) -> None:
    value = whole_digest(
        "d" * 32,
        timeline,
        [encode_event(event) for event in records],
        [event.timestamp for event in records],
        dropped,
        opened_at,
    )
    expected = Digest.build(
        id="d" * 32,
        timeline=timeline,
        records=[Record.from_event(event) for event in records],
        opened_at=opened_at,
        dropped=dropped,
    )
    assert decode_digest(value) == expected


@given(
    st.lists(events, min_size=1, max_size=5),
    st.sampled_from([None, *DigestReason]),
    st.none() | st.integers(min_value=0, max_value=INT_MAX),
    st.none() | st.integers(min_value=0, max_value=LONG_MAX),
    st.integers(min_value=0, max_value=LONG_MAX),
)
def test_the_optional_fields_decode_as_the_models_encode_them(
    records: list[Event],
    reason: DigestReason | None,
    total: int | None,
    next_delivery_at: int | None,
    opened_at: int,
) -> None:
    # Twice each: the second digest's shared fields come from the encoder's cache.
    for _ in range(2):
        value = whole_digest(
            "e" * 32,
            "t",
            [encode_event(event) for event in records],
            [event.timestamp for event in records],
            0,
            opened_at,
            reason=reason,
            total=total,
            next_delivery_at=next_delivery_at,
        )
        expected = Digest.build(
            id="e" * 32,
            timeline="t",
            records=[Record.from_event(event) for event in records],
            opened_at=opened_at,
            dropped=0,
            reason=reason,
            total=total,
            next_delivery_at=next_delivery_at,
        )
        assert decode_digest(value) == expected
