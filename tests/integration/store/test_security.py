"""Security checks on a real Redis: a function library cannot create globals, and namespaces on
one Redis are isolated from each other (the static checks are tests/unit/test_security.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from digest_stream.store import InvalidState, NewRecord
from digest_stream.store.redis import RedisStore
from digest_stream.store.redis.keys import (
    digest_key,
    fence_key,
    partition_tag,
    ready_key,
    timeline_key,
    waiting_key,
)
from tests.support import unique


def test_redis_refuses_a_library_that_creates_globals(redis_client: redis.Redis) -> None:
    # The runtime guard the static check relies on: Redis 7 functions cannot create globals.
    name = unique("probe").replace("-", "_")
    code = (
        f"#!lua name={name}\n"
        "redis.register_function('" + name + "_f', function(keys, args) leaked = 1 return 1 end)"
    )
    redis_client.function_load(code)
    try:
        with pytest.raises(redis.ResponseError, match=r"(?i)global|readonly table"):
            redis_client.fcall(f"{name}_f", 0)
    finally:
        redis_client.function_delete(name)


# ------------------------------------------------------------------ namespace isolation


@pytest.fixture
def two_stores(redis_client: redis.Redis) -> Iterator[tuple[RedisStore, RedisStore]]:
    first, second = unique("nsa"), unique("nsb")
    yield RedisStore(redis_client, namespace=first), RedisStore(redis_client, namespace=second)
    for ns in (first, second):
        for key in list(redis_client.scan_iter(match=f"{{{ns}:*", count=1000)):
            redis_client.delete(key)


def test_two_namespaces_on_one_redis_never_see_each_other(
    two_stores: tuple[RedisStore, RedisStore], redis_client: redis.Redis
) -> None:
    a, b = two_stores
    now = 1_700_000_000.0
    result = a.add(0, [NewRecord("shared", "r1", now, b"secret-a", offset=5)], now)
    assert result.ready == ["shared"]
    # b sees no timeline, no schedule, no fence, and cannot open or delete a's timeline.
    info = b.inspect(0, "shared")
    assert (info.state, info.pending, info.open_digest) == ("absent", 0, None)
    assert b.stats(0).ready == 0
    assert b.stats(0).applied_offset is None
    assert b.applied_offset(0) is None
    assert b.schedule(0, now + 10_000) == []
    with pytest.raises(InvalidState):
        b.open(0, "shared", "0" * 32, now)
    assert b.delete(0, "shared") is False
    # b's writes with the same names land in b only.
    b.add(0, [NewRecord("shared", "r1", now, b"secret-b", offset=1)], now)
    opened_a = a.open(0, "shared", "a" * 32, now)
    opened_b = b.open(0, "shared", "b" * 32, now)
    assert [r.payload for r in opened_a.records] == [b"secret-a"]
    assert [r.payload for r in opened_b.records] == [b"secret-b"]
    assert a.applied_offset(0) == 5
    assert b.applied_offset(0) == 1
    # b closing a's digest id is a no-op in a.
    assert b.close(0, "shared", opened_a.id, now) is False
    assert a.inspect(0, "shared").open_digest == opened_a.id
    # Every key each store wrote carries its own namespace tag.
    for store, ns in ((a, a.namespace), (b, b.namespace)):
        del store
        keys = list(redis_client.scan_iter(match=f"*{ns}*", count=1000))
        assert keys
        assert all(k.startswith(f"{{{ns}:".encode()) for k in keys), keys


def test_lua_refuses_keys_of_two_namespaces_in_one_call(
    two_stores: tuple[RedisStore, RedisStore], redis_client: redis.Redis
) -> None:
    a, b = two_stores
    ta, tb = partition_tag(a.namespace, 0), partition_tag(b.namespace, 0)
    now = 1_700_000_000.0
    a.add(0, [NewRecord("t", "r", now, b"p", offset=0)], now)
    mixed = [timeline_key(ta, "t"), digest_key(tb, "t"), waiting_key(ta), ready_key(tb)]
    with pytest.raises(redis.ResponseError, match="invalid_argument"):
        redis_client.execute_command("FCALL", "ds_open", 4, *mixed, "t", "c" * 32, now, 3600)
    with pytest.raises(redis.ResponseError, match="invalid_argument"):
        redis_client.execute_command(
            "FCALL", "ds_add", 3, fence_key(ta), waiting_key(tb), ready_key(ta),
            now, 3600, 16, "", "", "", "", "timelines", 0,
        )  # fmt: skip
    assert a.inspect(0, "t").pending == 1
    assert b.inspect(0, "t").pending == 0
