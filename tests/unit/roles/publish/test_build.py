"""One digest built from (schedule entry, opened digest, the policy handed with it): the
messages that publish it."""

from __future__ import annotations

import pytest

from digest_stream.roles.publish.build import Built, build
from digest_stream.store.base import OpenDigest, StoredRecord
from digest_stream.store.due import next_due
from digest_stream.store.policy import TimelinePolicy
from digest_stream.wire import codec, envelope, formats
from digest_stream.wire.formats import DigestFormat
from digest_stream.wire.models import Digest, DigestReason, Event, ScheduleReason

IMMEDIATE = ScheduleReason.IMMEDIATE  # the schedule entry's reason: all build reads of it
NOW = 2000.0
MAX = 65_536


def _stored(n: int, *, payload: bytes = b"p", fp: str | None = None) -> StoredRecord:
    attributes = {} if fp is None else {"fp": fp}
    event = Event(id=f"r{n}", timestamp=1_000_000 + n, payload=payload, attributes=attributes)
    return StoredRecord(f"r{n}", 1000.0 + n, codec.encode_event(event))


def _digest(
    records: list[StoredRecord],
    dropped: int = 0,
    reason: str = "COOLDOWN",
    policy: TimelinePolicy = TimelinePolicy(),  # noqa: B008 (frozen)
) -> OpenDigest:
    """Opened as a store opens it: with its policy's due rule."""
    return OpenDigest("d1", "t", records, dropped, 1500.0, reason=reason, next_due=next_due(policy))


def _built(
    digest: OpenDigest,
    output: DigestFormat,
    scheduled: ScheduleReason = IMMEDIATE,
    *,
    max_bytes: int = MAX,
    **options: bool,
) -> Built:
    """``build`` as the publisher calls it: handed the policy the store opened the digest by."""
    return build(
        scheduled, digest, digest.policy, now=NOW, max_bytes=max_bytes, output=output, **options
    )


@pytest.fixture(params=["avro", "json"])
def output(request: pytest.FixtureRequest) -> DigestFormat:
    """Every test holds in each output format."""
    return formats.choose(request.param)


def _decoded(values: list[bytes], output: DigestFormat) -> list[Digest]:
    return [output.decode(value) for value in values]


def test_a_digest_is_one_message_of_its_records_newest_first_with_the_policys_fields(
    output: DigestFormat,
) -> None:
    policy = TimelinePolicy(minimum_delay=60)
    digest = _digest([_stored(2), _stored(1), _stored(0)], dropped=4, policy=policy)
    built = _built(digest, output)
    (one,) = _decoded(built.values, output)
    assert [r.id for r in one.records] == ["r2", "r1", "r0"]
    assert (one.id, one.timeline, one.part, one.parts) == ("d1", "t", 1, 1)
    assert (one.start, one.end, one.opened_at) == (1_000_000, 1_000_002, 1_500_000)
    assert (one.dropped, one.total) == (4, 7)  # total: taken plus trimmed before
    assert one.reason == DigestReason.COOLDOWN
    assert one.next_delivery_at == int((NOW + 60) * 1000)
    # nothing asked for the model: Avro lays the stored bytes out, JSON needs the models
    assert (built.whole is None) == (output.name == "avro")
    assert (built.headers, built.unreadable) == ([], [])


def test_built_as_stored_or_through_the_models_the_bytes_are_the_same(output: DigestFormat) -> None:
    digest = _digest([_stored(1), _stored(0)])
    stored = _built(digest, output)
    modelled = _built(digest, output, whole=True)
    assert modelled.values == stored.values
    assert modelled.whole is not None
    assert [r.id for r in modelled.whole.records] == ["r1", "r0"]


def test_a_re_announced_entry_goes_out_as_recovered(output: DigestFormat) -> None:
    digest = _digest([_stored(0)])
    built = _built(digest, output, ScheduleReason.RECOVERED)
    assert _decoded(built.values, output)[0].reason == DigestReason.RECOVERED


def test_collapse_by_collapses_records_sharing_the_attribute(output: DigestFormat) -> None:
    records = [_stored(2, fp="A"), _stored(1, fp="B"), _stored(0, fp="A")]
    digest = _digest(records, policy=TimelinePolicy(collapse_by="fp"))
    built = _built(digest, output)
    (one,) = _decoded(built.values, output)
    assert [(r.id, r.count, r.first_seen) for r in one.records] == [
        ("r2", 2, 1_000_000),
        ("r1", 1, None),
    ]
    assert one.total == 3


@pytest.mark.parametrize("whole", [False, True])
def test_build_goes_by_the_policy_it_is_handed(output: DigestFormat, whole: bool) -> None:
    # Issue 38: publish is handed the policy (the publisher hands the one the store resolved
    # for the open, OpenDigest.policy); it does not dig it out of the digest's due rule.
    records = [_stored(1, fp="A"), _stored(0, fp="A")]
    digest = _digest(records, policy=TimelinePolicy(minimum_delay=60))
    assert digest.policy == TimelinePolicy(minimum_delay=60)
    handed = TimelinePolicy(minimum_delay=60, collapse_by="fp")
    built = build(IMMEDIATE, digest, handed, now=NOW, max_bytes=MAX, output=output, whole=whole)
    (one,) = _decoded(built.values, output)
    assert [(r.id, r.count) for r in one.records] == [("r1", 2)]
    assert one.next_delivery_at == int((NOW + 60) * 1000)  # the due rule's, as before


def test_a_digest_without_its_due_rule_has_no_policy_to_publish_by() -> None:
    with pytest.raises(ValueError, match="without its due rule"):
        _ = OpenDigest("d1", "t", [], 0, 1500.0).policy


def test_an_unreadable_record_is_left_out_counted_and_named(output: DigestFormat) -> None:
    broken = StoredRecord("bad", 1000.5, b"\x02")  # cut short
    built = _built(_digest([_stored(1), broken, _stored(0)]), output)
    (one,) = _decoded(built.values, output)
    assert [r.id for r in one.records] == ["r1", "r0"]
    assert (one.dropped, one.total) == (1, 3)
    assert [record_id for record_id, _ in built.unreadable] == ["bad"]


def test_a_digest_without_a_readable_record_publishes_nothing(output: DigestFormat) -> None:
    empty = _built(_digest([]), output)
    assert (empty.values, empty.unreadable) == ([], [])
    broken = StoredRecord("bad", 1000.0, b"\xff")
    unreadable = _built(_digest([broken]), output)
    assert unreadable.values == []
    assert [record_id for record_id, _ in unreadable.unreadable] == ["bad"]


def test_a_digest_too_large_for_one_message_goes_out_in_parts_within_the_limit(
    output: DigestFormat,
) -> None:
    records = [_stored(n, payload=bytes(3000)) for n in reversed(range(20))]
    built = _built(_digest(records), output, max_bytes=16_384)
    parts = _decoded(built.values, output)
    assert len(parts) > 1
    assert all(len(value) + len(b"t") <= 16_384 for value in built.values)
    assert [p.part for p in parts] == list(range(1, len(parts) + 1))
    assert {(p.id, p.parts, p.total) for p in parts} == {("d1", len(parts), 20)}
    assert [r.id for p in parts for r in p.records] == [f"r{n}" for n in reversed(range(20))]


def test_carried_headers_ride_on_every_part(output: DigestFormat) -> None:
    event = codec.encode_event(Event(id="r0", timestamp=1_000_000, payload=b"p"))
    payload = envelope.wrap([("traceparent", b"00-abc")], frozenset({"traceparent"}), event)
    built = _built(_digest([StoredRecord("r0", 1000.0, payload)]), output)
    assert built.headers == [("traceparent", b"00-abc")]
    assert [r.id for r in _decoded(built.values, output)[0].records] == ["r0"]


def test_checked_records_give_the_same_bytes_from_their_stored_timestamps(
    output: DigestFormat,
) -> None:
    # As the ingest stores them: seconds, the event's milliseconds divided by 1,000.
    millis = [1_764_000_000_123, 1_764_000_000_999, 1_764_000_001_001]
    records = [
        StoredRecord(
            f"r{n}", ms / 1000.0, codec.encode_event(Event(id=f"r{n}", timestamp=ms, payload=b"p"))
        )
        for n, ms in enumerate(millis)
    ][::-1]
    digest = _digest(records)
    checked = _built(digest, output, checked=True)
    assert checked.values == _built(digest, output).values
    (one,) = _decoded(checked.values, output)
    assert (one.start, one.end) == (millis[0], millis[-1])
