"""Shared fixtures: a real Kafka and a real Redis, plus per-test isolation helpers.

Addresses resolve in this order: the environment (what `make test` exports from the local
stack) -> testcontainers when a Docker engine is reachable -> a clear failure.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from urllib.parse import urlsplit

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from redis.cluster import ClusterNode, RedisCluster

from digest_stream.settings import Settings
from tests.proxy import TcpProxy

HOW_TO = "run `make test` (it starts a local Kafka and Redis) or `eval $(digest-stream dev env)`"


def _docker_reachable() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        return bool(client.ping())
    except Exception:
        return False


def unique(prefix: str) -> str:
    """A name no other test (or earlier run) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def wait_until(
    condition: Callable[[], bool], timeout: float, message: str, interval: float = 0.05
) -> None:
    """Poll condition until true; fail with message at the deadline (never a blind sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s: {message}")
        time.sleep(interval)


# ---------------------------------------------------------------------------- kafka


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a real Kafka broker."""
    env = os.environ.get("DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS")
    if env:
        yield env
        return
    if _docker_reachable():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("apache/kafka:4.1.1").with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    pytest.fail(f"no Kafka: DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS is unset and no Docker; {HOW_TO}")


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    """An admin client on the test broker."""
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


TopicFactory = Callable[..., str]


@pytest.fixture
def topic_factory(kafka_admin: AdminClient) -> Iterator[TopicFactory]:
    """Create uniquely named topics for one test; delete them afterwards."""
    created: list[str] = []

    def make(partitions: int = 1, name: str | None = None, **config: str) -> str:
        topic = name or unique("t")
        futures = kafka_admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config)]
        )
        futures[topic].result(timeout=30)
        created.append(topic)
        wait_until(
            lambda: _topic_ready(kafka_admin, topic, partitions),
            30,
            f"topic {topic} has no leaders for its {partitions} partitions",
        )
        return topic

    yield make
    if created:
        for future in kafka_admin.delete_topics(created).values():
            with contextlib.suppress(Exception):
                future.result(timeout=30)


def _topic_ready(admin: AdminClient, topic: str, partitions: int) -> bool:
    meta = admin.list_topics(topic, timeout=5).topics.get(topic)
    if meta is None or meta.error is not None or len(meta.partitions) != partitions:
        return False
    return all(p.leader >= 0 for p in meta.partitions.values())


@pytest.fixture
def group_id() -> str:
    """A consumer group id unique to this test."""
    return unique("g")


def committed_offsets(settings: Settings, partitions: Iterable[int]) -> list[int]:
    """The ingest group's committed offsets of these input partitions (negative: none).

    Read by a non-member (OffsetFetch only), so it never joins or disturbs the group.
    """
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_bootstrap_servers, "group.id": settings.group_id}
    )
    try:
        found = consumer.committed(
            [TopicPartition(settings.events_topic, p) for p in partitions], timeout=10
        )
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def end_offsets(settings: Settings, partitions: Iterable[int]) -> list[int]:
    """The end (high watermark) offsets of these input partitions."""
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_bootstrap_servers, "group.id": unique("probe")}
    )
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(settings.events_topic, p), timeout=10)[1]
            for p in partitions
        ]
    finally:
        consumer.close()


# ---------------------------------------------------------------------------- redis


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real single-node Redis 7."""
    env = os.environ.get("DIGEST_STREAM_REDIS_URL")
    if env:
        yield env
        return
    if _docker_reachable():
        from testcontainers.redis import RedisContainer

        with RedisContainer("redis:7") as container:
            host = container.get_container_host_ip()
            yield f"redis://{host}:{container.get_exposed_port(6379)}/0"
        return
    pytest.fail(f"no Redis: DIGEST_STREAM_REDIS_URL is unset and no Docker; {HOW_TO}")


@pytest.fixture(scope="session")
def redis_cluster_nodes() -> list[str]:
    """host:port of the masters of a real 3-master Redis Cluster."""
    env = os.environ.get("DIGEST_STREAM_REDIS_CLUSTER_NODES")
    if not env:
        pytest.fail(f"no Redis Cluster: DIGEST_STREAM_REDIS_CLUSTER_NODES is unset; {HOW_TO}")
    return [node.strip() for node in env.split(",") if node.strip()]


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the single Redis."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def redis_cluster(redis_cluster_nodes: list[str]) -> Iterator[RedisCluster]:
    """A cluster client of the Redis Cluster."""
    startup = [ClusterNode(*node.rsplit(":", 1)) for node in redis_cluster_nodes]
    client = RedisCluster(startup_nodes=startup)
    yield client
    client.close()


@pytest.fixture
def redis_proxy(redis_url: str) -> Iterator[TcpProxy]:
    """A proxy in front of the test Redis; closed (every connection dropped) at the end."""
    parts = urlsplit(redis_url)
    with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
        yield proxy


def _delete_namespace(client: redis.Redis, namespace: str) -> None:
    # Every key of the service starts with the hash tag "{<namespace>:<partition>}".
    for pattern in (f"{{{namespace}:*", f"{namespace}:*"):
        batch = list(client.scan_iter(match=pattern, count=1000))
        for start in range(0, len(batch), 500):
            for key in batch[start : start + 500]:
                client.delete(key)  # one key per call: keys may sit in different slots


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> Iterator[str]:
    """A Redis namespace unique to this test; its keys are removed afterwards."""
    ns = unique("ns")
    yield ns
    urls = []
    if "redis_url" in request.fixturenames or os.environ.get("DIGEST_STREAM_REDIS_URL"):
        urls.append(
            os.environ.get("DIGEST_STREAM_REDIS_URL") or request.getfixturevalue("redis_url")
        )
    cluster_env = os.environ.get("DIGEST_STREAM_REDIS_CLUSTER_NODES", "")
    urls.extend(f"redis://{node.strip()}/0" for node in cluster_env.split(",") if node.strip())
    for url in urls:
        with contextlib.suppress(redis.RedisError):
            client = redis.Redis.from_url(url)
            _delete_namespace(client, ns)
            client.close()
