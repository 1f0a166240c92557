"""The leading edge published by the ingest (direct_leading_edge), against real Kafka and
Redis: a new timeline's digest needs neither the schedule topic nor the delivery role."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from digest_stream.settings import MAX_BATCH_SIZE
from digest_stream.wire.models import DigestReason
from tests.support.kafka import send_events
from tests.support.pipeline import PipelineFactory

N = 40
#: Events of one new timeline for the largest-batch test (issue 36, item c: 3,000).
BULK = 3_000


def test_new_timelines_come_out_as_immediate_digests_without_schedule_entries(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(
        partitions=2, direct_leading_edge=True, minimum_delay=60.0, maximum_delay=60.0
    )
    # No delivery role at all: the ingest publishes the leading edge itself.
    app = pipe.app(roles="ingest,scheduler")
    out = pipe.output()
    timelines = [f"lead:{n}" for n in range(N)]
    ids = send_events(pipe.settings, timelines)
    out.wait_for(lambda: len(out.digests) >= N, 60, "one digest per new timeline")
    by_timeline = {d.timeline: d for d in out.digests}
    assert sorted(by_timeline) == sorted(timelines)
    assert sorted(r.id for d in out.digests for r in d.records) == sorted(ids)
    assert {d.reason for d in out.digests} == {DigestReason.IMMEDIATE}
    assert len({d.id for d in out.digests}) == N
    # Closed once acknowledged: every timeline cools down from its digest's close.
    store = app.store
    assert store is not None

    def all_closed() -> bool:
        return all(
            store.inspect(p, t).state == "cooling" for t in timelines for p in (0, 1)
            if store.inspect(p, t).state != "absent"
        )  # fmt: skip

    out.wait_for(all_closed, 30, "every leading digest closed")
    for digest in out.digests:
        infos = [store.inspect(p, digest.timeline) for p in (0, 1)]
        (info,) = [i for i in infos if i.state != "absent"]
        assert info.open_digest is None
        assert info.due is not None
        assert info.last_delivery is not None
        assert digest.next_delivery_at == int((info.last_delivery + 60.0) * 1000)  # the close
    assert app.metrics.value("digest_digests_published_total") == N
    assert app.metrics.value("digest_schedule_entries_total", reason="IMMEDIATE") == 0
    # Nothing went to the schedule topic at all.
    entries = Consumer(
        {
            "bootstrap.servers": pipe.settings.kafka_bootstrap_servers,
            "group.id": f"{pipe.settings.namespace}-peek",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        low_high = [
            entries.get_watermark_offsets(tp, timeout=10)
            for tp in _partitions(entries, pipe.settings.schedule_topic)
        ]
    finally:
        entries.close()
    assert all(high == low for low, high in low_high)
    out.close()


def _partitions(consumer: Consumer, topic: str) -> list[TopicPartition]:
    metadata = consumer.list_topics(topic, timeout=10)
    return [TopicPartition(topic, p) for p in metadata.topics[topic].partitions]


def test_a_first_batch_of_the_largest_batch_size_on_one_new_timeline_is_published(
    pipeline_factory: PipelineFactory,
) -> None:
    """Issue 36, item c, as a user met it: 3,000 events of one new timeline waiting when the
    service starts, batch_size at its maximum. The first batch's add failed in the Lua (more
    records than it could pack as arguments), the role stopped and `digest-stream run` exited
    1 within 2 s; its replay would fail the same way on any instance."""
    pipe = pipeline_factory(partitions=1, batch_size=MAX_BATCH_SIZE)
    # Sent before the service starts: its first batches hold many of them at once.
    ids = send_events(pipe.settings, "bulk", BULK)
    service = pipe.process(roles="ingest,scheduler,delivery")
    out = pipe.output()
    out.wait_for(
        lambda: set(ids) <= out.record_ids() or service.popen.poll() is not None,
        90,
        "every event published (or the service gone)",
    )
    assert service.popen.poll() is None, service.log()[-2000:]
    assert set(ids) <= out.record_ids()
    # The leading digest holds the first batch whole: past what the Lua could pack before.
    first = out.digests[0]
    assert (first.timeline, first.reason) == ("bulk", DigestReason.IMMEDIATE)
    assert len(first.records) > 1_333
    out.close()
