"""Chaos fixtures: scenario settings on fresh topics, and servers of our own to break."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from digest_stream.settings import Settings
from tests.chaos.harness import (
    OwnKafka,
    OwnRedis,
    SettingsFactory,
    chaos_settings,
    delete_topics,
)


@pytest.fixture
def make_settings(
    kafka_bootstrap: str, redis_url: str, namespace: str
) -> Iterator[SettingsFactory]:
    """Scenario settings on fresh topics of the shared broker (or `bootstrap=`); topics removed."""
    made: list[Settings] = []

    def make(bootstrap: str | None = None, redis: str | None = None, **changes: Any) -> Settings:
        settings = chaos_settings(
            bootstrap or kafka_bootstrap, redis or redis_url, namespace, **changes
        )
        made.append(settings)
        return settings

    yield make
    for s in made:
        if s.kafka_bootstrap_servers != kafka_bootstrap:
            continue  # an own broker: destroyed with its data
        topics = [s.events_topic, s.schedule_topic, s.output_topic, s.dlq_topic]
        with contextlib.suppress(Exception):
            delete_topics(kafka_bootstrap, topics)


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    """A redis-server of our own, killed by pid at the end."""
    server = OwnRedis()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_kafka() -> Iterator[OwnKafka]:
    """A Kafka broker of our own, killed by pid at the end."""
    broker = OwnKafka()
    try:
        broker.start()
        yield broker
    finally:
        broker.destroy()
