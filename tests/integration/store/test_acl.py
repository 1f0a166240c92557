"""The README's least-privilege ACL lines, run for real: the store works under them on a single
Redis and on the cluster (every node), and they cover every command the library can call
(issue 12, items 4 and 12)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import NoPermissionError

from digest_stream.store import NewRecord, StoreUnavailable, TimelinePolicy
from digest_stream.store.redis import RedisStore, library
from tests.support import REPO_ROOT
from tests.support.store import RedisClient, library_commands

ROOT = REPO_ROOT
T0 = 1_000_000.0


def readme_acl_lines() -> dict[str, list[str]]:
    """The README's ACL SETUSER lines: {"single": rules, "cluster": rules}."""
    readme = (ROOT / "README.md").read_text("utf-8")
    lines = re.findall(r"^\s*ACL SETUSER digest-stream (.+)$", readme, re.MULTILINE)
    assert len(lines) == 2, lines
    return {"single": lines[0].split(), "cluster": lines[1].split()}


def granted(rules: list[str]) -> set[str]:
    return {rule[1:].lower() for rule in rules if rule.startswith("+")}


def test_the_lines_grant_every_command_of_the_library() -> None:
    lines = readme_acl_lines()
    for kind in ("single", "cluster"):
        missing = library_commands() - granted(lines[kind])
        assert not missing, f"README {kind} ACL line lacks {sorted(missing)}"
        assert "function|load" not in granted(lines[kind])  # preloading is the recommendation
        assert {"function|list", "fcall", "fcall_ro"} <= granted(lines[kind])
    assert granted(lines["cluster"]) - granted(lines["single"]) == {
        "cluster|slots",
        "cluster|shards",
        "command",
    }


def node_clients(client: RedisClient) -> list[redis.Redis]:
    """An admin connection to every node the user must exist on."""
    if isinstance(client, RedisCluster):
        return [client.get_redis_connection(node) for node in client.get_nodes()]
    return [client]


@pytest.fixture
def restricted(
    redis_backend: str, client: RedisClient, namespace: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., RedisClient]]:
    """Creates the README's user for this namespace on every node; yields a client factory."""
    name, password = f"ds-acl-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    made: list[redis.Redis] = []
    opened: list[RedisClient] = []

    def make(*, extra: tuple[str, ...] = ()) -> RedisClient:
        rules = readme_acl_lines()["cluster" if redis_backend == "cluster" else "single"]
        rules = [r.replace("~{d:*", f"~{{{namespace}:*") for r in rules]
        rules = [r.replace(">CHANGE-ME", f">{password}") for r in rules]
        for node in node_clients(client):
            node.execute_command("ACL", "SETUSER", name, "reset", *rules, *extra)
            made.append(node)
        user: RedisClient
        if redis_backend == "cluster":
            seeds: list[str] = request.getfixturevalue("redis_cluster_nodes")
            host, port = seeds[0].rsplit(":", 1)
            startup = [ClusterNode(host, int(port))]
            user = RedisCluster(startup_nodes=startup, username=name, password=password)
        else:
            kwargs = client.get_connection_kwargs()
            user = redis.Redis(
                host=kwargs["host"], port=kwargs["port"], username=name, password=password
            )
        opened.append(user)
        return user

    yield make
    for user in opened:
        user.close()
    for node in made:
        node.execute_command("ACL", "DELUSER", name)


def test_store_runs_under_the_readme_lines(
    restricted: Callable[..., RedisClient],
    make_redis_store: Callable[..., RedisStore],
    namespace: str,
) -> None:
    make_redis_store()  # the administrator's load of the library
    user = restricted()
    capped = TimelinePolicy(
        minimum_delay=1, increment_delay=0, maximum_delay=2, ttl=60, capacity=20
    )
    store = RedisStore(
        user,
        namespace=namespace,
        policy=capped,
        resolver=lambda name: (
            TimelinePolicy(minimum_delay=1, increment_delay=0, maximum_delay=2, ttl=60, capacity=3)
            if name.startswith("small")
            else capped
        ),
        load_library=False,
        inline_records=4,
    )
    # capacity trimming in both encodings: a hash (HDEL, sorted in the scratch zset) and
    # an inline container; an expired timeline (EXISTS) on the way
    big = [NewRecord("big", f"id-{i:03d}", T0 + i % 3, b"x" * 20, i) for i in range(45)]
    small = [NewRecord("small", f"s{i}", T0 + i, b"y", 100 + i) for i in range(6)]
    result = store.add(0, big + small, T0)
    assert (result.added, result.dropped) == (51, 25 + 3)
    digest = store.open(0, "big", uuid.uuid4().hex, T0)
    assert (len(digest.records), digest.dropped) == (20, 25)
    assert store.open(0, "big", uuid.uuid4().hex, T0) == digest  # reopen
    store.add(0, [NewRecord("big", "later", T0 + 5, b"z", 200)], T0)
    assert store.close(0, "big", digest.id, T0)
    small_digest = store.open(0, "small", uuid.uuid4().hex, T0)
    assert [r.id for r in small_digest.records] == ["s5", "s4", "s3"]
    assert store.close(0, "small", small_digest.id, T0)
    # schedule and maintenance in slices (ZCOUNT), inspect, stats
    assert [d.timeline for d in store.schedule(0, T0 + 10, limit=1)] == ["big"]
    back = store.maintenance(0, T0 + 20, T0 + 20, limit=1)
    assert ([d.timeline for d in back], back.more) == (["big"], False)
    assert store.inspect(0, "big").state == "waiting"
    # "small" closed with nothing pending: it cools down in no set
    assert store.inspect(0, "small").state == "cooling"
    assert store.stats(0).waiting == 1
    # delete, and the admin replay's fence reset
    assert store.delete(0, "small")
    store.set_applied_offset(0, 150)
    assert store.applied_offset(0) == 150
    store.set_applied_offset(0, None)
    assert store.applied_offset(0) is None


def test_self_loading_needs_function_load(
    restricted: Callable[..., RedisClient], namespace: str
) -> None:
    user = restricted(extra=("+function|load",))
    store = RedisStore(user, namespace=namespace, load_library=True)
    store.add(0, [NewRecord("t", "r", T0, b"x", 0)], T0)
    assert store.inspect(0, "t").state == "ready"


def test_load_library_only_checks_a_library_that_is_already_this_one(
    restricted: Callable[..., RedisClient],
    make_redis_store: Callable[..., RedisStore],
    namespace: str,
) -> None:
    # Issue 20, item 11: `redis_load_library=true` (the default) under the README's user,
    # against a Redis whose administrator loaded this very library, must start: nothing to
    # load, so FUNCTION LOAD (not granted) is not needed.
    make_redis_store()
    store = RedisStore(restricted(), namespace=namespace, load_library=True)
    store.add(0, [NewRecord("t", "r", T0, b"x", 0)], T0)
    assert store.inspect(0, "t").state == "ready"


def _refused_function_load(error: StoreUnavailable) -> None:
    """The store's error for Redis refusing FUNCTION LOAD, chained to redis-py's."""
    assert (error.kind, error.command) == ("library_missing", "function|load")
    assert isinstance(error.__cause__, NoPermissionError)


def _readme_user(server: redis.Redis, *extra: str) -> redis.Redis:
    """The README's single-node user on a Redis of our own; a client logged in as it."""
    name, password = "digest-stream", uuid.uuid4().hex
    rules = [r.replace(">CHANGE-ME", f">{password}") for r in readme_acl_lines()["single"]]
    server.execute_command("ACL", "SETUSER", name, "reset", *rules, *extra)
    kwargs = server.get_connection_kwargs()
    return redis.Redis(host=kwargs["host"], port=kwargs["port"], username=name, password=password)


def test_load_library_still_loads_a_missing_or_different_library() -> None:
    # On a Redis of our own: replacing the server-wide library on the shared one would
    # disturb every other test using it.
    from tests.chaos.harness import OwnRedis

    own = OwnRedis()
    own.start()
    try:
        admin = own.client()
        # Missing: loading is needed, and refused without FUNCTION LOAD.
        with pytest.raises(StoreUnavailable) as refused:
            RedisStore(_readme_user(admin), load_library=True)
        _refused_function_load(refused.value)
        # Same name and version, other code (someone's edit): replaced when allowed to load.
        other = library.SOURCE + "\n-- edited by hand\n"
        admin.execute_command("FUNCTION", "LOAD", other)
        with pytest.raises(StoreUnavailable) as refused:
            RedisStore(_readme_user(admin), load_library=True)
        _refused_function_load(refused.value)
        store = RedisStore(_readme_user(admin, "+function|load"), load_library=True)
        listed = admin.execute_command("FUNCTION", "LIST", "WITHCODE")
        assert library.code_in(listed) == library.SOURCE
        store.add(0, [NewRecord("t", "r", T0, b"x", 0)], T0)
    finally:
        own.stop()


@pytest.mark.parametrize("missing", ["lset", "rpushx"])
def test_a_user_missing_a_command_of_the_library_is_refused_at_start(
    restricted: Callable[..., RedisClient],
    make_redis_store: Callable[..., RedisStore],
    namespace: str,
    missing: str,
) -> None:
    # An operator who kept library 32's ACL line after the upgrade: a command refused inside
    # a function fails the call after its first writes (a close had deleted its digest when
    # the list's meta write was refused), so the store refuses to start, naming the grant.
    make_redis_store()
    user = restricted(extra=(f"-{missing}",))
    with pytest.raises(StoreUnavailable) as refused:
        RedisStore(user, namespace=namespace, load_library=False)
    assert (refused.value.kind, refused.value.command) == ("authorization", missing)
    assert isinstance(refused.value.__cause__, NoPermissionError)
