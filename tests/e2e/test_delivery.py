"""Delivery edge cases through the real pipeline: huge digests, publish failures, recovery."""

from __future__ import annotations

import json
import time
import uuid

from confluent_kafka import Consumer

from digest_stream.wire import codec
from digest_stream.wire.models import ScheduleReason
from tests.support import unique, wait_until
from tests.support.kafka import send_events
from tests.support.pipeline import PipelineFactory


def _realistic_payload(i: int) -> bytes:
    """About 300 bytes of JSON, like an error event summary."""
    return json.dumps(
        {
            "event_id": uuid.uuid4().hex,
            "level": "error",
            "message": f"TypeError: cannot read properties of undefined (reading 'x{i}')",
            "culprit": "app/components/checkout/PaymentForm.tsx in handleSubmit",
            "tags": {
                "release": "web@4.12.0",
                "environment": "production",
                "browser": "Firefox 131",
            },
            "user": {"id": str(i % 977), "segment": "trial"},
        }
    ).encode()


def test_a_10000_record_digest_goes_out_whole_in_numbered_parts(
    pipeline_factory: PipelineFactory,
) -> None:
    # Small messages force many parts; the first event is delivered at once, so make the
    # batch land before the first digest by letting ingest see it all in the cool-down.
    pipe = pipeline_factory(
        partitions=1, minimum_delay=3.0, increment_delay=0.0, maximum_delay=3.0,
        max_message_bytes=100_000, max_event_bytes=50_000,
    )  # fmt: skip
    app = pipe.app()
    out = pipe.output()
    sent: list[str] = []
    with pipe.producer() as producer:
        producer.send("big", "first", b"{}")
        producer.flush()
        out.wait_for(lambda: len(out.messages) == 1, 30, "the immediate first digest")
        for i in range(10_000):
            record_id = f"r{i:05d}"
            producer.send(
                "big", record_id, _realistic_payload(i), timestamp_ms=1_700_000_000_000 + i
            )
            sent.append(record_id)
        producer.flush()
    out.wait_for(lambda: set(sent) <= out.record_ids(), 120, "all 10,000 records delivered")
    parts = [
        d for d in out.digests if d.timeline == "big" and "first" not in {r.id for r in d.records}
    ]
    ids = {d.id for d in parts}
    assert len(ids) >= 1
    for digest_id in ids:
        mine = sorted((d for d in parts if d.id == digest_id), key=lambda d: d.part)
        assert [d.part for d in mine] == list(range(1, mine[0].parts + 1))  # 1..n, none missing
    assert any(d.parts > 1 for d in parts)
    for message in out.messages:
        assert len(message.value() or b"") <= 100_000
    # Across parts, records stay newest first.
    ordered = [r.id for d in sorted(parts, key=lambda d: (d.opened_at, d.part)) for r in d.records]
    assert ordered == sorted(ordered, reverse=True)
    assert len(ordered) == 10_000
    assert app.metrics.value("digest_digest_parts_total") > 2
    out.close()


def test_heavy_distinct_baggage_does_not_push_the_shared_traceparent_off_a_digest(
    pipeline_factory: PipelineFactory,
) -> None:
    # Chaos 12a (baggage): carried headers over a part's 8 KiB share were all left off, the
    # light traceparent with the heavy baggage; now the ones that fit still ride.
    pipe = pipeline_factory(
        partitions=1, minimum_delay=3.0, increment_delay=0.0, maximum_delay=3.0,
        carry_headers=["traceparent", "baggage"],
    )  # fmt: skip
    pipe.app()
    out = pipe.output()
    timeline = unique("traced")
    traceparent = ("traceparent", b"00-" + b"a" * 51)
    baggage = [("baggage", f"{n:08d}".encode().ljust(4_000, b"b")) for n in range(4)]
    send_events(pipe.settings, timeline, ids=["r0"], headers=[traceparent, baggage[0]])
    out.wait_for(lambda: len(out.messages) == 1, 30, "the immediate first digest")
    for n in (1, 2, 3):  # within the cool-down: one digest of three records
        send_events(pipe.settings, timeline, ids=[f"r{n}"], headers=[traceparent, baggage[n]])
    out.wait_for(lambda: {"r1", "r2", "r3"} <= out.record_ids(), 30, "the cool-down digest")
    first, second = out.messages
    assert first.headers() == [traceparent, baggage[0]]
    assert [r.id for r in codec.decode_digest(second.value() or b"").records] == ["r3", "r2", "r1"]
    # Newest first; the oldest baggage is what no longer fits the share.
    assert second.headers() == [traceparent, baggage[3], baggage[2]]
    out.close()


def test_publish_failures_retry_then_dead_letter_and_the_digest_stays_open(
    pipeline_factory: PipelineFactory,
) -> None:
    # The output topic does not exist (the broker creates none): every publish fails with
    # UNKNOWN_TOPIC_OR_PART once the producer stops waiting for it to appear (2 s here), a
    # failure an operator can fix, so it is retried. (A digest too large for the topic can
    # never go: test_refused_digests.py.)
    missing = unique("missing") + ".output"
    # Delivery's retries and dead letter are the subject (the ingest's publish would be one
    # attempt more, before handing the digest to delivery).
    pipe = pipeline_factory(
        partitions=1, output_topic=missing, max_attempts=3, direct_leading_edge=False,
        kafka_config={"topic.metadata.propagation.max.ms": 2000},
    )  # fmt: skip
    app = pipe.app()
    dlq = pipe.dlq()
    with pipe.producer() as producer:
        producer.send("stuck", "r1", b"x" * 2000)
        producer.flush()
    dlq.wait_for(lambda: bool(dlq.messages), 60, "the schedule entry dead-lettered")
    headers = dict(dlq.messages[0].headers() or [])
    assert headers["dlq.reason"] == b"publish-failed"
    assert headers["dlq.source.topic"] == pipe.settings.schedule_topic.encode()
    assert b"3 attempts failed" in (headers["dlq.detail"] or b"")
    assert app.metrics.value("digest_publish_retries_total") == 2
    assert app.store is not None
    info = app.store.inspect(0, "stuck")
    assert info.open_digest is not None  # recoverable: maintenance will announce it again
    assert info.open_records == 1
    dlq.close()


def test_maintenance_recovers_a_ready_timeline_whose_delivery_never_came(
    pipeline_factory: PipelineFactory,
) -> None:
    # The IMMEDIATE announcement is the subject: the leading edge would publish it itself.
    pipe = pipeline_factory(
        partitions=1, maintenance_timeout=1.0, maintenance_interval=0.5, direct_leading_edge=False
    )
    pipe.app(roles="ingest,scheduler")  # nobody delivers: the IMMEDIATE entry goes unanswered
    entries = Consumer(
        {
            "bootstrap.servers": pipe.settings.kafka_bootstrap_servers,
            "group.id": unique("entries"),
            "auto.offset.reset": "earliest",
        }
    )
    entries.subscribe([pipe.settings.schedule_topic])
    reasons: list[ScheduleReason] = []
    with pipe.producer() as producer:
        producer.send("lost", "r1", b"{}")
        producer.flush()

    def recovered() -> bool:
        for message in entries.consume(100, timeout=0.2):
            if message.error() is None:
                entry = codec.decode_schedule_entry(message.value() or b"")
                assert entry.timeline == "lost"
                reasons.append(entry.reason)
        return ScheduleReason.RECOVERED in reasons

    wait_until(recovered, 30, "a RECOVERED schedule entry")
    assert reasons[0] == ScheduleReason.IMMEDIATE
    entries.close()


def test_events_older_than_max_event_age_are_dropped_and_counted(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=1, max_event_age=60.0)
    app = pipe.app()
    out = pipe.output()
    now_ms = int(time.time() * 1000)
    with pipe.producer() as producer:
        producer.send("aged", "old", b"{}", timestamp_ms=now_ms - 3_600_000)
        producer.send("aged", "new", b"{}", timestamp_ms=now_ms)
        producer.flush()
    out.wait_for(lambda: bool(out.digests), 30, "the fresh event's digest")
    assert [r.id for r in out.digests[0].records] == ["new"]
    assert app.metrics.value("digest_events_dropped_total", reason="max_age") == 1
    out.close()
