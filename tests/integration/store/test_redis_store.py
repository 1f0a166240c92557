"""What only the Redis store has: keys, TTLs, the library, cluster placement, lost payloads."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from redis.cluster import RedisCluster

from digest_stream.store import (
    InvalidArgument,
    LibraryVersionMismatch,
    NewRecord,
    TimelinePolicy,
)
from digest_stream.store.base import CANCEL_ALL
from digest_stream.store.limits import COOLING_MARGIN, SCHEDULE_REPLY_TTL
from digest_stream.store.redis import RedisStore, library, routing
from digest_stream.store.redis.keys import (
    digest_key,
    fence_key,
    moved_key,
    partition_tag,
    ready_key,
    timeline_key,
    waiting_key,
)
from tests.support import new_id
from tests.support.proxy import TcpProxy
from tests.support.store import RedisClient, raw

T0 = 1_000_000.0
KeysOf = Callable[[int], set[bytes]]


def records(timeline: str, count: int, first_offset: int = 0) -> list[NewRecord]:
    return [
        NewRecord(timeline, f"r{i}", T0 + i, b"payload-%d" % i, first_offset + i)
        for i in range(count)
    ]


def tag(namespace: str, partition: int = 0) -> str:
    return partition_tag(namespace, partition)


def test_all_keys_carry_the_partition_tag(
    redis_store: RedisStore, keys_of: KeysOf, namespace: str
) -> None:
    redis_store.add(0, records("t", 3), T0)
    redis_store.open(0, "t", new_id(), T0)
    redis_store.add(0, records("t", 1, first_offset=10), T0)
    redis_store.add(0, records("u", 1, first_offset=20), T0)
    t = tag(namespace)
    expected = {fence_key(t), ready_key(t), timeline_key(t, "t"), digest_key(t, "t")}
    expected.add(timeline_key(t, "u"))
    assert keys_of(0) == {key.encode() for key in expected}
    assert keys_of(1) == set()


def test_retired_timeline_leaves_no_keys(redis_store: RedisStore, keys_of: KeysOf) -> None:
    redis_store.add(0, records("t", 2), T0)
    digest = redis_store.open(0, "t", new_id(), T0)
    redis_store.add(0, records("t", 1, first_offset=2), T0)  # behind it: it waits after
    redis_store.add(0, [NewRecord("t", "all", T0, b"", 3, CANCEL_ALL)], T0)  # nothing pending
    redis_store.close(0, "t", digest.id, T0)
    redis_store.schedule(0, T0 + 300)
    empty = redis_store.open(0, "t", new_id(), T0 + 300)
    assert empty.records == []
    redis_store.close(0, "t", empty.id, T0 + 300)
    # only the partition's keys remain (its fence, and the reply of the schedule that moved
    # the timeline, kept briefly for a re-send): the timeline owns nothing any more
    assert {key.split(b":")[-1] for key in keys_of(0)} == {b"o", b"m"}


@pytest.mark.parametrize("state", ["ready", "open", "waiting"])
def test_delete_removes_every_timeline_key(
    redis_store: RedisStore, keys_of: KeysOf, namespace: str, state: str
) -> None:
    redis_store.add(0, records("t", 2), T0)
    if state != "ready":
        digest = redis_store.open(0, "t", new_id(), T0)
        redis_store.add(0, records("t", 1, first_offset=5), T0)
        if state == "waiting":
            redis_store.close(0, "t", digest.id, T0)
    assert redis_store.delete(0, "t")
    assert keys_of(0) == {fence_key(tag(namespace)).encode()}


@pytest.mark.parametrize(("ttl", "kept"), [(1000.0, 100 + COOLING_MARGIN), (120.0, 120.0)])
def test_a_cooling_timeline_is_a_meta_kept_through_its_cool_down_and_a_grace(
    make_redis_store: Callable[..., RedisStore],
    client: RedisClient,
    keys_of: KeysOf,
    namespace: str,
    ttl: float,
    kept: float,
) -> None:
    """A close with nothing pending writes the timeline's meta alone, in no set, kept for the
    cool-down and COOLING_MARGIN (within the policy's TTL); the add that finds it after the
    cool-down (by the caller's clock) removes it and starts the timeline anew."""
    store = make_redis_store(TimelinePolicy(minimum_delay=100, maximum_delay=110, ttl=ttl))
    store.add(0, records("t", 1), T0)
    digest = store.open(0, "t", new_id(), T0)
    assert store.close(0, "t", digest.id, T0)
    t = tag(namespace)
    meta = timeline_key(t, "t")
    assert keys_of(0) == {fence_key(t).encode(), meta.encode()}  # no schedule set holds it
    assert (kept - 1) * 1000 < int(client.pttl(meta)) <= kept * 1000
    result = store.add(0, records("t", 1, first_offset=5), T0 + 100)
    assert result.ready == ["t"]
    info = store.inspect(0, "t")
    assert (info.state, info.last_delivery, info.pending) == ("ready", None, 1)
    assert (ttl - 1) * 1000 < int(client.pttl(meta)) <= ttl * 1000


def test_every_key_but_the_fence_has_a_ttl(
    make_redis_store: Callable[..., RedisStore],
    client: RedisClient,
    keys_of: KeysOf,
    namespace: str,
) -> None:
    # a cool-down as long as maximum_delay allows (a policy the store accepts)
    store = make_redis_store(TimelinePolicy(minimum_delay=100, maximum_delay=100, ttl=200))
    store.add(0, records("a", 3) + records("b", 2, first_offset=3), T0)
    store.open(0, "a", new_id(), T0)
    store.add(0, records("a", 1, first_offset=10), T0)
    digest = store.open(0, "b", new_id(), T0)
    store.close(0, "b", digest.id, T0)
    store.add(0, records("b", 1, first_offset=20), T0)  # in b's cool-down: it waits
    found = keys_of(0)
    assert len(found) == 6  # fence, ready, waiting, a's timeline + digest, b's timeline
    fence = fence_key(tag(namespace)).encode()
    for key in found - {fence}:
        ttl_ms = int(client.pttl(key))
        assert 190_000 < ttl_ms <= 200_000, key
    # The fence alone never expires: one key per partition, and it must survive a stopped
    # service, or expiry after an idle hour would look like Redis losing state.
    assert int(client.pttl(fence)) == -1
    store.set_applied_offset(0, 5)
    assert int(client.pttl(fence)) == -1


def test_partition_ttl_only_grows(
    make_redis_store: Callable[..., RedisStore], client: RedisClient, namespace: str
) -> None:
    default = TimelinePolicy(ttl=3600)
    long_lived = TimelinePolicy(ttl=7200)
    store = make_redis_store(
        default, resolver=lambda name: long_lived if name == "long" else default
    )
    store.add(0, records("long", 1), T0)
    store.schedule(0, T0)  # default ttl (3600) must not shorten what "long" needs
    assert int(client.pttl(ready_key(tag(namespace)))) > 3_600_000
    assert int(client.pttl(timeline_key(tag(namespace), "long"))) > 3_600_000


def test_missing_payload_is_skipped_and_counted(
    make_redis_store: Callable[..., RedisStore], client: RedisClient, namespace: str
) -> None:
    store = make_redis_store(inline_records=0)  # one hash field per record
    store.add(0, records("t", 4), T0)
    # What eviction or an operator would do: the record's payload vanishes under us.
    assert client.hdel(timeline_key(tag(namespace), "t"), "r1") == 1
    # A damaged value (shorter than its timestamp header) counts as missing too.
    client.hset(timeline_key(tag(namespace), "t"), "r2", b"xx")
    digest = store.open(0, "t", new_id(), T0)
    assert [r.id for r in digest.records] == ["r3", "r0"]
    assert digest.dropped == 2
    assert store.open(0, "t", new_id(), T0) == digest
    assert store.close(0, "t", digest.id, T0)


def test_missing_payloads_add_to_capacity_drops(
    make_redis_store: Callable[..., RedisStore], client: RedisClient, namespace: str
) -> None:
    store = make_redis_store(TimelinePolicy(capacity=3), inline_records=0)
    assert store.add(0, records("t", 5), T0).dropped == 2
    client.hdel(timeline_key(tag(namespace), "t"), "r4")
    digest = store.open(0, "t", new_id(), T0)
    assert ([r.id for r in digest.records], digest.dropped) == (["r3", "r2"], 3)


def test_a_cancel_all_takes_lost_and_damaged_records_with_it(
    make_redis_store: Callable[..., RedisStore], client: RedisClient, namespace: str
) -> None:
    # Issue 20, item 9, in Redis only: records that vanished or were damaged are pending too,
    # so a cancel that leaves nothing pending leaves no loss for a digest to report.
    store = make_redis_store(TimelinePolicy(capacity=3), inline_records=0)
    assert store.add(0, records("t", 5), T0).dropped == 2
    key = timeline_key(tag(namespace), "t")
    client.hdel(key, "r4")  # lost
    client.hset(key, "r3", b"xx")  # damaged
    cancel_all = NewRecord("t", "control", T0, b"", 5, control=CANCEL_ALL)
    assert store.add(0, [cancel_all], T0).cancelled == 1  # r2: the one intact record
    assert client.hkeys(key) == [b""]  # only the meta is left
    store.add(0, [NewRecord("t", "g", T0, b"g", 6)], T0)
    digest = store.open(0, "t", new_id(), T0)
    assert ([r.id for r in digest.records], digest.dropped) == (["g"], 0)


@pytest.mark.parametrize("inline_records", [0, 16])
def test_lost_timeline_key_gives_an_empty_digest(
    make_redis_store: Callable[..., RedisStore],
    client: RedisClient,
    namespace: str,
    inline_records: int,
) -> None:
    store = make_redis_store(inline_records=inline_records)
    store.add(0, records("t", 2), T0)
    client.delete(timeline_key(tag(namespace), "t"))  # the whole key evicted
    digest = store.open(0, "t", new_id(), T0)
    assert (digest.records, digest.dropped, digest.expired) == ([], 0, True)
    assert store.close(0, "t", digest.id, T0)
    assert store.inspect(0, "t").state == "absent"


def test_unreadable_inline_timeline_does_not_crash(
    redis_store: RedisStore, client: RedisClient, namespace: str
) -> None:
    redis_store.add(0, records("t", 2), T0)
    client.set(timeline_key(tag(namespace), "t"), b"\xc1 not msgpack")
    digest = redis_store.open(0, "t", new_id(), T0)
    assert digest.records == []
    assert redis_store.close(0, "t", digest.id, T0)


def encoding(client: RedisClient, key: str) -> str:
    found = client.object("encoding", key)
    return found.decode() if isinstance(found, bytes) else str(found)


def conversion_counts(
    store: RedisStore, client: RedisClient, namespace: str, names: list[str], first_offset: int = 0
) -> dict[str, int]:
    """Adds one record per timeline per call (traffic spread over them) until all are hashes;
    the record count at which each one became one. Up to then each must be one inline container."""
    converted: dict[str, int] = {}
    for count in range(1, store.inline_records + 2):
        batch = [
            NewRecord(name, f"r{count}", T0 + count, b"p", first_offset + count * len(names) + i)
            for i, name in enumerate(names)
        ]
        store.add(0, batch, T0)
        for name in names:
            kind = client.type(timeline_key(tag(namespace), name))
            if name in converted:
                assert kind == b"hash", f"{name} went back from a hash at {count} records"
            elif kind == b"hash":
                converted[name] = count
            else:
                # one inline container: a string while it holds one record, then a list
                inline = b"string" if count == 1 else b"list"
                assert kind == inline, f"{name}: {kind!r} at {count} records"
        if len(converted) == len(names):
            break
    assert set(converted) == set(names), f"never a hash: {set(names) - set(converted)}"
    return converted


def test_timelines_move_from_inline_to_hash_as_they_grow(
    redis_store: RedisStore, client: RedisClient, namespace: str
) -> None:
    # A timeline's own limit is inline_records (16) less up to a quarter, fixed by its key.
    key = timeline_key(tag(namespace), "t")
    limit = conversion_counts(redis_store, client, namespace, ["t"])["t"] - 1
    assert 12 <= limit <= 16
    assert encoding(client, key) == "listpack"  # small values: still compact
    big = [NewRecord("t", f"big{i}", T0 + 100 + i, b"x" * 100, 100 + i) for i in range(3)]
    redis_store.add(0, big, T0 + 50)
    digest = redis_store.open(0, "t", new_id(), T0 + 50)
    expected = ["big2", "big1", "big0", *(f"r{i}" for i in reversed(range(1, limit + 2)))]
    assert [r.id for r in digest.records] == expected


def test_timelines_growing_together_become_hashes_at_different_counts(
    make_redis_store: Callable[..., RedisStore], client: RedisClient, namespace: str
) -> None:
    # Converting a container is the costly write (its value read into Lua and rewritten as
    # fields): timelines that grow in step must not all convert in the same call.
    store = make_redis_store(inline_records=16)
    # Alike but for a few bytes. Each limit is a hash of the key, namespace included, so the
    # spread is a draw: 60 names put more than a third on one count about once in a hundred
    # runs (23 of 60 seen); with 300 that is 5.8 standard deviations above the mean of 60.
    names = [f"user-{i}@example.com" for i in range(300)]
    counts = conversion_counts(store, client, namespace, names)
    assert all(13 <= count <= 17 for count in counts.values()), counts  # limits 12 to 16
    per_count = [list(counts.values()).count(count) for count in range(13, 18)]
    assert sum(1 for n in per_count if n) >= 4, per_count  # spread over the range
    assert max(per_count) <= len(names) // 3, per_count  # no call converts most of them
    # each timeline's limit is its own for good: written again from nothing, the same counts
    client.delete(*(timeline_key(tag(namespace), name) for name in names))
    assert conversion_counts(store, client, namespace, names, first_offset=10_000) == counts


def test_large_payloads_skip_the_inline_form(
    redis_store: RedisStore, client: RedisClient, namespace: str
) -> None:
    key = timeline_key(tag(namespace), "t")
    redis_store.add(0, [NewRecord("t", "a", T0, b"x" * 10_000, 0)], T0)
    assert client.type(key) == b"hash"
    digest = redis_store.open(0, "t", new_id(), T0)
    assert digest.records[0].payload == b"x" * 10_000


def test_appending_to_an_inline_timeline_keeps_replace_semantics(
    redis_store: RedisStore, client: RedisClient, namespace: str
) -> None:
    # The append path checks a batch's ids against the stored bytes. A payload that holds
    # the packed bytes of a later id is a false alarm; a real repeat replaces the record.
    key = timeline_key(tag(namespace), "t")
    lookalike = b"\xa2r9"  # msgpack for the string "r9"
    redis_store.add(0, [NewRecord("t", "r1", T0 + 1, b"a" + lookalike, 0)], T0)
    redis_store.add(0, [NewRecord("t", "r9", T0 + 9, b"new", 1)], T0)  # a false alarm
    redis_store.add(0, [NewRecord("t", "r1", T0 + 2, b"replaced", 2)], T0)  # a repeat
    redis_store.add(
        0, [NewRecord("t", "r5", T0 + 5, b"first", 3), NewRecord("t", "r5", T0 + 6, b"x", 4)], T0
    )  # the same id twice in one batch: the later one wins
    assert client.type(key) == b"list"
    assert redis_store.inspect(0, "t").pending == 3
    digest = redis_store.open(0, "t", new_id(), T0)
    assert [(r.id, r.payload) for r in digest.records] == [
        ("r9", b"new"),
        ("r5", b"x"),
        ("r1", b"replaced"),
    ]
    assert digest.dropped == 0


def test_closing_keeps_the_pending_records_and_the_ttl_of_an_inline_timeline(
    redis_store: RedisStore, client: RedisClient, namespace: str
) -> None:
    key = timeline_key(tag(namespace), "t")
    redis_store.add(0, records("t", 1), T0)
    digest = redis_store.open(0, "t", new_id(), T0)
    redis_store.add(0, records("t", 3, first_offset=1)[1:], T0)  # r1, r2 arrive meanwhile
    assert redis_store.close(0, "t", digest.id, T0 + 1)  # rewrites the meta in front
    assert client.pttl(key) > 0
    assert redis_store.inspect(0, "t").last_delivery == T0 + 1
    assert redis_store.inspect(0, "t").pending == 2
    redis_store.schedule(0, T0 + 100_000)
    assert [r.id for r in redis_store.open(0, "t", new_id(), T0 + 99).records] == ["r2", "r1"]


@pytest.mark.parametrize("inline_records", [0, 16])
def test_a_close_of_another_id_leaves_the_open_digest_and_its_ttl(
    make_redis_store: Callable[..., RedisStore],
    client: RedisClient,
    namespace: str,
    inline_records: int,
) -> None:
    """The close reads the digest's first bytes (an inline one) or answers WRONGTYPE (a hash
    one): either way another id writes nothing, and that id's close still works."""
    store = make_redis_store(inline_records=inline_records)
    key = digest_key(tag(namespace), "t")
    store.add(0, records("t", 2), T0)
    digest = store.open(0, "t", new_id(), T0)
    assert client.type(key) == (b"hash" if inline_records == 0 else b"string")
    client.pexpire(key, 10_000_000)  # a TTL no call of the test sets
    before = client.dump(key)
    assert not store.close(0, "t", new_id(), T0 + 1)
    assert store.close_many([(0, "t", new_id())], T0 + 1) == [False]
    assert client.dump(key) == before
    assert 9_000_000 < client.pttl(key) <= 10_000_000
    assert store.inspect(0, "t").state == "ready"
    assert store.close(0, "t", digest.id, T0 + 1)
    assert (store.inspect(0, "t").state, client.exists(key)) == ("cooling", 0)


def _with_meta(blob: bytes, meta: bytes) -> bytes:
    """An inline container's value with another meta in front of the same records (its meta
    is a str8: every digest meta is 32 to 255 bytes)."""
    assert blob[0] == 0xD9
    return bytes([0xD9, len(meta)]) + meta + blob[2 + blob[1] :]


@pytest.mark.parametrize("records_field", [b"1", b"01", b"00", b"0", b""])
def test_a_close_reads_a_digest_meta_of_any_length(
    redis_store: RedisStore, client: RedisClient, namespace: str, records_field: bytes
) -> None:
    """A meta longer than the bytes a close reads first (a long time field), or a count that
    is not the usual one, is read whole: the close decides exactly as before."""
    led = redis_store.add(0, records("t", 1), T0, open_nonce="a" * 24).opened[0]
    # its reopen leaves it the ordinary open digest (a leading one may be in batch form)
    assert redis_store.open(0, "t", new_id(), T0).id == led.id
    key = digest_key(tag(namespace), "t")
    long_time = b"1000000." + b"0" * 120
    meta = b"|".join([led.id.encode(), long_time, b"0", records_field, b"", b"", b"I"])
    blob = client.get(key)
    assert isinstance(blob, bytes)
    client.set(key, _with_meta(blob, meta), px=1_000_000)
    assert not redis_store.close(0, "t", new_id(), T0 + 1)
    assert client.exists(key) == 1
    assert redis_store.close(0, "t", led.id, T0 + 1)
    info = redis_store.inspect(0, "t")
    if records_field.strip(b"0"):
        assert (info.state, info.last_delivery) == ("cooling", T0 + 1)  # it held records
    else:
        assert info.state == "absent"  # an empty digest retires the timeline


@pytest.mark.parametrize("inline_records", [0, 16])
def test_capacity_in_either_encoding(
    make_redis_store: Callable[..., RedisStore], inline_records: int
) -> None:
    store = make_redis_store(TimelinePolicy(capacity=5), inline_records=inline_records)
    result = store.add(0, records("t", 12), T0)
    assert (result.added, result.dropped) == (12, 7)
    digest = store.open(0, "t", new_id(), T0)
    assert [r.id for r in digest.records] == ["r11", "r10", "r9", "r8", "r7"]
    assert digest.dropped == 7


def test_inline_limit_is_checked(client: RedisClient) -> None:
    for bad in (-1, 129, True):
        with pytest.raises(InvalidArgument):
            RedisStore(client, inline_records=bad)


def test_one_function_call_per_batch(
    redis_store: RedisStore, client: RedisClient, namespace: str
) -> None:
    node = client.get_node_from_key(tag(namespace)) if isinstance(client, RedisCluster) else None

    def fcalls() -> int:
        if isinstance(client, RedisCluster):
            info = client.info("commandstats", target_nodes=node)
        else:
            info = client.info("commandstats")
        return int(info.get("cmdstat_fcall", {}).get("calls", 0))

    batch = [NewRecord(f"tl-{i % 25}", f"r{i}", T0 + i, b"x" * 50, i) for i in range(1_000)]
    before = fcalls()
    result = redis_store.add(0, batch, T0)
    assert fcalls() - before == 1
    assert (result.added, len(result.ready)) == (1_000, 25)


def test_version_mismatch_is_reported(
    make_redis_store: Callable[..., RedisStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_redis_store()  # the real library is loaded
    monkeypatch.setattr(library, "VERSION", "0-other")
    with pytest.raises(LibraryVersionMismatch, match=r"is version .* needs version 0-other"):
        make_redis_store(load_library=False)


def test_library_replaced_by_another_tenant_is_refused(
    make_redis_store: Callable[..., RedisStore], client: RedisClient
) -> None:
    # Any user with FUNCTION LOAD can replace the server-wide library with one whose
    # ds_version answers the expected number; only its code gives it away (issue 12, item 12).
    tampered = library.SOURCE + "\n-- not the shipped code\n"
    try:
        for node in routing.primaries(client):
            routing.on_node(client, node, "FUNCTION", "LOAD", "REPLACE", tampered)
        with pytest.raises(LibraryVersionMismatch, match=r"says version .* code is not"):
            make_redis_store(load_library=False)
    finally:
        make_redis_store()  # the shipped library again, for everybody
    make_redis_store(load_library=False)


def test_library_lost_by_the_server_is_loaded_again(redis_client: redis.Redis) -> None:
    store = RedisStore(redis_client, namespace="reload-check")
    redis_client.execute_command("FUNCTION", "DELETE", "digest_stream")  # a restart, say
    assert store.applied_offset(0) is None  # "Function not found" -> load, retry once
    assert redis_client.execute_command("FCALL_RO", "ds_version", 0) == library.VERSION.encode()


def test_loaded_library_passes_the_check(make_redis_store: Callable[..., RedisStore]) -> None:
    make_redis_store()
    store = make_redis_store(load_library=False)
    assert store.applied_offset(0) is None


def test_library_is_on_every_primary(redis_store: RedisStore, client: RedisClient) -> None:
    if isinstance(client, RedisCluster):
        nodes = client.get_primaries()
        assert len(nodes) == 3
        versions = {
            node.name: client.execute_command("FCALL_RO", "ds_version", 0, target_nodes=node)
            for node in nodes
        }
    else:
        versions = {"single": client.execute_command("FCALL_RO", "ds_version", 0)}
    assert set(versions.values()) == {library.VERSION.encode()}


def test_decoding_client_is_refused(redis_url: str) -> None:
    decoding = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        with pytest.raises(InvalidArgument, match="decode"):
            RedisStore(decoding)
    finally:
        decoding.close()


@pytest.mark.cluster
def test_partitions_spread_over_cluster_masters(
    redis_cluster: RedisCluster, namespace: str
) -> None:
    store = RedisStore(redis_cluster, namespace=namespace)
    owner = {
        p: redis_cluster.get_node_from_key(partition_tag(namespace, p)).name for p in range(12)
    }
    assert len(set(owner.values())) == 3, owner
    for p in owner:
        store.add(p, [NewRecord("t", "a", T0, b"%d" % p, 1)], T0)
    for p, node_name in owner.items():
        # The partition's keys live on its master and nowhere else.
        for node in redis_cluster.get_primaries():
            pattern = f"{partition_tag(namespace, p)}*"
            found = list(redis_cluster.scan_iter(match=pattern, target_nodes=node))
            assert bool(found) is (node.name == node_name), (p, node.name)
        digest = store.open(p, "t", new_id(), T0)
        assert digest.records[0].payload == b"%d" % p
        assert store.close(p, "t", digest.id, T0)
        assert store.inspect(p, "t").state == "cooling"
        store.add(p, [NewRecord("t", "b", T0, b"%d" % p, 2)], T0)  # in its cool-down: it waits
    assert sum(store.stats(p).waiting for p in owner) == 12


def test_key_helpers_match_lua(
    redis_store: RedisStore, client: RedisClient, namespace: str
) -> None:
    # The Lua guard refuses any key list that its own helpers would not build.
    t = tag(namespace, 3)
    good = [waiting_key(t), ready_key(t), fence_key(t)]
    assert len(raw(client, "FCALL_RO", "ds_stats", good)) == 4
    with pytest.raises(redis.ResponseError, match="invalid_argument: KEYS"):
        raw(client, "FCALL_RO", "ds_stats", [waiting_key(t), fence_key(t), ready_key(t)])


def _waiting(store: RedisStore, timelines: list[str]) -> None:
    """Each timeline WAITING, due T0 + 300: a record behind a digest closed at T0."""
    for offset, timeline in enumerate(timelines):
        store.add(0, records(timeline, 1, first_offset=2 * offset), T0)
        digest = store.open(0, timeline, new_id(), T0)
        store.add(0, records(timeline, 1, first_offset=2 * offset + 1), T0)
        assert store.close(0, timeline, digest.id, T0)


def test_a_schedule_whose_reply_is_lost_answers_its_moves_to_redis_pys_re_send(
    redis_proxy: TcpProxy, namespace: str
) -> None:
    # Issue 36 (g): the proxy forwards the ds_schedule and drops Redis's reply; redis-py's
    # retry (a client built with its defaults: 10 retries on a timeout or a broken
    # connection; the clients the service builds have none, see
    # tests/integration/roles/test_scheduler_lost_reply.py) sends the very same FCALL again.
    # That re-run found both timelines READY already and named neither: unannounced until
    # maintenance (~330 s).
    client = redis.Redis(host="127.0.0.1", port=redis_proxy.port, socket_timeout=1)
    retry = client.get_retry()
    assert retry is not None
    assert retry.get_retries() > 0
    try:
        store = RedisStore(client, namespace=namespace)
        _waiting(store, ["a", "b"])
        redis_proxy.lose_reply_to(b"ds_schedule")
        due = store.schedule(0, T0 + 300)
        assert redis_proxy.replies_lost == 1
        assert [d.timeline for d in due] == ["a", "b"]
        assert store.stats(0).ready == 2
    finally:
        client.close()


def test_the_last_schedule_reply_is_kept_only_for_a_re_send(
    redis_store: RedisStore, client: RedisClient, namespace: str
) -> None:
    memo = moved_key(tag(namespace))
    assert redis_store.schedule(0, T0 + 300) == []
    assert client.exists(memo) == 0  # nothing moved: nothing to answer again
    _waiting(redis_store, ["a"])
    assert [d.timeline for d in redis_store.schedule(0, T0 + 300)] == ["a"]
    assert (SCHEDULE_REPLY_TTL - 1) * 1000 < int(client.pttl(memo)) <= SCHEDULE_REPLY_TTL * 1000
