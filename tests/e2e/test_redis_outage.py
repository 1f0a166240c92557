"""Redis unreachable for seconds (a real TCP proxy drops it): pause, commit nothing, resume."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from digest_stream.settings import Settings
from tests.conftest import wait_until
from tests.e2e.conftest import Pipeline, digest_ids_by_record
from tests.proxy import TcpProxy

PipelineFactory = Callable[..., Pipeline]
OUTAGE = 5.0


@pytest.fixture
def redis_proxy(redis_url: str) -> Iterator[TcpProxy]:
    """A proxy in front of the test Redis; closed (every connection dropped) at the end."""
    host, port = redis_url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    with TcpProxy(host, int(port)) as proxy:
        yield proxy


def _committed(settings: Settings, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap_servers, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def _end_offsets(settings: Settings, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap_servers, "group.id": "x"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def test_redis_outage_pauses_ingest_commits_nothing_and_loses_nothing(
    pipeline_factory: PipelineFactory, redis_proxy: TcpProxy
) -> None:
    pipe = pipeline_factory(partitions=2, minimum_delay=1.0, increment_delay=0.2, maximum_delay=2.0)
    settings = pipe.settings
    service = pipe.process(DIGEST_STREAM_REDIS_URL=f"redis://{redis_proxy.address}/0")
    out = pipe.output()
    sent: list[str] = []

    def send(n: int) -> None:
        with pipe.producer() as producer:
            for i in range(n):
                record_id = uuid.uuid4().hex
                producer.send(f"outage:{i % 20}", record_id, b"{}")
                sent.append(record_id)
            producer.flush()

    def committed() -> list[int]:
        return _committed(settings, settings.group_id, settings.events_topic, 2)

    send(200)
    out.wait_for(lambda: set(sent) <= out.record_ids(), 60, "the first 200 events delivered")
    ends = _end_offsets(settings, settings.events_topic, 2)
    wait_until(lambda: committed() == ends, 30, "the ingest to commit the first batch")

    redis_proxy.block()
    before_outage = list(sent)
    send(200)  # arrives while Redis is unreachable
    wait_until(lambda: "Redis unreachable" in service.log(), 30, "the ingest to notice the outage")
    blocked_at = time.monotonic()
    samples = 0
    while time.monotonic() - blocked_at < OUTAGE:  # the fault lasts OUTAGE seconds
        out.poll(0.5)
        assert committed() == ends, "a commit went through while Redis was unreachable"
        samples += 1
    assert service.popen.poll() is None, service.log()[-2000:]
    assert samples >= 3
    assert "partitions paused" in service.log()
    # Nothing sent during the outage came out (it cannot have been stored).
    assert not (set(sent) - set(before_outage)) & out.record_ids()

    redis_proxy.unblock()
    out.wait_for(lambda: set(sent) <= out.record_ids(), 90, "every event after the outage")
    ends = _end_offsets(settings, settings.events_topic, 2)
    wait_until(lambda: committed() == ends, 30, "the ingest to commit after the outage")
    assert "Redis reachable again; partitions resumed" in service.log()
    duplicated = {r: ids for r, ids in digest_ids_by_record(out.digests).items() if len(ids) > 1}
    assert duplicated == {}
    assert redis_proxy.refused > 0  # the service did try to reconnect through the outage
    assert service.stop() == 0
    out.close()
