"""Store fixtures: the same behaviour suite runs on the reference model, on a single
Redis and on the 3-master Redis Cluster (built on the shared fixtures of tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from digest_stream.store import DigestStore, MemoryStore, TimelinePolicy
from digest_stream.store.policy import PolicyResolver
from digest_stream.store.redis import RedisStore
from tests.support.store import RedisClient, StoreFactory, tag_keys


@pytest.fixture(params=["memory", "redis", pytest.param("cluster", marks=pytest.mark.cluster)])
def backend(request: pytest.FixtureRequest) -> str:
    """Which store the test runs on."""
    return str(request.param)


def _client(request: pytest.FixtureRequest, backend: str) -> RedisClient:
    name = "redis_client" if backend == "redis" else "redis_cluster"
    client: RedisClient = request.getfixturevalue(name)
    return client


@pytest.fixture
def make_store(backend: str, namespace: str, request: pytest.FixtureRequest) -> StoreFactory:
    """Build a store of the parametrized backend with the given policy/resolver."""

    def make(
        policy: TimelinePolicy | None = None, resolver: PolicyResolver | None = None
    ) -> DigestStore:
        if backend == "memory":
            return MemoryStore(policy=policy, resolver=resolver)
        return RedisStore(
            _client(request, backend), namespace=namespace, policy=policy, resolver=resolver
        )

    return make


@pytest.fixture
def store(make_store: StoreFactory) -> DigestStore:
    """A store with the default policy."""
    return make_store()


@pytest.fixture(params=["redis", pytest.param("cluster", marks=pytest.mark.cluster)])
def redis_backend(request: pytest.FixtureRequest) -> str:
    """Redis-only tests: single node or cluster."""
    return str(request.param)


@pytest.fixture
def client(redis_backend: str, request: pytest.FixtureRequest) -> RedisClient:
    """The raw client behind ``redis_store`` (for looking at keys directly)."""
    return _client(request, redis_backend)


@pytest.fixture
def make_redis_store(client: RedisClient, namespace: str) -> Callable[..., RedisStore]:
    """Build a RedisStore over ``client`` in the test's namespace."""

    def make(
        policy: TimelinePolicy | None = None,
        resolver: PolicyResolver | None = None,
        load_library: bool = True,
        inline_records: int = 16,
    ) -> RedisStore:
        return RedisStore(
            client,
            namespace=namespace,
            policy=policy,
            resolver=resolver,
            load_library=load_library,
            inline_records=inline_records,
        )

    return make


@pytest.fixture
def redis_store(make_redis_store: Callable[..., RedisStore]) -> RedisStore:
    """A RedisStore with the default policy."""
    return make_redis_store()


@pytest.fixture
def keys_of(client: RedisClient, namespace: str) -> Callable[[int], set[bytes]]:
    """SCAN helper bound to the test's client and namespace."""
    return lambda partition: tag_keys(client, namespace, partition)


@pytest.fixture
def raw_client(backend: str, request: pytest.FixtureRequest) -> RedisClient | None:
    """The raw client behind ``store`` (None for the model)."""
    if backend == "memory":
        return None
    name = "redis_client" if backend == "redis" else "redis_cluster"
    client: RedisClient = request.getfixturevalue(name)
    return client
