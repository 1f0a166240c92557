"""Digest policies and controls end to end through Kafka (issue 15): flush_at, a calendar
schedule in a non-UTC timezone, collapse_by, flush and cancel in order with a timeline's events,
and reason / total / next_delivery_at on every path (recovered and split digests included)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer

from digest_stream.cli import main
from digest_stream.client import EventProducer
from digest_stream.ops.hooks import Headers, Hook
from digest_stream.settings import Settings
from digest_stream.store import AddResult, NewRecord
from digest_stream.store.base import CANCEL_ALL, FLUSH
from digest_stream.store.calendar import next_fire
from digest_stream.wire.models import Digest, DigestReason
from tests.support import wait_until
from tests.support.kafka import Collector
from tests.support.pipeline import PipelineFactory, cli_flags, inspected

T = 1_700_000_000_000  # event times (ms), increasing per record


def _mine(digests: list[Digest], timeline: str) -> list[Digest]:
    return [d for d in digests if d.timeline == timeline]


def _first_digest(producer: EventProducer, out: Collector, timeline: str) -> Digest:
    """Send the timeline's first event and wait for its immediate digest (the cool-down
    starts): the events sent next accumulate."""
    before = len(out.digests)
    producer.send(timeline, "first", b"{}")
    producer.flush()
    out.wait_for(lambda: len(out.digests) == before + 1, 30, f"{timeline}'s immediate digest")
    return out.digests[-1]


def _near(at_ms: int | None, expected_s: float, slack_s: float = 3.0) -> bool:
    return at_ms is not None and abs(at_ms / 1000 - expected_s) <= slack_s


def test_flush_at_delivers_before_the_cool_down_ends(pipeline_factory: PipelineFactory) -> None:
    pipe = pipeline_factory(
        partitions=2, minimum_delay=30.0, increment_delay=1.0, maximum_delay=60.0, flush_at=3
    )
    pipe.app()
    out = pipe.output()
    with pipe.producer() as producer:
        first = _first_digest(producer, out, "fa")
        assert (first.reason, first.total) == (DigestReason.IMMEDIATE, 1)
        # Earliest next: the flush_at floor (1 s), not the 30 s cool-down.
        assert _near(first.next_delivery_at, first.opened_at / 1000 + 1.0)
        sent = time.time()
        for i in range(3):
            producer.send("fa", f"r{i}", b"{}", timestamp_ms=T + i)
        producer.flush()
    out.wait_for(lambda: len(out.digests) == 2, 20, "the flush_at digest")
    second = out.digests[1]
    assert time.time() - sent < 20  # well inside the 30 s cool-down
    assert [r.id for r in second.records] == ["r2", "r1", "r0"]
    assert (second.reason, second.total) == (DigestReason.FLUSH_AT, 3)
    out.close()


def test_a_minutely_schedule_delivers_on_the_minute_in_its_timezone(
    pipeline_factory: PipelineFactory,
) -> None:
    zone = "Asia/Kathmandu"  # UTC+05:45: a minute boundary there is one in UTC too
    pipe = pipeline_factory(partitions=1, schedule="* * * * *", timezone=zone)
    pipe.app()
    out = pipe.output()
    # Not in the last seconds of a minute: the events must be stored before the next fire.
    wait_until(lambda: time.time() % 60 < 45, 20, "the first 45 s of a minute")
    sent = time.time()
    fire = next_fire("* * * * *", zone, sent)
    with pipe.producer() as producer:
        producer.send("cal", "a", b"{}", timestamp_ms=T)
        producer.send("cal", "b", b"{}", timestamp_ms=T + 1)
        producer.flush()
    out.observe(min(3.0, fire - time.time() - 1))
    assert out.digests == []  # no leading edge
    out.wait_for(lambda: bool(out.digests), fire - time.time() + 15, "the digest at the minute")
    (digest,) = out.digests
    local = datetime.fromtimestamp(digest.opened_at / 1000, ZoneInfo(zone))
    assert fire <= digest.opened_at / 1000 < fire + 5, (local, fire)
    assert [r.id for r in digest.records] == ["b", "a"]
    assert (digest.reason, digest.total) == (DigestReason.SCHEDULE, 2)
    assert digest.next_delivery_at == int((fire + 60) * 1000)
    out.close()


def test_collapse_by_counts_repeated_records(pipeline_factory: PipelineFactory) -> None:
    pipe = pipeline_factory(partitions=1, collapse_by="fingerprint", minimum_delay=3.0)
    pipe.app()
    out = pipe.output()
    with pipe.producer() as producer:
        _first_digest(producer, out, "col")
        for i, fingerprint in enumerate(["A", "B", "A", "A", "B"]):
            producer.send("col", f"e{i}", b"{}", timestamp_ms=T + i,
                          attributes={"fingerprint": fingerprint})  # fmt: skip
        producer.flush()
    out.wait_for(lambda: len(out.digests) == 2, 30, "the collapsed digest")
    digest = out.digests[1]
    assert [(r.id, r.count, r.first_seen) for r in digest.records] == [
        ("e4", 2, T + 1),  # B: e4 (newest) and e1
        ("e3", 3, T),  # A: e3, e2, e0
    ]
    assert (digest.reason, digest.total) == (DigestReason.COOLDOWN, 5)
    out.close()


def test_flush_and_cancel_apply_in_order_with_the_timelines_events(
    pipeline_factory: PipelineFactory,
) -> None:
    # A long cool-down: without the flush nothing would go out within the test.
    pipe = pipeline_factory(partitions=4, minimum_delay=60.0, maximum_delay=60.0)
    app = pipe.app()
    out = pipe.output()
    with pipe.producer() as producer:
        _first_digest(producer, out, "ctl")
        for i, record in enumerate(["a", "b", "c"]):
            producer.send("ctl", record, b"{}", timestamp_ms=T + i)
        producer.cancel("ctl", "b")  # after a, b, c: b goes
        producer.send("ctl", "d", b"{}", timestamp_ms=T + 3)  # after the cancel: stays
        producer.flush_timeline("ctl")  # after d: a digest of d, c, a now
        producer.send("ctl", "late", b"{}", timestamp_ms=T + 4)  # after the flush
        producer.flush()
    out.wait_for(lambda: len(out.digests) >= 2, 20, "the flushed digest")
    flushed = out.digests[1]
    assert flushed.reason == DigestReason.FLUSHED
    # "late" may join (the flush makes the timeline READY; a record arriving before the digest
    # opens is in it), but never "b", and everything before the flush is there.
    assert [r.id for r in flushed.records if r.id != "late"] == ["d", "c", "a"]
    assert flushed.total == len(flushed.records)
    with pipe.producer() as producer:
        producer.send("ctl", "e", b"{}", timestamp_ms=T + 5)
        producer.send("ctl", "f", b"{}", timestamp_ms=T + 6)
        producer.cancel("ctl")  # every pending record so far
        producer.send("ctl", "g", b"{}", timestamp_ms=T + 7)
        producer.flush_timeline("ctl")
    out.wait_for(lambda: "g" in out.record_ids(), 20, "the digest after cancelling all")
    assert not {"b", "e", "f"} & out.record_ids()
    last = next(d for d in out.digests if "g" in {r.id for r in d.records})
    assert ([r.id for r in last.records], last.reason) == (["g"], DigestReason.FLUSHED)
    # "b"; then e, f, and "late" when it was still pending (not in the flushed digest).
    late_pending = "late" not in {r.id for r in flushed.records}
    expected = 1 + 2 + (1 if late_pending else 0)
    wait_until(
        lambda: app.metrics.value("digest_events_dropped_total", reason="cancelled") == expected,
        10,
        f"{expected} cancelled records counted",
    )
    out.close()


def test_a_recovered_digest_says_so_and_explains_its_next_delivery(
    pipeline_factory: PipelineFactory,
) -> None:
    # Maintenance re-announcing an IMMEDIATE entry nobody answered is the subject: the leading
    # edge would publish the digest from the ingest, with no entry.
    pipe = pipeline_factory(
        partitions=1, maintenance_timeout=1.0, maintenance_interval=0.5, direct_leading_edge=False
    )
    pipe.app(roles="ingest,scheduler")
    with pipe.producer() as producer:
        producer.send("lost", "r1", b"{}")
        producer.flush()
    # The IMMEDIATE announcement is consumed by nobody: commit the delivery group past it,
    # as if the delivery that took it died, so only maintenance's RECOVERED one remains.
    skipper = Consumer(
        {
            "bootstrap.servers": pipe.settings.kafka_bootstrap_servers,
            "group.id": pipe.settings.delivery_group_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    skipper.subscribe([pipe.settings.schedule_topic])
    taken: list[int] = []

    def take_first() -> bool:
        for message in skipper.consume(10, timeout=0.2):
            if message.error() is None and not taken:
                taken.append(message.offset() or 0)
                skipper.commit(message=message, asynchronous=False)
        return bool(taken)

    wait_until(take_first, 30, "the IMMEDIATE schedule entry")
    skipper.close()
    out = pipe.output()
    pipe.app(roles="delivery")
    out.wait_for(lambda: bool(out.digests), 30, "the recovered digest")
    (digest,) = out.digests
    assert (digest.reason, digest.total) == (DigestReason.RECOVERED, 1)
    assert _near(
        digest.next_delivery_at, digest.opened_at / 1000 + pipe.settings.policy().minimum_delay
    )
    out.close()


def test_every_part_of_a_split_digest_carries_reason_total_and_next_delivery(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(
        partitions=1, minimum_delay=3.0, increment_delay=0.0, maximum_delay=3.0,
        max_message_bytes=30_000, max_event_bytes=10_000, capacity=250,
    )  # fmt: skip
    pipe.app()
    out = pipe.output()
    with pipe.producer() as producer:
        _first_digest(producer, out, "big")
        for i in range(300):
            producer.send("big", f"r{i:03d}", b"x" * 500, timestamp_ms=T + i)
        producer.flush()
    out.wait_for(lambda: "r299" in out.record_ids(), 60, "the split digest")
    parts = [d for d in _mine(out.digests, "big") if d.records[0].id != "first"]
    assert parts[0].parts > 1
    out.wait_for(
        lambda: len([d for d in out.digests if d.id == parts[0].id]) == parts[0].parts,
        30,
        "every part",
    )
    parts = [d for d in out.digests if d.id == parts[0].id]
    # 300 went in, capacity kept the newest 250: "showing 250 of 300".
    assert sum(len(p.records) for p in parts) == 250
    assert {(p.reason, p.total, p.next_delivery_at) for p in parts} == {
        (DigestReason.COOLDOWN, 300, parts[0].next_delivery_at)
    }
    assert _near(parts[0].next_delivery_at, parts[0].opened_at / 1000 + 3.0)
    assert sum(p.dropped for p in parts) == 50
    out.close()


def _flags(pipe_settings: Settings) -> list[str]:
    return [*cli_flags(pipe_settings), "--minimum-delay", "60", "--maximum-delay", "60",
            "--flush-at", "50"]  # fmt: skip


def test_the_cli_flushes_cancels_after_asking_and_inspect_explains(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=2, minimum_delay=60.0, maximum_delay=60.0, flush_at=50)
    pipe.app()
    out = pipe.output()
    flags = _flags(pipe.settings)
    runner = CliRunner()
    with pipe.producer() as producer:
        _first_digest(producer, out, "cli")
        producer.send("cli", "a", b"{}", timestamp_ms=T)
        producer.send("cli", "b", b"{}", timestamp_ms=T + 1)
        producer.flush()

    wait_until(
        lambda: "pending        2 records" in inspected("cli", flags), 20, "two pending records"
    )
    shown = inspected("cli", flags)
    assert "minimum_delay 60s, increment_delay 30s, maximum_delay 60s, " in shown
    assert ", flush_at 50, schedule off, " in shown
    assert "(COOLDOWN)" in shown
    # Without --yes it asks; "n" sends nothing.
    refused = runner.invoke(main, ["cancel", "cli", "--record", "a", *flags], input="n\n")
    assert refused.exit_code == 1
    assert "Cancel the pending records of record a of timeline cli?" in refused.output
    done = runner.invoke(main, ["cancel", "cli", "--record", "a", "--yes", *flags])
    assert done.exit_code == 0, done.output
    flushed = runner.invoke(main, ["flush", "cli", *flags])
    assert flushed.exit_code == 0, flushed.output
    out.wait_for(lambda: len(out.digests) == 2, 20, "the flushed digest")
    digest = out.digests[1]
    assert ([r.id for r in digest.records], digest.reason) == (["b"], DigestReason.FLUSHED)
    out.close()


class HoldOpen(Hook):
    """Parks delivery after the first digest of ``timeline`` is acknowledged and before its
    close, until ``release`` (a publish that retries, in slow motion): what the ingest applies
    meanwhile (``applied``) meets a timeline whose digest is open."""

    def __init__(self, timeline: str) -> None:
        self.timeline = timeline
        self.parked = threading.Event()
        self.release = threading.Event()
        self.applied: list[NewRecord] = []

    def on_publish(self, partition: int, digest: Digest, headers: Headers) -> None:
        if digest.timeline == self.timeline and not self.parked.is_set():
            self.parked.set()
            self.release.wait(60)

    def on_add(self, partition: int, records: Sequence[NewRecord], result: AddResult) -> None:
        self.applied += records


@pytest.mark.parametrize(
    ("flush_at", "sent", "reason"),
    [
        (None, ["a", "b"], DigestReason.FLUSHED),
        (3, ["a", "b", "c", "d", "e"], DigestReason.FLUSH_AT),
    ],
)
def test_what_a_flush_or_flush_at_asked_for_while_open_goes_out_right_after_the_close(
    pipeline_factory: PipelineFactory, flush_at: int | None, sent: list[str], reason: DigestReason
) -> None:
    # Issue 20, items 3 and 4: a flush, or flush_at records, arriving between a digest's open and
    # its close used to wait the whole cool-down (60 s here) after the close.
    # Delivery's window between open and close is the subject (HoldOpen parks delivery's
    # on_publish; with the leading edge it would park the ingest instead).
    pipe = pipeline_factory(
        partitions=1, minimum_delay=60.0, maximum_delay=60.0, flush_at=flush_at,
        direct_leading_edge=False,
    )  # fmt: skip
    hold = HoldOpen("open")
    pipe.app(hooks=[hold])
    out = pipe.output()
    try:
        with pipe.producer() as producer:
            producer.send("open", "first", b"{}", timestamp_ms=T)
            producer.flush()
            assert hold.parked.wait(30), "the first digest was not published"
            for i, record in enumerate(sent):
                producer.send("open", record, b"{}", timestamp_ms=T + 1 + i)
            if flush_at is None:
                producer.flush_timeline("open")
            producer.flush()
        done = (FLUSH, None) if flush_at is None else (None, sent[-1])
        wait_until(
            lambda: (
                done in {(r.control, r.id if r.control is None else None) for r in hold.applied}
            ),
            20,
            "all applied while the digest is open",
        )
    finally:
        released = time.time()
        hold.release.set()
    out.wait_for(lambda: len(out.digests) == 2, 20, "the next digest, right after the close")
    assert time.time() - released < 20  # the cool-down is 60 s
    first, second = out.digests
    assert [r.id for r in first.records] == ["first"]
    assert ([r.id for r in second.records], second.reason) == (sent[::-1], reason)
    out.close()


def test_a_cancel_all_leaves_no_trace_in_dropped_total_or_the_counters(
    pipeline_factory: PipelineFactory,
) -> None:
    # Issue 20, item 9: capacity trims before a cancel-all were reported again by the empty
    # digest (counted as missing payloads) and by a later digest (dropped and total).
    pipe = pipeline_factory(
        partitions=1, capacity=2, minimum_delay=4.0, increment_delay=0.0, maximum_delay=4.0
    )
    app = pipe.app()
    out = pipe.output()
    with pipe.producer() as producer:
        _first_digest(producer, out, "kept")
        _first_digest(producer, out, "gone")
        for timeline in ("kept", "gone"):
            for i in range(5):  # capacity 2: three are trimmed
                producer.send(timeline, f"r{i}", b"{}", timestamp_ms=T + i)
            producer.cancel(timeline)
        producer.send("kept", "g", b"{}", timestamp_ms=T + 5)
        producer.flush()
    out.wait_for(lambda: "g" in out.record_ids(), 20, "the digest after the cancel")
    last = _mine(out.digests, "kept")[-1]
    assert ([r.id for r in last.records], last.dropped, last.total) == (["g"], 0, 1)
    assert app.store is not None
    store = app.store
    wait_until(lambda: store.inspect(0, "gone").state == "absent", 20, "the empty digest closed")
    counted = {
        reason: app.metrics.value("digest_events_dropped_total", reason=reason)
        for reason in ("capacity", "cancelled", "missing_payload")
    }
    assert counted == {"capacity": 6, "cancelled": 4, "missing_payload": 0}
    assert not {"r0", "r1", "r2", "r3", "r4"} & out.record_ids()
    out.close()


def test_a_flush_then_cancel_while_a_digest_is_open_keeps_the_cool_down_through_the_cli(
    pipeline_factory: PipelineFactory,
) -> None:
    # Issue 36 (d), as seen through the CLI: while e1's digest cannot go out (HoldOpen parks
    # delivery's publish, as an output refusing writes would), e2, `flush`, `cancel --yes`;
    # after the release the timeline was gone a second later (an empty FLUSHED digest retired
    # it) and e3 went out IMMEDIATE. Nothing is left to flush: the 40 s cool-down stands.
    pipe = pipeline_factory(
        partitions=1, minimum_delay=40.0, maximum_delay=60.0, direct_leading_edge=False
    )
    hold = HoldOpen("held")
    app = pipe.app(hooks=[hold])
    out = pipe.output()
    flags = [*cli_flags(pipe.settings), "--minimum-delay", "40", "--maximum-delay", "60"]
    runner = CliRunner()
    try:
        with pipe.producer() as producer:
            producer.send("held", "e1", b"{}", timestamp_ms=T)
            producer.flush()
            assert hold.parked.wait(30), "e1's digest was not published"
            producer.send("held", "e2", b"{}", timestamp_ms=T + 1)
            producer.flush()
        wait_until(lambda: "e2" in {r.id for r in hold.applied}, 20, "e2 stored behind e1")
        for command in (["flush", "held"], ["cancel", "held", "--yes"]):
            result = runner.invoke(main, [*command, *flags])
            assert result.exit_code == 0, result.output
        wait_until(
            lambda: CANCEL_ALL in {r.control for r in hold.applied}, 20, "the cancel applied"
        )
    finally:
        released = time.time()
        hold.release.set()
    assert app.store is not None
    store = app.store
    wait_until(lambda: store.inspect(0, "held").open_digest is None, 20, "e1's digest closed")
    info = store.inspect(0, "held")
    assert (info.state, info.reason, info.pending) == ("waiting", "COOLDOWN", 0)
    # the close is dated when e1's digest was built (before the hold): 40 s from then
    assert info.last_delivery is not None
    assert info.last_delivery <= released
    assert info.due == pytest.approx(info.last_delivery + 40)
    cooled_until = info.last_delivery + 40
    with pipe.producer() as producer:
        producer.send("held", "e3", b"{}", timestamp_ms=T + 2)
        producer.flush()
    wait_until(lambda: "e3" in {r.id for r in hold.applied}, 20, "e3 stored")
    info = store.inspect(0, "held")
    assert (info.state, info.reason, info.pending) == ("waiting", "COOLDOWN", 1)
    assert info.due is not None
    assert info.due >= cooled_until  # not IMMEDIATE
    out.wait_for(lambda: "e1" in out.record_ids(), 20, "e1's digest")
    assert [[r.id for r in d.records] for d in out.digests] == [["e1"]]
    out.close()
