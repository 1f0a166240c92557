"""Shared fixtures: a real Kafka and a real Redis, per-test topics, groups and namespaces, and
the pipeline harness on them (helpers, as opposed to fixtures, live in tests/support/).

Addresses resolve in this order: the environment (what `make test` exports from the local
stack) -> testcontainers when a Docker engine is reachable -> a clear failure. Tests under
tests/unit/ use none of these broker fixtures.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from redis.cluster import ClusterNode, RedisCluster

from digest_stream.settings import Settings
from tests.support import unique, wait_until
from tests.support.kafka import TopicFactory
from tests.support.pipeline import FAST, Pipeline, PipelineFactory
from tests.support.proxy import TcpProxy

HOW_TO = "run `make test` (it starts a local Kafka and Redis) or `eval $(digest-stream dev env)`"


def _docker_reachable() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        return bool(client.ping())
    except Exception:
        return False


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


# ---------------------------------------------------------------------------- schema registry


@pytest.fixture(scope="session")
def schema_registry_url() -> Iterator[str]:
    """URL of a real Schema Registry's Confluent-compatible API (the stack's Apicurio)."""
    from digest_stream.dev.stack import REGISTRY_ENV

    env = os.environ.get(REGISTRY_ENV)
    if env:
        yield env
        return
    if _docker_reachable():
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.waiting_utils import wait_for_logs

        image = "apicurio/apicurio-registry-mem:2.6.13.Final"
        with DockerContainer(image).with_exposed_ports(8080) as container:
            wait_for_logs(container, "Listening on", timeout=120)
            host, port = container.get_container_host_ip(), container.get_exposed_port(8080)
            yield f"http://{host}:{port}/apis/ccompat/v7"
        return
    if os.environ.get("CI"):
        # CI starts the registry (`make test` -> `dev up --registry`): its absence is a failure.
        pytest.fail(f"no Schema Registry: {REGISTRY_ENV} is unset in CI; {HOW_TO}")
    pytest.skip(f"no Schema Registry: {REGISTRY_ENV} is unset (`digest-stream dev up --registry`)")


# ---------------------------------------------------------------------------- pipeline


@pytest.fixture
def pipeline_factory(
    kafka_bootstrap: str,
    redis_url: str,
    topic_factory: TopicFactory,
    namespace: str,
) -> Iterator[PipelineFactory]:
    """Build a pipeline on fresh topics; stop every app and process it started."""
    made: list[Pipeline] = []

    def make(partitions: int = 4, **changes: Any) -> Pipeline:
        base = unique("e2e")
        settings = Settings.model_validate(
            {
                "kafka_bootstrap_servers": kafka_bootstrap,
                "redis_url": redis_url,
                "namespace": namespace,
                "events_topic": topic_factory(partitions=partitions, name=f"{base}.events"),
                "schedule_topic": topic_factory(partitions=partitions, name=f"{base}.schedule"),
                "output_topic": topic_factory(partitions=partitions, name=f"{base}.output"),
                "dlq_topic": topic_factory(partitions=1, name=f"{base}.dlq"),
                "group_id": f"{base}-ingest",
                "delivery_group_id": f"{base}-delivery",
                **FAST,
                **changes,
            }
        )
        pipe = Pipeline(settings, partitions)
        made.append(pipe)
        return pipe

    yield make
    for pipe in made:
        for app in pipe.apps:
            app.stop()
        for app in pipe.apps:
            app.wait()
        for proc in pipe.processes:
            proc.stop(timeout=30)
