"""Bad arguments are refused: in Python before any call, and by the Lua guard on its own."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import redis

from digest_stream.store import (
    DigestStore,
    InvalidArgument,
    NewRecord,
    TimelinePolicy,
)
from digest_stream.store.base import CONTROLS
from digest_stream.store.policy import PACKED
from digest_stream.store.redis import RedisStore, protocol
from digest_stream.store.redis.keys import (
    digest_key,
    fence_key,
    partition_tag,
    ready_key,
    timeline_key,
    waiting_key,
)
from digest_stream.store.redis.policy_wire import pack
from tests.support.store import RedisClient, StoreFactory, raw, tag_keys

T0 = 1_000_000.0
GOOD_ID = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"minimum_delay": -1},
        {"increment_delay": -0.5},
        {"maximum_delay": -1, "ttl": 10},
        {"maximum_delay": 100, "ttl": 100},
        {"maximum_delay": 100, "ttl": 50},
        {"capacity": 0},
        {"capacity": -3},
    ],
)
def test_policy_is_checked(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        TimelinePolicy(**kwargs)


@pytest.mark.parametrize("value", [math.nan, math.inf, "300", True])
def test_a_policy_of_non_finite_or_mistyped_values_cannot_be_made(value: object) -> None:
    # so no store, resolver or packer ever holds one (each option checked on construction)
    with pytest.raises(InvalidArgument, match="increment_delay"):
        TimelinePolicy(increment_delay=value)  # type: ignore[arg-type]


def test_resolver_must_return_a_policy(make_store: StoreFactory) -> None:
    store = make_store(resolver=lambda _: "not a policy")
    with pytest.raises(InvalidArgument, match="TimelinePolicy"):
        store.add(0, [NewRecord("t", "a", T0, b"", 0)], T0)


BAD_RECORDS = [
    NewRecord("", "a", T0, b"", 0),
    NewRecord("t", "", T0, b"", 0),
    NewRecord("t", "x" * 1025, T0, b"", 0),
    NewRecord("t", "\ud800", T0, b"", 0),
    NewRecord("t", "a", -1.0, b"", 0),
    NewRecord("t", "a", math.nan, b"", 0),
    NewRecord("t", "a", T0, b"", -1),
    NewRecord("t", "a", T0, b"", 2**53 + 1),
    NewRecord("t", "a", T0, "text", 0),  # type: ignore[arg-type]
]


# RedisStore checks ASCII names inline and hands anything else to the full check: a bad
# record must be refused behind a good record of either kind.
@pytest.mark.parametrize("lead", ["t", "tö"])
@pytest.mark.parametrize("bad", BAD_RECORDS, ids=range(len(BAD_RECORDS)))
def test_bad_records_refuse_the_whole_batch(store: DigestStore, bad: NewRecord, lead: str) -> None:
    good = NewRecord(lead, "ok", T0, b"", 0)
    with pytest.raises(InvalidArgument):
        store.add(0, [good, bad], T0)
    assert store.inspect(0, "t").pending == 0
    assert store.inspect(0, lead).pending == 0
    assert store.applied_offset(0) is None


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.add(-1, [], T0),
        lambda s: s.add(0, [], -5.0),
        lambda s: s.schedule(0, math.inf),
        lambda s: s.maintenance(0, -1.0, T0),
        lambda s: s.open(0, "t", "not-hex", T0),
        lambda s: s.open(0, "t", GOOD_ID.upper(), T0),
        lambda s: s.open(0, "t", GOOD_ID[:-1], T0),
        lambda s: s.close(0, "t", GOOD_ID + "0", T0),
        lambda s: s.close(0, "", GOOD_ID, T0),
        lambda s: s.delete(0, ""),
        lambda s: s.inspect(True, "t"),
        lambda s: s.set_applied_offset(0, -1),
    ],
)
def test_bad_arguments_are_refused(store: DigestStore, call: Callable[[DigestStore], Any]) -> None:
    with pytest.raises(InvalidArgument):
        call(store)


def test_bad_namespace_is_refused(client: RedisClient) -> None:
    for namespace in ("", "a}b", "a:b", "a b", "{x"):
        with pytest.raises(InvalidArgument):
            RedisStore(client, namespace=namespace)


# ------------------------------------------------------------------ the Lua guard, hit directly


@pytest.fixture
def tag(namespace: str, redis_store: RedisStore) -> str:
    return partition_tag(namespace, 0)  # redis_store loaded the library


def add_keys(t: str) -> list[str]:
    return [fence_key(t), waiting_key(t), ready_key(t)]


def policy_args(**fields: object) -> list[object]:
    """A packed policy (policy_wire.pack of the default policy) with some fields replaced."""
    packed = dict(zip((spec.name for spec in PACKED), pack(TimelinePolicy(), T0), strict=True))
    unknown = set(fields) - set(packed)
    assert not unknown, f"not packed options: {unknown}"
    return list({**packed, **fields}.values())


def packed_timelines(*timelines: tuple[int, str]) -> bytes:
    """ds_add's packed timelines: (policy index, name) each (protocol.TIMELINE)."""
    return b"".join(protocol.TIMELINE.pack(*timeline) for timeline in timelines)


def packed_records(*records: tuple[int, str, float, float, bytes]) -> bytes:
    """ds_add's packed records: (timeline index, id, timestamp, offset, payload) each."""
    return b"".join(protocol.RECORD.pack(*record) for record in records)


ONE_TIMELINE = packed_timelines((1, "t"))


def packed_targets(*targets: tuple[int, str, str]) -> bytes:
    """ds_open_many's and ds_close_many's packed targets: (policy index, timeline, digest id)
    each (protocol.TARGET)."""
    return b"".join(protocol.TARGET.pack(*target) for target in targets)


def guard(client: RedisClient, function: str, call_keys: list[str], *args: object) -> str:
    """The error message of a raw FCALL that the guard must refuse."""
    with pytest.raises(redis.ResponseError) as caught:
        raw(client, "FCALL", function, call_keys, *args)
    return str(caught.value)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (policy_args(minimum_delay=-1), "minimum_delay must be >= 0"),
        (policy_args(increment_delay=-1), "increment_delay must be >= 0"),
        (policy_args(maximum_delay=-1), "maximum_delay must be >= 0"),
        (policy_args(ttl=1800), "must exceed maximum_delay"),
        (policy_args(ttl=100), "must exceed maximum_delay"),
        # issue 36 (f): every rule across options, as TimelinePolicy's declaration makes them
        (
            policy_args(minimum_delay=5000, maximum_delay=1800),
            "minimum_delay (5000) must not exceed maximum_delay (1800)",
        ),
        (policy_args(flush_at=20000, capacity=10000), "flush_at (20000) must not exceed capacity"),
        (policy_args(capacity=-1), "capacity must be an integer"),
        (policy_args(capacity=1.5), "capacity must be an integer"),
        (policy_args(increment_delay="inf"), "must be a finite number"),
        (policy_args(minimum_delay="nan"), "must be a finite number"),
        (policy_args(minimum_delay="soon"), "must be a finite number"),
    ],
)
def test_lua_refuses_bad_policies(
    client: RedisClient, tag: str, policy: list[object], expected: str
) -> None:
    message = guard(
        client, "ds_add", add_keys(tag), T0, 3600, 16, "", "", "", "", "timelines", 1, *policy,
        ONE_TIMELINE,
        packed_records((1, "a", T0, 0, b"p")),
    )  # fmt: skip
    assert message.startswith("invalid_argument: ")
    assert expected in message


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (packed_records((1, "", T0, 0, b"p")), "record id must be"),
        (packed_records((1, "a", -1, 0, b"p")), "record timestamp must be >= 0"),
        (packed_records((1, "a", math.nan, 0, b"p")), "record timestamp must be a finite"),
        (packed_records((1, "a", math.inf, 0, b"p")), "record timestamp must be a finite"),
        (packed_records((1, "a", T0, -1, b"p")), "offset must be an integer"),
        (packed_records((1, "a", T0, 1.5, b"p")), "offset must be an integer"),
        (packed_records((1, "a", T0, 2**53 + 2, b"p")), "offset must be an integer"),
        (packed_records((2, "a", T0, 0, b"p")), "timeline index must be"),
        (packed_records((1, "a", T0, 0, b"payload"))[:-1], "malformed records"),
        (packed_records((1, "a", T0, 0, b"p")) + b"\x00", "malformed records"),
    ],
)
def test_lua_refuses_bad_records_and_writes_nothing(
    client: RedisClient, tag: str, record: bytes, expected: str
) -> None:
    good = packed_records((1, "ok", T0, 0, b"p"))
    message = guard(
        client, "ds_add", add_keys(tag), T0, 3600, 16, "", "", "", "", "timelines", 1,
        *policy_args(), ONE_TIMELINE, good + record,
    )  # fmt: skip
    assert expected in message
    assert client.exists(timeline_key(tag, "t"), fence_key(tag)) == 0


def packed_controls(*controls: tuple[int, float, int, str, str], policy: int = 1) -> bytes:
    """ds_add's packed controls: (records before it, offset, operation code, timeline, id),
    each under the policy of that index."""
    return b"".join(
        protocol.CONTROL.pack(before, offset, code, policy, timeline, record_id)
        for before, offset, code, timeline, record_id in controls
    )


@pytest.mark.parametrize(
    ("controls", "expected"),
    [
        # the first code past the declared controls
        (packed_controls((1, 1, len(CONTROLS) + 1, "t", "x")), "unknown control operation code"),
        (packed_controls((2, 1, 1, "t", "x")), "records before a control must be"),
        (packed_controls((1, 2, 1, "t", "x"), (0, 3, 1, "t", "x")), "records before a control"),
        (packed_controls((1, 9, 1, "t", "x")), "offset must be an integer"),  # past through
        (packed_controls((1, 1, 1, "", "x")), "timeline must be"),
        (packed_controls((1, 1, 2, "t", "")), "record id must be"),
        (packed_controls((1, 1, 1, "t", "x"))[:-1], "malformed controls"),
        (packed_controls((1, 1, 1, "t", "x"), policy=2), "policy index must be"),
        (packed_controls((1, 1, 1, "t", "x"), policy=0), "policy index must be"),
    ],
)
def test_lua_refuses_bad_controls_and_writes_nothing(
    client: RedisClient, tag: str, controls: bytes, expected: str
) -> None:
    message = guard(
        client, "ds_add", add_keys(tag), T0, 3600, 16, "", 4, "", "", "timelines", 1,
        *policy_args(), ONE_TIMELINE, packed_records((1, "a", T0, 0, b"p")), controls,
    )  # fmt: skip
    assert expected in message
    assert client.exists(timeline_key(tag, "t"), fence_key(tag)) == 0


def test_lua_refuses_an_add_without_its_numbering(client: RedisClient, tag: str) -> None:
    # the ARGV of a caller older than library 30: no numbering field before the policies
    head = [T0, 3600, 16, "", "", "", "a" * 24, 1, *policy_args()]
    records = packed_records((1, "a", T0, 0, b"p"))
    message = guard(client, "ds_add", add_keys(tag), *head, ONE_TIMELINE, records)
    assert "the caller is older than the library" in message
    assert client.exists(timeline_key(tag, "a"), fence_key(tag)) == 0


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        ([-1, 3600, 16, "", "", "", "", "timelines", 0], "now must be >= 0"),
        ([T0, 0, 16, "", "", "", "", "timelines", 0], "ttl must be > 0"),
        ([T0, 3600, 129, "", "", "", "", "timelines", 0], "inline record limit must be an integer"),
        ([T0, 3600, 16, -1, "", "", "", "timelines", 0], "expected fence must be an integer"),
        ([T0, 3600, 16, "", 1.5, "", "", "timelines", 0], "through offset must be an integer"),
        ([T0, 3600, 16, "", "", "a|b", "", "timelines", 0], "topic id must be"),
        ([T0, 3600, 16, "", "", "x" * 65, "", "timelines", 0], "topic id must be"),
        ([T0, 3600, 16, "", "", "", "abc", "timelines", 0], "open nonce must be"),
        ([T0, 3600, 16, "", "", "", "A" * 24, "timelines", 0], "open nonce must be"),
        ([T0, 3600, 16, "", "", "", "", "timelines", 2], "fields per policy"),
        ([T0, 3600, 16, "", "", "", "", "timelines", 0, b"", b"", b""], "fields per policy"),
    ],
)
def test_lua_refuses_bad_add_headers(
    client: RedisClient, tag: str, head: list[object], expected: str
) -> None:
    assert expected in guard(client, "ds_add", add_keys(tag), *head)


def test_lua_refuses_records_past_through_offset(client: RedisClient, tag: str) -> None:
    head = [T0, 3600, 16, "", 4, "", "", "timelines", 1]
    records = packed_records((1, "a", T0, 5, b""))
    message = guard(client, "ds_add", add_keys(tag), *head, *policy_args(), ONE_TIMELINE, records)
    assert "invalid_argument: record offset 5 is past through_offset 4" in message


@pytest.mark.parametrize(
    ("timelines", "expected"),
    [
        (packed_timelines((2, "t")), "policy index must be"),
        (packed_timelines((1, "")), "timeline must be"),
        (packed_timelines((1, "t"), (1, "t")), "timeline listed twice: t"),
        (ONE_TIMELINE[:-1], "malformed timelines"),
        (ONE_TIMELINE + b"\x00\x00", "malformed timelines"),
    ],
)
def test_lua_refuses_bad_timelines_and_writes_nothing(
    client: RedisClient, tag: str, timelines: bytes, expected: str
) -> None:
    head = [T0, 3600, 16, "", "", "", "", "timelines", 1, *policy_args()]
    records = packed_records((1, "a", T0, 0, b"p"))
    message = guard(client, "ds_add", add_keys(tag), *head, timelines, records)
    assert message.startswith("invalid_argument: ")
    assert expected in message
    assert client.exists(timeline_key(tag, "t"), fence_key(tag)) == 0


@pytest.mark.parametrize("nonce", ["abc", "A" * 24, "a" * 25, "g" * 24])
def test_lua_refuses_bad_schedule_nonces(client: RedisClient, tag: str, nonce: str) -> None:
    keys = [waiting_key(tag), ready_key(tag), fence_key(tag)]
    assert "schedule nonce must be" in guard(client, "ds_schedule", keys, T0, 3600, 10, nonce)
    # "" (or none at all: a caller of the library before nonces) is no nonce
    assert raw(client, "FCALL", "ds_schedule", keys, T0, 3600, 10, "") == [[], 0]
    assert raw(client, "FCALL", "ds_schedule", keys, T0, 3600, 10) == [[], 0]


def test_lua_refuses_bad_digest_ids(client: RedisClient, tag: str) -> None:
    keys = [timeline_key(tag, "t"), digest_key(tag, "t"), waiting_key(tag), ready_key(tag)]
    for bad in ("x" * 32, GOOD_ID.upper(), GOOD_ID[:-1], ""):
        message = guard(client, "ds_open", keys, "t", bad, T0, *policy_args())
        assert "invalid_argument: digest id must be 32 lowercase hex" in message
        message = guard(client, "ds_close", keys, "t", bad, T0, 3600, *policy_args())
        assert "invalid_argument: digest id" in message


def test_a_close_many_with_a_bad_id_writes_nothing(
    client: RedisClient, tag: str, redis_store: RedisStore
) -> None:
    """The close checks an id against its digest first (one that is its digest's was checked
    when the digest was made): a malformed id after a good one still refuses the call."""
    led = redis_store.add(0, [NewRecord("t", "r", T0, b"p", 0)], T0, open_nonce="a" * 24)
    good = led.opened[0].id
    head = [T0 + 1, 3600, 1, *policy_args()]
    before = _snapshot(client, tag)
    for bad in ("x" * 32, GOOD_ID.upper(), GOOD_ID[:-1], "", good + "|"):
        targets = packed_targets((1, "t", good), (1, "u", bad))
        message = guard(client, "ds_close_many", [waiting_key(tag), ready_key(tag)], *head, targets)
        assert "invalid_argument: digest id must be 32 lowercase hex" in message
        assert _snapshot(client, tag) == before  # nothing written
    assert redis_store.inspect(0, "t").open_digest == good


ONE_TARGET = packed_targets((1, "u", GOOD_ID))


@pytest.mark.parametrize("function", ["ds_open_many", "ds_close_many"])
@pytest.mark.parametrize(
    ("targets", "expected"),
    [
        ([packed_targets((1, "u", GOOD_ID), (2, "t", GOOD_ID))], "policy index must be"),
        ([packed_targets((1, "u", GOOD_ID), (0, "t", GOOD_ID))], "policy index must be"),
        ([packed_targets((1, "u", GOOD_ID), (1, "", GOOD_ID))], "timeline must be"),
        ([packed_targets((1, "u", GOOD_ID), (1, "x" * 1025, GOOD_ID))], "timeline must be"),
        ([packed_targets((1, "u", GOOD_ID), (1, "v", "x" * 32))], "digest id must be"),
        ([ONE_TARGET[:-1]], "malformed targets"),
        ([ONE_TARGET + b"\x00\x00"], "malformed targets"),
        ([ONE_TARGET, ONE_TARGET], "one packed argument"),
        ([], "one packed argument"),
    ],
)
def test_lua_refuses_bad_targets_and_writes_nothing(
    client: RedisClient,
    tag: str,
    redis_store: RedisStore,
    function: str,
    targets: list[bytes],
    expected: str,
) -> None:
    """A malformed target refuses a many-target call as a whole, before anything is
    written: the good target before it (a READY timeline's open digest) stays as it was."""
    led = redis_store.add(0, [NewRecord("t", "r", T0, b"p", 0)], T0, open_nonce="a" * 24)
    good = led.opened[0].id
    before = _snapshot(client, tag)
    head = [T0 + 1, 3600] if function == "ds_close_many" else [T0 + 1]
    first = packed_targets((1, "t", good))
    message = guard(
        client, function, [waiting_key(tag), ready_key(tag)], *head, 1, *policy_args(),
        *([first + targets[0], *targets[1:]] if targets else []),
    )  # fmt: skip
    assert message.startswith("invalid_argument: "), message
    assert expected in message, message
    assert redis_store.inspect(0, "t").open_digest == good
    assert _snapshot(client, tag) == before  # nothing written


def _snapshot(client: RedisClient, tag: str) -> dict[bytes, tuple[object, object]]:
    """Every key of the partition with its value as DUMP serialises it, and its TTL's kind."""
    namespace, partition = tag.strip("{}").rsplit(":", 1)
    found: dict[bytes, tuple[object, object]] = {}
    for key in tag_keys(client, namespace, int(partition)):
        found[key] = (client.dump(key), client.pttl(key) > 0)
    return found


def test_lua_refuses_foreign_keys(client: RedisClient, tag: str) -> None:
    assert "invalid_argument: KEYS[2]" in guard(
        client, "ds_schedule", [waiting_key(tag), waiting_key(tag), fence_key(tag)], T0, 3600
    )
    assert "invalid_argument: key does not start" in guard(
        client, "ds_fence_set", ["plain-key"], 1, 3600
    )
    assert "invalid_argument: offset" in guard(client, "ds_fence_set", [fence_key(tag)], -4, 3600)
    assert "invalid_argument: topic id" in guard(client, "ds_fence_set", [fence_key(tag)], 4, "a|b")
    keys = [timeline_key(tag, "t"), digest_key(tag, "t"), waiting_key(tag), ready_key(tag)]
    assert "invalid_argument: KEYS[1]" in guard(client, "ds_delete", keys, "u")


def test_lua_reports_invalid_state(client: RedisClient, tag: str) -> None:
    keys = [timeline_key(tag, "t"), digest_key(tag, "t"), waiting_key(tag), ready_key(tag)]
    message = guard(client, "ds_open", keys, "t", GOOD_ID, T0, *policy_args())
    assert message.startswith("invalid_state: timeline is not ready")


def test_read_only_functions_refuse_writes(client: RedisClient, tag: str) -> None:
    # Registered with no-writes, they run under FCALL_RO; write functions do not.
    assert raw(client, "FCALL_RO", "ds_stats", [waiting_key(tag), ready_key(tag), fence_key(tag)])
    with pytest.raises(redis.ResponseError, match=r"(?i)write"):
        raw(
            client,
            "FCALL_RO",
            "ds_schedule",
            [waiting_key(tag), ready_key(tag), fence_key(tag)],
            T0,
            3600,
        )
