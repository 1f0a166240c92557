"""Hypothesis fuzzing of the decoders and of the store's argument checks (Python and Lua).

The properties: any bytes decode to a model or raise DecodeError with a documented reason
(never another exception); a cut valid encoding is "truncated", an extended one
"trailing-bytes"; the Python validators accept or raise InvalidArgument; a raw FCALL with
arbitrary arguments returns a reply or an `invalid_argument:`/`invalid_state:` error, never a
Lua runtime error, and a refused call writes nothing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from digest_stream.store import InvalidArgument, MemoryStore, NewRecord
from digest_stream.store import validate as v
from digest_stream.store.redis import RedisStore, protocol
from digest_stream.store.redis.keys import command_keys, partition_tag
from digest_stream.wire import codec
from digest_stream.wire.models import Event
from tests.support import unique

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
DECODERS: dict[str, Callable[[bytes], object]] = {
    "event": codec.decode_event,
    "schedule_entry": codec.decode_schedule_entry,
    "digest": codec.decode_digest,
}

ids = st.text(min_size=1, max_size=40)
events = st.builds(
    Event,
    id=ids,
    timestamp=st.integers(min_value=0, max_value=2**62),
    payload=st.binary(max_size=300),
    attributes=st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3),
)


def _outcome(decode: Callable[[bytes], object], data: bytes) -> str | None:
    """None when it decoded; the DecodeError reason otherwise (any other exception fails)."""
    error: codec.DecodeError | None = None
    try:
        decode(data)
    except codec.DecodeError as exc:
        error = exc
    if error is None:
        return None
    assert error.reason in codec.DECODE_REASONS
    assert error.detail
    return error.reason


@FUZZ
@given(kind=st.sampled_from(sorted(DECODERS)), data=st.binary(max_size=2000))
def test_any_bytes_decode_or_raise_a_decode_error(kind: str, data: bytes) -> None:
    _outcome(DECODERS[kind], data)


@FUZZ
@given(event=events, data=st.data())
def test_a_cut_event_is_truncated(event: Event, data: st.DataObject) -> None:
    whole = codec.encode_event(event)
    cut = data.draw(st.integers(min_value=0, max_value=len(whole) - 1))
    assert _outcome(codec.decode_event, whole[:cut]) == "truncated"


@FUZZ
@given(event=events, tail=st.binary(min_size=1, max_size=50))
def test_an_extended_event_has_trailing_bytes(event: Event, tail: bytes) -> None:
    assert _outcome(codec.decode_event, codec.encode_event(event) + tail) == "trailing-bytes"


@FUZZ
@given(event=events, data=st.data())
def test_a_corrupted_event_decodes_or_raises_a_decode_error(
    event: Event, data: st.DataObject
) -> None:
    whole = bytearray(codec.encode_event(event))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        at = data.draw(st.integers(min_value=0, max_value=len(whole) - 1))
        whole[at] = data.draw(st.integers(min_value=0, max_value=255))
    _outcome(codec.decode_event, bytes(whole))


@FUZZ
@given(event=events)
def test_valid_events_round_trip(event: Event) -> None:
    assert codec.decode_event(codec.encode_event(event)) == event


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@FUZZ
@given(schema=json_values, data=st.binary(max_size=200))
def test_any_writer_schema_is_refused_or_resolved(schema: Any, data: bytes) -> None:
    # A writer schema from the outside (a registry, a header) is input too.
    _outcome(lambda b: codec.decode_event(b, writer_schema=json.dumps(schema)), data)


# ------------------------------------------------------------------ Python-side validation

anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.binary(max_size=30),
    st.lists(st.integers(), max_size=3),
)


@FUZZ
@given(value=anything)
def test_validators_accept_or_refuse_with_invalid_argument(value: object) -> None:
    checks: list[Callable[[object], object]] = [
        v.namespace,
        v.partition,
        v.digest_id,
        v.offset,
        lambda x: v.time_value(x, "t"),
        lambda x: v.name(x, "n"),
    ]
    for check in checks:
        with contextlib.suppress(InvalidArgument):
            check(value)


names = st.one_of(st.text(max_size=5), st.text(min_size=1020, max_size=1030), st.just("\ud800"))
numbers = st.one_of(
    st.integers(min_value=-5, max_value=2**54),
    st.floats(allow_nan=True, allow_infinity=True),
)


@FUZZ
@given(
    timeline=names,
    record_id=names,
    timestamp=numbers,
    offset=st.integers(min_value=-3, max_value=2**54),
    payload=st.one_of(st.binary(max_size=20), st.text(max_size=5)),
)
def test_memory_store_refuses_exactly_what_validation_refuses(
    timeline: str, record_id: str, timestamp: float, offset: int, payload: bytes
) -> None:
    record = NewRecord(timeline, record_id, timestamp, payload, offset)
    try:
        v.records([record])
        valid = True
    except InvalidArgument:
        valid = False
    store = MemoryStore()
    try:
        store.add(0, [record], 1_700_000_000.0)
        accepted = True
    except InvalidArgument:
        accepted = False
    assert accepted == valid


@pytest.fixture(scope="module")
def fuzz_client(redis_url: str) -> Any:
    client = redis.Redis.from_url(redis_url)
    namespace = unique("fuzz")
    RedisStore(client, namespace=namespace)  # loads the library
    yield client, namespace
    for key in list(client.scan_iter(match=f"{{{namespace}:*", count=1000)):
        client.delete(key)
    client.close()


def _keys(client: redis.Redis, tag: str) -> set[bytes]:
    """Every key of one partition's hash tag."""
    return set(client.scan_iter(match=f"{tag}*", count=1000))


@FUZZ
@given(
    timeline=names,
    record_id=names,
    timestamp=numbers,
    offset=st.integers(min_value=-3, max_value=2**54),
    payload=st.one_of(st.binary(max_size=20), st.text(max_size=5)),
    partition=st.integers(min_value=0, max_value=10_000),
)
def test_redis_store_refuses_what_validation_refuses_and_writes_nothing(
    fuzz_client: Any,
    timeline: str,
    record_id: str,
    timestamp: float,
    offset: int,
    payload: bytes,
    partition: int,
) -> None:
    client, namespace = fuzz_client
    store = RedisStore(client, namespace=namespace, load_library=False)
    record = NewRecord(timeline, record_id, timestamp, payload, offset)
    try:
        v.records([record])
        valid = True
    except InvalidArgument:
        valid = False
    tag = partition_tag(namespace, partition)
    keys_before = _keys(client, tag)
    try:
        store.add(partition, [record], 1_700_000_000.0)
        accepted = True
    except InvalidArgument:
        accepted = False
    assert accepted == valid
    if not accepted:
        # A refused add writes nothing (earlier examples may have left keys: compare).
        assert _keys(client, tag) == keys_before


# ------------------------------------------------------------------ the Lua guard, raw FCALL

lua_args = st.lists(
    st.one_of(
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(["", "nan", "inf", "-inf", "1e400", "0x10", " 1", "1.5", "-0", "t"]),
        st.text(max_size=20),
        st.binary(max_size=20),
        st.just("0123456789abcdef0123456789abcdef"),
    ),
    max_size=20,
)
#: Every function the library registers (protocol.COMMANDS), each given its declared KEYS.
COMMANDS = {command.function: command for command in protocol.COMMANDS}
FUNCTIONS = list(COMMANDS)


def _keys_for(function: str, tag: str) -> list[str]:
    return command_keys(COMMANDS[function], tag, "t")


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
# Found by this test: a huge TTL reached PEXPIRE in exponent form ("1e+17") and Redis refused it.
@example(function="ds_schedule", args=[0, 100000000000000.0], keys_ok=True, partition=0)
@given(
    function=st.sampled_from(FUNCTIONS),
    args=lua_args,
    keys_ok=st.booleans(),
    partition=st.integers(min_value=0, max_value=100_000),
)
def test_lua_guards_refuse_malformed_arguments_cleanly(
    fuzz_client: Any, function: str, args: list[object], keys_ok: bool, partition: int
) -> None:
    client, namespace = fuzz_client
    tag = partition_tag(namespace, partition)
    keys = _keys_for(function, tag) if keys_ok else [f"{tag}:x", "plain", "{other}:w"][:3]
    keys_before = _keys(client, tag)
    refused: str | None = None
    try:
        client.execute_command("FCALL", function, len(keys), *keys, *args)
    except redis.ResponseError as exc:
        refused = str(exc)
    if refused is not None:
        assert refused.startswith(("invalid_argument: ", "invalid_state: ")), refused
        # A refused call writes nothing.
        assert _keys(client, tag) == keys_before
