"""Chaos fixtures: scenario settings on fresh topics, and servers of our own to break.

Every scenario runs on a redis-server of its own (`own_redis`), never on the shared Redis of
the local stack: each service start loads this checkout's Functions library (FUNCTION LOAD
REPLACE, server-wide), which would flip the library under other engineers' runs, and theirs
under ours. Only the cluster scenario uses the shared cluster, with the library preloaded
(`redis_load_library=false`).
"""

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
from tests.support.kraft import BrokerPair
from tests.support.proxy import TcpProxy


@pytest.fixture
def make_settings(
    kafka_bootstrap: str, own_redis: OwnRedis, namespace: str
) -> Iterator[SettingsFactory]:
    """Scenario settings on fresh topics of the shared broker (or `bootstrap=`) and the test's
    own Redis (or `redis=`); topics removed."""
    made: list[Settings] = []

    def make(bootstrap: str | None = None, redis: str | None = None, **changes: Any) -> Settings:
        settings = chaos_settings(
            bootstrap or kafka_bootstrap, redis or own_redis.url, namespace, **changes
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
def redis_proxy(own_redis: OwnRedis) -> Iterator[TcpProxy]:
    """A proxy in front of the test's own Redis (this folder's scenarios never use the shared
    one); closed at the end."""
    with TcpProxy("127.0.0.1", own_redis.port) as proxy:
        yield proxy


@pytest.fixture
def own_kafka() -> Iterator[OwnKafka]:
    """A Kafka broker of our own, killed by pid at the end."""
    broker = OwnKafka()
    try:
        broker.start()
        yield broker
    finally:
        broker.destroy()


@pytest.fixture
def broker_pair() -> Iterator[BrokerPair]:
    """Two Kafka brokers of our own (broker 1 also the controller), killed by pid at the end."""
    pair = BrokerPair()
    try:
        pair.start()
        yield pair
    finally:
        pair.destroy()
