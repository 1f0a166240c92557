"""The packed arguments of the store's calls (store/redis/packing.py): ds_add's batch and the
many-target calls' targets, packed inline on the hot path, are what the protocol's declarations
pack (which the Lua's formats read back: test_protocol.py)."""

from __future__ import annotations

import pytest

from digest_stream.store.base import CANCEL, FLUSH, NewRecord
from digest_stream.store.errors import InvalidArgument
from digest_stream.store.policy import TimelinePolicy
from digest_stream.store.redis import protocol
from digest_stream.store.redis.packing import add_batch, targets
from digest_stream.store.redis.policy_wire import pack

NOW = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


def test_an_adds_batch_packs_as_the_protocol_declares_it() -> None:
    fast, slow = TimelinePolicy(), TimelinePolicy(minimum_delay=5)
    records = [
        NewRecord("a", "r1", 1.5, b"p1", 3),
        NewRecord("b", "r2", 2.0, b"", 4),
        NewRecord("a", "r3", 2.5, b"p3", 5),
    ]
    args, timelines, policies = add_batch(records, NOW, None, {"a": fast, "b": slow}.__getitem__)
    assert (timelines, policies) == (["a", "b"], [fast, slow])
    assert args == [
        "2", *pack(fast, NOW), *pack(slow, NOW),
        protocol.TIMELINE.pack(1, "a") + protocol.TIMELINE.pack(2, "b"),
        protocol.RECORD.pack(1, "r1", 1.5, 3.0, b"p1")
        + protocol.RECORD.pack(2, "r2", 2.0, 4.0, b"")
        + protocol.RECORD.pack(1, "r3", 2.5, 5.0, b"p3"),
    ]  # fmt: skip


def test_a_batch_with_controls_packs_them_last_each_after_the_records_before_it() -> None:
    policy = TimelinePolicy()
    records = [
        NewRecord("a", "r1", 1.0, b"p", 1),
        NewRecord("a", "r1", 0.0, b"", 2, control=CANCEL),
        NewRecord("a", "f1", 0.0, b"", 3, control=FLUSH),
    ]
    args, timelines, _ = add_batch(records, NOW, 3, lambda _timeline: policy)
    cancel, flush = protocol.CONTROL_CODES[CANCEL], protocol.CONTROL_CODES[FLUSH]
    assert timelines == ["a"]
    both = protocol.CONTROL.pack(1, 2.0, cancel, 1, "a", "r1") + protocol.CONTROL.pack(
        1, 3.0, flush, 1, "a", "f1"
    )  # each after the one record before it
    assert args[-1] == both


def test_a_many_target_call_packs_each_target_and_each_policy_once() -> None:
    policy = TimelinePolicy()
    first, second = "0" * 32, "f" * 32
    table, packed, resolved = targets([(0, "a", first), (1, "b", second)], NOW, lambda _: policy)
    assert table.args() == ["1", *pack(policy, NOW)]
    assert packed == [protocol.TARGET.pack(1, "a", first), protocol.TARGET.pack(1, "b", second)]
    assert resolved == [policy, policy]


def test_a_batch_the_inline_checks_refuse_is_judged_whole() -> None:
    with pytest.raises(InvalidArgument, match="payload must be bytes"):
        add_batch(
            [NewRecord("a", "r", 1.0, "text", 0)],  # type: ignore[arg-type]
            NOW, None, lambda _timeline: TimelinePolicy(),
        )  # fmt: skip
