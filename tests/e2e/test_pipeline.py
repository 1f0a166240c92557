"""The whole pipeline against real Kafka and Redis: Avro in, digests out."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from digest_stream.wire import codec
from digest_stream.wire.models import DigestReason, Event
from tests.support.crash_hooks import pause_before_close_env
from tests.support.kafka import Collector, digest_ids_by_record, send_events
from tests.support.pipeline import PipelineFactory


def _some_delivered(out: Collector, ids: list[str]) -> Callable[[], bool]:
    """Whether any of these records came out in a digest yet."""
    wanted = set(ids)
    return lambda: bool(wanted & out.record_ids())


def _digests_of(out: Collector, timeline: str) -> list[list[str]]:
    return [[r.id for r in d.records] for d in out.digests if d.timeline == timeline]


def test_first_event_of_a_new_timeline_is_delivered_at_once(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=2)
    pipe.app()
    out = pipe.output()
    sent_at = time.time()
    (record_id,) = send_events(pipe.settings, "alerts:1")
    out.wait_for(lambda: bool(out.digests), 30, "no digest for the first event")
    (digest,) = out.digests
    assert digest.timeline == "alerts:1"
    assert [r.id for r in digest.records] == [record_id]
    assert (digest.part, digest.parts, digest.dropped) == (1, 1, 0)
    # Immediate: well before the 2 s minimum delay would have elapsed.
    assert digest.opened_at / 1000 - sent_at < 2.0
    out.close()


def test_events_during_cool_down_come_out_as_one_digest_newest_first(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=2, minimum_delay=2.0, increment_delay=0.5, maximum_delay=3.0)
    app = pipe.app()
    out = pipe.output()
    first = send_events(pipe.settings, "t")
    out.wait_for(lambda: len(out.digests) == 1, 30, "first digest")
    first_at = out.digests[0].opened_at / 1000
    # Six events during the cool-down: due = close + 2 s, +0.5 s each, capped at close + 3 s.
    burst = send_events(pipe.settings, "t", 6)
    out.wait_for(lambda: len(out.digests) >= 2, 30, "second digest after the cool-down")
    second = out.digests[1]
    assert [r.id for r in second.records] == list(reversed(burst))  # newest first
    assert second.id != out.digests[0].id
    waited = second.opened_at / 1000 - first_at
    # Never before the minimum delay; never after the maximum (plus scheduling slack).
    assert 2.0 <= waited <= 3.0 + 1.5, waited
    # And nothing else: watch a while longer for a stray third digest.
    out.observe(2.0)
    assert _digests_of(out, "t") == [first, list(reversed(burst))]
    # The first digest is the leading edge, published by the ingest: no IMMEDIATE entry.
    assert out.digests[0].reason is DigestReason.IMMEDIATE
    assert app.metrics.value("digest_schedule_entries_total", reason="IMMEDIATE") == 0
    assert app.metrics.value("digest_schedule_entries_total", reason="SCHEDULED") >= 1
    out.close()


def test_capacity_trimming_shows_as_dropped(pipeline_factory: PipelineFactory) -> None:
    pipe = pipeline_factory(partitions=1, capacity=3)
    pipe.app()
    out = pipe.output()
    send_events(pipe.settings, "cap")
    out.wait_for(lambda: len(out.digests) == 1, 30, "first digest")
    burst = send_events(pipe.settings, "cap", 8)
    out.wait_for(lambda: len(out.digests) >= 2, 30, "the trimmed digest")
    trimmed = out.digests[1]
    assert [r.id for r in trimmed.records] == list(reversed(burst))[:3]
    assert trimmed.dropped == 5
    out.close()


def test_poison_messages_go_to_the_dlq_and_good_events_still_flow(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=1)
    pipe.app()
    out, dlq = pipe.output(), pipe.dlq()
    raw = Producer({"bootstrap.servers": pipe.settings.kafka_bootstrap_servers})
    good = Event(id="ok-1", timestamp=int(time.time() * 1000), payload=b"{}")
    encoded = codec.encode_event(good)
    topic = pipe.settings.events_topic
    raw.produce(topic, key=b"poison", value=b"\xff\xfe random bytes \x00\x01")
    raw.produce(topic, key=b"poison", value=encoded[: len(encoded) // 2])
    raw.produce(topic, key=None, value=encoded)
    raw.produce(topic, key=b"good", value=encoded)
    assert raw.flush(30) == 0
    out.wait_for(lambda: bool(out.digests), 30, "the good event's digest")
    assert [r.id for r in out.digests[0].records] == ["ok-1"]
    dlq.wait_for(lambda: len(dlq.messages) >= 3, 30, "three dead letters")
    reasons = []
    for message in dlq.messages:
        headers = dict(message.headers() or [])
        assert headers["dlq.source.topic"] == topic.encode()
        assert headers["dlq.source.partition"] == b"0"
        reason = headers["dlq.reason"]
        assert isinstance(reason, bytes)
        reasons.append(reason.decode())
    assert reasons[2] == "missing-key"
    assert reasons[0] in {"invalid-avro", "truncated", "trailing-bytes"}
    assert reasons[1] in {"truncated", "invalid-avro"}
    out.close()
    dlq.close()


def test_two_instances_split_partitions_and_lose_nothing_across_rebalances(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=4, minimum_delay=1.0, increment_delay=0.2, maximum_delay=2.0)
    first = pipe.app()
    out = pipe.output()
    timelines = [f"scale:{i}" for i in range(40)]
    sent = send_events(pipe.settings, timelines, 10)
    second = pipe.app()  # joins mid-stream
    sent += send_events(pipe.settings, timelines, 10)
    assert first.ingest is not None
    assert second.ingest is not None

    def both_own_some() -> bool:
        out.poll()
        return bool(first.ingest and first.ingest.owned) and bool(
            second.ingest and second.ingest.owned
        )

    out.wait_for(both_own_some, 60, "both instances to own input partitions")
    assert not (first.ingest.owned & second.ingest.owned)
    sent += send_events(pipe.settings, timelines, 10)
    first.stop()  # leaves mid-stream
    assert first.wait()
    sent += send_events(pipe.settings, timelines, 10)
    out.wait_for(lambda: set(sent) <= out.record_ids(), 90, "every record in some digest")
    duplicated = {r: ids for r, ids in digest_ids_by_record(out.digests).items() if len(ids) > 1}
    assert duplicated == {}, f"records in two digests with different ids: {list(duplicated)[:5]}"
    out.close()


@pytest.mark.slow
def test_ingest_killed_mid_stream_loses_nothing(pipeline_factory: PipelineFactory) -> None:
    pipe = pipeline_factory(partitions=2, minimum_delay=1.0, increment_delay=0.2, maximum_delay=2.0)
    delivery = pipe.process(roles="delivery")
    ingest = pipe.process(roles="ingest,scheduler")
    out = pipe.output()
    sent: list[str] = []
    timelines = [f"kill:{i}" for i in range(25)]
    for _ in range(4):
        round_ids = send_events(pipe.settings, timelines, 20)
        sent += round_ids
        # This round's own events, not just any digest: the ingest started in the previous
        # round must be up and working before it is killed.
        out.wait_for(_some_delivered(out, round_ids), 60, "digests of this round's events to flow")
        ingest.kill()
        assert ingest.popen.returncode == -9
        ingest = pipe.process(roles="ingest,scheduler")
    out.wait_for(lambda: set(sent) <= out.record_ids(), 120, "every record after SIGKILLs")
    duplicated = {r: ids for r, ids in digest_ids_by_record(out.digests).items() if len(ids) > 1}
    assert duplicated == {}
    assert delivery.popen.poll() is None
    out.close()


@pytest.mark.slow
def test_delivery_killed_between_publish_and_close_republishes_same_id(
    pipeline_factory: PipelineFactory, tmp_path: Path
) -> None:
    # Delivery's crash point is the subject: the first digest must go through delivery.
    pipe = pipeline_factory(partitions=1, direct_leading_edge=False)
    marker = tmp_path / "delivery.paused"
    ingest = pipe.process(roles="ingest,scheduler")
    hooked = pipe.process(roles="delivery", **pause_before_close_env(marker))
    out = pipe.output()
    (record_id,) = send_events(pipe.settings, "crash")
    out.wait_for(lambda: len(out.digests) == 1, 30, "the digest published before the pause")
    first = out.digests[0]
    assert marker.read_text().strip() == first.id  # paused between publish and close
    hooked.kill()
    pipe.process(roles="delivery")  # the restarted delivery reopens the same digest
    # Maintenance (timeout 10 s) re-announces the timeline that stayed READY: same id again.
    out.wait_for(lambda: len(out.digests) >= 2, 60, "the digest re-published after the crash")
    again = out.digests[1]
    assert again.id == first.id
    assert [r.id for r in again.records] == [record_id]
    assert ingest.popen.poll() is None
    out.close()


def test_a_record_id_longer_than_the_store_accepts_is_dead_lettered_alone(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=1)
    app = pipe.app()
    out, dlq = pipe.output(), pipe.dlq()
    with pipe.producer() as producer:  # the Event schema allows any non-empty id
        producer.send("ids", "x" * 2000, b"{}")
        producer.send("ids", "fine", b"{}")
        producer.flush()
    out.wait_for(lambda: bool(out.digests), 30, "the good record's digest")
    assert [r.id for r in out.digests[0].records] == ["fine"]
    dlq.wait_for(lambda: bool(dlq.messages), 30, "the long id dead-lettered")
    headers = dict(dlq.messages[0].headers() or [])
    assert headers["dlq.reason"] == b"invalid-id"
    assert headers["dlq.source.offset"] == b"0"
    assert app.metrics.value("digest_dead_letters_total", reason="invalid-id") == 1
    out.close()
    dlq.close()
