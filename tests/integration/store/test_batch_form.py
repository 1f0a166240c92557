"""The leading edge's batch form in Redis (docs/store.md, *The leading edge's batch form*): what
only the keys show (one key per leading add, no write per timeline at its close), and the
parts the model has no counterpart of: the index's generations and a batch lost while open.
Behaviour against the model is test_stateful.py's (its close_leading rule)."""

from __future__ import annotations

from collections.abc import Callable

from digest_stream.store import NewRecord, TimelinePolicy
from digest_stream.store.base import leading_id, new_nonce
from digest_stream.store.limits import INDEX_ROTATE_AFTER
from digest_stream.store.redis import RedisStore
from digest_stream.store.redis.keys import partition_tag
from digest_stream.store.redis.protocol import KEY_SUFFIXES
from tests.support import new_id
from tests.support.store import RedisClient

T0 = 1_700_000_000.0
KeysOf = Callable[[int], set[bytes]]


def rec(timeline: str, offset: int) -> NewRecord:
    return NewRecord(timeline, f"r{offset}", T0, b"p", offset)


def key(namespace: str, kind: str, nonce: str = "") -> str:
    """A partition-0 key of the batch form's ``kind`` (KEY_SUFFIXES), a batch's by its nonce."""
    name = f"{partition_tag(namespace, 0)}:{KEY_SUFFIXES[kind]}"
    return f"{name}:{nonce}" if nonce else name


def test_one_key_holds_a_leading_adds_digests_and_one_write_closes_them(
    redis_store: RedisStore, keys_of: KeysOf, namespace: str
) -> None:
    nonce = new_nonce()
    result = redis_store.add(0, [rec(f"t{i}", i) for i in range(50)], T0, open_nonce=nonce)
    # the ids the caller could make before the reply: the nonce and each timeline's number
    assert [d.id for d in result.opened] == [leading_id(nonce, k) for k in range(1, 51)]
    tag = partition_tag(namespace, 0).encode()
    written = keys_of(0)
    assert key(namespace, "batch", nonce).encode() in written
    assert not [k for k in written if k.startswith(tag + b":d:") or k.startswith(tag + b":t:")]
    assert redis_store.stats(0).ready == 50  # READY by their index entries
    targets = [(0, d.timeline, d.id) for d in result.opened]
    assert redis_store.close_leading(nonce, targets, T0 + 1) == [True] * 50
    info = redis_store.inspect(0, "t7")
    assert (info.state, info.last_delivery, info.reason) == ("cooling", T0 + 1, "COOLDOWN")
    # cooling with no key of its own: nothing was written per timeline
    assert keys_of(0) - written <= {key(namespace, "batch_digests", nonce).encode()}
    assert redis_store.stats(0).ready == 0


def test_the_index_rotates_and_drops_a_generation_once_its_batches_are_gone(
    make_redis_store: Callable[..., RedisStore], client: RedisClient, namespace: str
) -> None:
    store = make_redis_store(TimelinePolicy(minimum_delay=30, maximum_delay=60, ttl=120))
    first = new_nonce()
    (digest,) = store.add(0, [rec("a", 0)], T0, open_nonce=first).opened
    assert store.close_leading(first, [(0, "a", digest.id)], T0 + 1) == [True]
    index, previous = key(namespace, "index"), key(namespace, "previous_index")
    store.maintenance(0, T0, T0 + INDEX_ROTATE_AFTER - 1)
    assert (client.exists(index), client.exists(previous)) == (1, 0)  # too young to rotate
    store.maintenance(0, T0, T0 + INDEX_ROTATE_AFTER)
    assert (client.exists(index), client.exists(previous)) == (0, 1)
    # an entry of the previous generation still answers: "a" cools down from its close
    assert store.inspect(0, "a").state == "cooling"
    later = new_nonce()
    assert store.add(0, [rec("b", 1)], T0 + 62, open_nonce=later).opened != []
    assert client.hexists(index, "b")
    # past the last batch's TTL (the add at T0 + 120 s), the previous generation goes, and
    # the current one (old enough) becomes the previous; "b"'s batch is not taken over
    # (opened after the deadline)
    store.maintenance(0, T0 + 61, T0 + 200)
    assert (client.exists(index), client.hexists(previous, "a"), client.hexists(previous, "b")) == (
        0, False, True
    )  # fmt: skip
    assert store.inspect(0, "b").open_digest == leading_id(later, 1)


def test_a_batch_lost_while_open_reports_its_records_expired(
    redis_store: RedisStore, client: RedisClient, namespace: str
) -> None:
    nonce = new_nonce()
    redis_store.add(0, [rec("a", 0), rec("b", 1)], T0, open_nonce=nonce)
    client.delete(key(namespace, "batch", nonce))  # evicted, or its TTL ran out
    moved = redis_store.maintenance(0, T0 + 1000, T0 + 1000)
    assert {d.timeline for d in moved} == {"a", "b"}  # re-announced as READY since the add
    assert {d.timeline for d in redis_store.schedule(0, T0 + 1000)} == {"a", "b"}
    reopened = redis_store.open(0, "a", new_id(), T0 + 1001)
    assert (reopened.records, reopened.expired) == ([], True)
    assert not client.exists(key(namespace, "batches"))  # nothing left listed open


def test_a_timeline_deleted_while_its_batch_is_open_is_not_reported_closed(
    redis_store: RedisStore,
) -> None:
    # The model's answer (test_stateful found the difference): a digest that is gone is not
    # closed, whether the batch's one write closes the others or not.
    for round_, targets_kept in enumerate((slice(None), slice(1, 2))):
        nonce = new_nonce()
        names = [f"d{i}-{new_id()[:6]}" for i in range(3)]
        records = [rec(name, 3 * round_ + i) for i, name in enumerate(names)]
        result = redis_store.add(0, records, T0, open_nonce=nonce)
        assert [d.timeline for d in result.opened] == names
        assert redis_store.delete(0, names[1])
        targets = [(0, d.timeline, d.id) for d in result.opened][targets_kept]
        closed = redis_store.close_leading(nonce, targets, T0 + 1)
        assert closed == [timeline != names[1] for _, timeline, _ in targets]
        assert redis_store.inspect(0, names[1]).state == "absent"
