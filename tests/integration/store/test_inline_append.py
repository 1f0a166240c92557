"""The inline container's append: a batch of new records is appended to the stored container,
never read back or rewritten whole, and every semantic of the store holds as if the container
had been decoded and rewritten (docs/store.md, "record container"). Since library 33 an
inline container is a list (its meta, then one element per entry); one a library up to 32
wrote, a string of the same bytes, is still read and appended to."""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Callable, Sequence

import pytest

from digest_stream.store import DigestStore, MemoryStore, NewRecord, TimelinePolicy
from digest_stream.store.redis import RedisStore
from digest_stream.store.redis.keys import partition_tag, timeline_key, waiting_key
from tests.support import new_id
from tests.support.store import RedisClient

T0 = 1_000_000.0


def msgpack_str(value: bytes) -> bytes:
    """A msgpack string (fixstr, str8 or str16), as cmsgpack writes it."""
    if len(value) < 32:
        return bytes([0xA0 + len(value)]) + value
    if len(value) <= 0xFF:
        return bytes([0xD9, len(value)]) + value
    return struct.pack(">BH", 0xDA, len(value)) + value


def entry(record_id: str, timestamp: float, payload: bytes) -> bytes:
    """One record of an inline container: id, timestamp (a double), payload."""
    return (
        msgpack_str(record_id.encode()) + struct.pack(">Bd", 0xCB, timestamp) + msgpack_str(payload)
    )


def record(
    record_id: str, offset: int, payload: bytes | None = None, timeline: str = "t"
) -> NewRecord:
    """A record at T0 + offset + 0.1 (cmsgpack writes it as a double), at offset
    `offset`, its payload its id unless given."""
    return NewRecord(timeline, record_id, at(offset), payload or record_id.encode(), offset)


def at(offset: int) -> float:
    return T0 + offset + 0.1


def stored(client: RedisClient, key: str) -> bytes:
    """An inline container as the one string it stands for (b"" when missing): a string's
    value, or a list's meta (its count: the list's entries, as the library reads it) packed
    and followed by its elements; the client never decodes."""
    if client.type(key) == b"list":
        elements = [element for element in client.lrange(key, 0, -1) if isinstance(element, bytes)]
        meta = re.sub(rb"^\d+", b"%03d" % (len(elements) - 1), elements[0], count=1)
        return msgpack_str(meta) + b"".join(elements[1:])
    value = client.get(key)
    assert not isinstance(value, str)
    return value or b""


def key_of(namespace: str, timeline: str = "t") -> str:
    return timeline_key(partition_tag(namespace, 0), timeline)


def add_each(stores: Sequence[DigestStore], records: Sequence[NewRecord], now: float) -> None:
    """Adds the records one call each (interleaved traffic), to every store."""
    for item in records:
        for store in stores:
            store.add(0, [item], now)


#: Payload sizes: a first record shorter than the 64 bytes an add reads of a string and a
#: longer one (each pushed to the list the first add made).
SIZES = pytest.mark.parametrize("size", [2, 100])


@SIZES
def test_an_append_pushes_its_entry_and_rewrites_nothing(
    redis_store: RedisStore, client: RedisClient, namespace: str, size: int
) -> None:
    key = key_of(namespace)
    redis_store.add(0, [record("r0", 0, b"0" * size)], T0)
    one = stored(client, key)
    assert client.type(key) == b"string"  # one record: a string, a list's size for it is more
    assert one.startswith(msgpack_str(b"001|0|"))  # the count is three digits wide
    redis_store.add(0, [record("r1", 1, b"1" * size)], T0)
    before = stored(client, key)
    # the string read once and written again as a list: its meta, then one entry each
    assert client.type(key) == b"list"
    assert before == one.replace(b"001|", b"002|", 1) + entry("r1", at(1), b"1" * size)
    elements = client.lrange(key, 0, -1)
    redis_store.add(0, [record("r2", 2, b"2" * size)], T0)
    after = stored(client, key)
    assert after == before.replace(b"002|", b"003|", 1) + entry("r2", at(2), b"2" * size)
    # one element pushed, the others as they were (the meta is not rewritten); TTL kept, and
    # the list no larger than the same elements pushed whole
    assert client.lrange(key, 0, -1) == [*elements, entry("r2", at(2), b"2" * size)]
    assert client.pttl(key) > 0
    scratch = key + ":scratch"
    client.rpush(scratch, *client.lrange(key, 0, -1))
    try:
        assert int(client.memory_usage(key) or 0) <= int(client.memory_usage(scratch) or 0)
    finally:
        client.delete(scratch)


def test_appended_values_take_no_more_memory_than_written_ones(
    make_redis_store: Callable[..., RedisStore], client: RedisClient, namespace: str
) -> None:
    # One record per call (the catch-up's interleaved shape) against the same records in one
    # call: the appended value is exactly as large as the one written whole. (Both inline: a
    # timeline's limit is at least three quarters of inline_records.)
    redis_store = make_redis_store(inline_records=32)
    payload = b"x" * 200
    add_each([redis_store], [record(f"r{i:02d}", i, payload) for i in range(12)], T0)
    redis_store.add(0, [record(f"r{i:02d}", 12 + i, payload, "whole") for i in range(12)], T0)
    appended = int(client.memory_usage(key_of(namespace)) or 0)
    whole = int(client.memory_usage(key_of(namespace, "whole")) or 0)
    assert len(stored(client, key_of(namespace))) == len(stored(client, key_of(namespace, "whole")))
    assert appended <= whole


@SIZES
def test_a_repeated_id_supersedes_its_earlier_entry(
    redis_store: RedisStore, client: RedisClient, namespace: str, size: int
) -> None:
    key = key_of(namespace)
    old, new, other = b"o" * size, b"n" * size, b"x" * size
    add_each(
        [redis_store], [record("r1", 1, old), record("r2", 2, other), record("r1", 3, new)], T0
    )
    blob = stored(client, key)
    assert blob.startswith(msgpack_str(b"003|0|"))  # entries, the superseded one included
    assert entry("r1", at(1), old) in blob
    assert entry("r1", at(3), new) in blob
    assert redis_store.inspect(0, "t").pending == 2
    digest = redis_store.open(0, "t", new_id(), T0)
    assert [(r.id, r.timestamp, r.payload) for r in digest.records] == [
        ("r1", at(3), new),
        ("r2", at(2), other),
    ]
    assert digest.dropped == 0  # a superseded entry is neither lost nor dropped


def test_superseded_entries_do_not_count_against_capacity(
    make_redis_store: Callable[..., RedisStore],
) -> None:
    # capacity 3: r1, r2, r1 again are 3 entries but 2 records, so r3 fits without a drop;
    # r4 then trims the oldest (r2), and appends after that trim keep the same semantics.
    policy = TimelinePolicy(capacity=3)
    stores: list[DigestStore] = [make_redis_store(policy), MemoryStore(policy=policy)]
    add_each(stores, [record("r1", 1), record("r2", 2), record("r1", 3), record("r3", 4)], T0)
    assert [store.inspect(0, "t").pending for store in stores] == [3, 3]
    results = [store.add(0, [record("r4", 5)], T0) for store in stores]
    assert [result.dropped for result in results] == [1, 1]
    add_each(stores, [record("r5", 6), record("r4", 7, b"again"), record("r6", 8)], T0)
    digests = [store.open(0, "t", new_id(), T0) for store in stores]
    assert digests[0].records == digests[1].records
    assert [(r.id, r.payload) for r in digests[0].records] == [
        ("r6", b"r6"),
        ("r4", b"again"),
        ("r5", b"r5"),
    ]
    assert digests[0].dropped == digests[1].dropped == 3  # r2, then r1 and r3


def test_flush_at_counts_records_not_entries(
    make_redis_store: Callable[..., RedisStore],
) -> None:
    # A cooling-down timeline with flush_at=3 is due early once it holds 3 records: one id
    # sent three times is one record, on the add (WAITING) and on the close (records behind
    # an open digest) alike.
    policy = TimelinePolicy(minimum_delay=60, increment_delay=0, maximum_delay=600, flush_at=3)
    stores: list[DigestStore] = [make_redis_store(policy), MemoryStore(policy=policy)]
    for store in stores:
        store.add(0, [record("first", 0)], T0)
        store.close(0, "t", store.open(0, "t", "a" * 32, T0).id, T0)  # cooling down
    add_each(stores, [record("r1", 1), record("r1", 2), record("r1", 3)], T0 + 10)
    views = [store.inspect(0, "t") for store in stores]
    assert views[0] == views[1]
    assert views[0].due == T0 + 60  # not pulled forward: one record
    add_each(stores, [record("r2", 4), record("r3", 5)], T0 + 20)
    views = [store.inspect(0, "t") for store in stores]
    assert views[0] == views[1]
    assert views[0].due == T0 + 20  # three records: due now
    for store in stores:
        store.schedule(0, T0 + 20)
        digest = store.open(0, "t", "b" * 32, T0 + 20)
        assert len(digest.records) == 3
        # behind the open digest: one id three times, then the close
        add_each([store], [record("r9", 6), record("r9", 7), record("r9", 8)], T0 + 21)
        assert store.close(0, "t", digest.id, T0 + 22)
    views = [store.inspect(0, "t") for store in stores]
    assert views[0] == views[1]
    assert views[0].due == T0 + 22 + 60  # a cool-down: one record is not flush_at


def test_a_large_timeline_appends_up_to_its_limits_then_becomes_a_hash(
    make_redis_store: Callable[..., RedisStore], client: RedisClient, namespace: str
) -> None:
    # The largest inline limit (128 records) with small payloads: appends up to the
    # timeline's own limit (96 to 128, fixed by its key), then the next record makes it a
    # hash; with larger payloads the value's 8 KiB come first.
    store = make_redis_store(TimelinePolicy(capacity=None), inline_records=128)
    count = 0
    while client.type(key_of(namespace)) != b"hash":
        assert count <= 128, "still inline past inline_records"
        if count:
            assert stored(client, key_of(namespace)).startswith(msgpack_str(b"%03d|0|" % count))
        store.add(0, [record(f"r{count:03d}", count, b"p")], T0)
        count += 1
    assert 96 <= count - 1 <= 128  # its limit
    digest = store.open(0, "t", new_id(), T0)
    assert [r.id for r in digest.records] == [f"r{i:03d}" for i in reversed(range(count))]
    assert digest.dropped == 0

    big = [record(f"b{i:02d}", 200 + i, b"x" * 300, "big") for i in range(40)]
    add_each([store], big, T0)
    assert client.type(key_of(namespace, "big")) == b"hash"  # past 8 KiB, long before 128
    assert store.inspect(0, "big").pending == 40
    digest = store.open(0, "big", new_id(), T0)
    assert [r.id for r in digest.records] == [r.id for r in reversed(big)]
    assert digest.dropped == 0


def test_a_container_written_by_an_earlier_library_is_read_and_appended_to(
    redis_store: RedisStore, client: RedisClient, namespace: str
) -> None:
    # Before the count was padded: "2|0|" and its two records. An append cannot rewrite that
    # count in place, so the first add decodes and rewrites the container once.
    key = key_of(namespace)
    old = msgpack_str(b"2|0|") + entry("r0", at(0), b"p0") + entry("r1", at(1), b"p1")
    client.set(key, old, px=3_600_000)
    redis_store.add(0, [record("r2", 2)], T0)
    blob = stored(client, key)
    assert blob.startswith(msgpack_str(b"003|0|"))
    redis_store.add(0, [record("r3", 3)], T0)  # now an append
    assert stored(client, key).startswith(msgpack_str(b"004|0|") + blob[7:])
    digest = redis_store.open(0, "t", uuid.uuid4().hex, T0)
    assert [r.id for r in digest.records] == ["r3", "r2", "r1", "r0"]
    assert digest.dropped == 0


@pytest.mark.parametrize(
    ("meta", "rewritten"),
    [
        (b"004|2|", b"005|2|"),
        (b"004|2|1000000.5", b"005|2|1000000.5"),
        (b"004|2|1000000.5||c", b"005|2|1000000.5||c"),
        (b"004|2||1", b"005|2||1"),
        (b"004|2||o|c", b"005|2||o|c"),
        (b"004|2|1000000.5|", b"005|2|1000000.5"),  # an empty mark is no mark
        (b"004|2|1000000.5|1|c|more", b"005|2|1000000.5|1|c"),  # fields past the cause
        (b"4|2|", b"005|2|"),  # unpadded: decoded and rewritten whole
        (b"x|y|", b"001|0|"),  # unreadable counts read as 0
    ],
)
def test_every_field_of_a_meta_is_read_back(
    redis_store: RedisStore, client: RedisClient, namespace: str, meta: bytes, rewritten: bytes
) -> None:
    # A value holding only its meta (what the leading edge leaves) is read whole, and its meta
    # parsed and written again with the one more record: each field comes back as it was read.
    key = key_of(namespace)
    client.set(key, msgpack_str(meta), px=3_600_000)
    redis_store.add(0, [record("r0", 0)], T0)
    assert stored(client, key) == msgpack_str(rewritten) + entry("r0", at(0), b"r0")


def test_a_string_library_32_appended_to_becomes_a_list_at_its_next_append(
    make_redis_store: Callable[..., RedisStore], client: RedisClient, namespace: str
) -> None:
    # Library 32 appended to one string: "003|0|" and three records. The next record (one per
    # call: the interleaved lane refuses the string and the state machine takes it) reads it
    # once and writes a list of the four; the one after is pushed.
    store = make_redis_store()
    key = key_of(namespace)
    held = [entry(f"r{i}", at(i), b"p%d" % i) for i in range(3)]
    client.set(key, msgpack_str(b"003|0|") + b"".join(held), px=3_600_000)
    client.zadd(waiting_key(partition_tag(namespace, 0)), {"t": T0 + 600})  # WAITING
    store.add(0, [record("r3", 3)], T0)
    assert client.type(key) == b"list"
    assert client.lrange(key, 1, -1) == [*held, entry("r3", at(3), b"r3")]
    store.add(0, [record("r4", 4)], T0)
    assert client.llen(key) == 6
    assert store.inspect(0, "t").pending == 5
    store.schedule(0, T0 + 10_000)
    digest = store.open(0, "t", new_id(), T0 + 10_000)
    assert [r.id for r in digest.records] == ["r4", "r3", "r2", "r1", "r0"]
    assert digest.dropped == 0
