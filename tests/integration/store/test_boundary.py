"""The store's boundary on every backend: what the service asks besides the digest calls
(its clock, readiness, letting go of connections) and the errors a real Redis gives, as the
store's own (issue 29, item 3)."""

from __future__ import annotations

import time

import pytest
import redis

from digest_stream.settings import Settings
from digest_stream.store import BackendError, StoreUnavailable, connect
from digest_stream.store.errors import unavailable
from digest_stream.store.redis import RedisStore, library
from digest_stream.store.redis.keys import partition_tag, waiting_key
from tests.support import free_port
from tests.support.store import RedisClient, StoreFactory


def test_the_services_checks_answer_on_every_store(make_store: StoreFactory, backend: str) -> None:
    store = make_store()
    readiness = store.readiness()
    clock = store.server_time()
    if backend == "memory":
        assert (readiness.versions, readiness.wrong, clock) == ({}, {}, None)
    else:
        assert readiness.expected == library.VERSION
        assert len(readiness.versions) == (3 if backend == "cluster" else 1)
        assert readiness.wrong == {}
        assert clock is not None
        assert abs(clock - time.time()) < 5.0
    store.disconnect()
    assert store.stats(0).waiting == 0  # the next call connects again


def test_an_unreachable_redis_is_the_stores_unavailable() -> None:
    settings = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(StoreUnavailable) as caught:
        connect(settings)
    assert caught.value.kind == "unreachable"
    assert caught.value.backend == "Redis"
    assert isinstance(caught.value.__cause__, redis.ConnectionError)


def test_a_reply_that_is_a_bug_is_a_backend_error_not_an_outage(
    redis_client: RedisClient, namespace: str
) -> None:
    store = RedisStore(redis_client, namespace=namespace)
    # The partition's WAITING zset replaced by a string: Redis refuses the call (WRONGTYPE).
    redis_client.set(waiting_key(partition_tag(namespace, 0)), "not a zset")
    with pytest.raises(BackendError) as caught:
        store.schedule(0, time.time())
    assert not unavailable(caught.value)
    assert caught.value.kind == "error"
    assert isinstance(caught.value.__cause__, redis.ResponseError)
