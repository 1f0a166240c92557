"""Composing a digest under its policy: collapse, reason, total, next delivery (issue 15)."""

from __future__ import annotations

import pytest

from digest_stream.roles.publish.compose import collapse, compose, head
from digest_stream.store.base import OpenDigest, StoredRecord
from digest_stream.store.due import next_due
from digest_stream.store.policy import TimelinePolicy
from digest_stream.wire.models import DigestReason, Record, ScheduleEntry, ScheduleReason


def _record(id: str, at: int, fingerprint: str | None) -> Record:
    attributes = {} if fingerprint is None else {"fp": fingerprint}
    return Record(id=id, timestamp=at, payload=id.encode(), attributes=attributes)


def test_collapse_keeps_the_newest_of_each_value_with_count_and_first_seen() -> None:
    records = [  # newest first, as a digest holds them
        _record("e5", 500, "A"),
        _record("e4", 400, "B"),
        _record("e3", 300, None),
        _record("e2", 200, "A"),
        _record("e1", 100, "A"),
    ]
    out = collapse(records, "fp")
    assert [(r.id, r.count, r.first_seen) for r in out] == [
        ("e5", 3, 100),
        ("e4", 1, None),
        ("e3", 1, None),
    ]


def test_collapsing_collapsed_records_adds_their_counts() -> None:
    merged = collapse([_record("b", 9, "A"), _record("a", 5, "A")], "fp")
    again = collapse(
        [*merged, _record("z", 2, "A").model_copy(update={"count": 4, "first_seen": 1})], "fp"
    )
    assert [(r.id, r.count, r.first_seen) for r in again] == [("b", 6, 1)]


def test_next_delivery_is_the_stores_due_rule_at_the_close() -> None:
    stored = [StoredRecord("r0", 0.0, b"")]
    opened = OpenDigest("a" * 32, "t", stored, 0, 10.0)
    entry = ScheduleEntry(timeline="t", partition=0, scheduled_at=1, reason="IMMEDIATE")
    with pytest.raises(ValueError, match="without its due rule"):
        head(entry.reason, opened, 20.0)  # only the store knows when the timeline is due
    opened.next_due = next_due(TimelinePolicy(minimum_delay=300))
    assert head(entry.reason, opened, 1_000.0)[-1] == 1_300_000


def test_compose_explains_the_digest_and_counts_what_trimming_and_collapse_hid() -> None:
    stored = [StoredRecord(f"r{i}", float(i), b"") for i in range(3)]
    opened = OpenDigest("a" * 32, "t", stored, dropped=5, opened_at=10.0, reason="FLUSH_AT")
    records = [_record("r2", 2000, "A"), _record("r1", 1000, "A"), _record("r0", 0, "B")]
    entry = ScheduleEntry(
        timeline="t", partition=0, scheduled_at=1, reason=ScheduleReason.SCHEDULED
    )
    policy = TimelinePolicy(minimum_delay=60, collapse_by="fp")
    opened.next_due = next_due(policy)
    digest = compose(entry.reason, opened, records, 5, policy, 20.0)
    assert (digest.reason, digest.total, digest.next_delivery_at) == (
        DigestReason.FLUSH_AT,
        8,
        80_000,
    )
    assert [(r.id, r.count) for r in digest.records] == [("r2", 2), ("r0", 1)]
    recovered = ScheduleReason.RECOVERED
    assert compose(recovered, opened, records, 5, policy, 20.0).reason == DigestReason.RECOVERED
