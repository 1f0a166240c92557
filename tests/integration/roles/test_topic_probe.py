"""The events topic's id and partition ends, from the real broker (roles/ingest/topic.py)."""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from digest_stream.roles.ingest.topic import BrokerTopic, TopicId
from tests.support import unique, wait_until
from tests.support.kafka import TopicFactory


def test_the_probe_knows_the_topic_id_and_sees_a_recreated_topic(
    kafka_bootstrap: str, kafka_admin: AdminClient, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for _ in range(3):
        producer.produce(topic, b"x", partition=1)
    assert producer.flush(10) == 0
    probe = BrokerTopic(AdminClient({"bootstrap.servers": kafka_bootstrap}), topic)
    started = time.monotonic()
    assert probe.refresh([0, 1]) == {0: 0, 1: 3}
    print(f"one refresh took {time.monotonic() - started:.3f}s")
    first = probe.topic.value
    assert first is not None
    assert len(first) == 22
    assert probe.topic.fresh

    kafka_admin.delete_topics([topic])[topic].result(timeout=30)
    wait_until(lambda: topic not in kafka_admin.list_topics(timeout=5).topics, 30, "deleted")
    # Issue 20, item 10: the broker cannot tell now; the id kept is only the last one seen.
    probe.refresh([0, 1])
    assert probe.topic == TopicId(first, fresh=False)
    topic_factory(partitions=2, name=topic)
    wait_until(lambda: probe.refresh([0, 1]) == {0: 0, 1: 0}, 30, "the new topic's ends")
    assert probe.topic.value is not None
    assert probe.topic.value != first
    assert probe.topic.fresh


def test_a_topic_the_broker_cannot_describe_keeps_what_was_known_and_warns_once(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    probe = BrokerTopic(
        AdminClient({"bootstrap.servers": kafka_bootstrap}), unique("missing"), timeout=2.0
    )
    with caplog.at_level(logging.WARNING, logger="digest_stream.roles.ingest.topic"):
        started = time.monotonic()
        assert probe.refresh([0]) == {}
        assert probe.refresh([0]) == {}
        assert time.monotonic() - started < 2 * 3.0  # bounded, even when nothing answers
    assert probe.topic == TopicId(None, fresh=False)
    warnings = [r for r in caplog.records if "did not tell its topic id" in r.getMessage()]
    assert len(warnings) == 1
