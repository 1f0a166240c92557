"""The one packed form of a policy that every store command sends, and its table per call."""

from __future__ import annotations

import pytest

from digest_stream.store.errors import InvalidArgument
from digest_stream.store.policy import PACKED, TimelinePolicy
from digest_stream.store.redis.policy_wire import (
    POLICY_FIELDS,
    POLICY_WIDTH,
    PolicyTable,
    pack,
)

NOW = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


def test_a_policy_packs_one_text_per_packed_option_in_declared_order() -> None:
    assert [name for name, _ in POLICY_FIELDS] == [spec.name for spec in PACKED]
    assert len(PACKED) == POLICY_WIDTH
    fields = dict(zip((spec.name for spec in PACKED), pack(TimelinePolicy(), NOW), strict=True))
    assert fields.items() >= {
        ("minimum_delay", "300.0"), ("increment_delay", "30.0"), ("maximum_delay", "1800.0"),
        ("ttl", "604800.0"), ("capacity", "10000"), ("flush_at", "0"), ("schedule", ""),
    }  # fmt: skip


def test_unset_counts_pack_as_zero_and_a_schedule_as_its_next_fire() -> None:
    policy = TimelinePolicy(capacity=None, flush_at=3, schedule="0 0 * * *")
    fields = dict(zip((spec.name for spec in PACKED), pack(policy, NOW), strict=True))
    assert (fields["capacity"], fields["flush_at"]) == ("0", "3")
    assert fields["schedule"] == repr(policy.next_fire(NOW)) == "1700006400.0"


def test_a_table_sends_each_distinct_policy_once_and_indexes_from_one() -> None:
    table = PolicyTable(NOW)
    default, other = TimelinePolicy(), TimelinePolicy(minimum_delay=5)
    assert table.index(default, "a") == 1
    assert table.index(other, "b") == 2
    assert table.index(TimelinePolicy(), "c") == 1  # equal, another object
    assert table.index(default, "d") == 1
    assert table.args() == ["2", *pack(default, NOW), *pack(other, NOW)]


def test_a_table_refuses_what_is_not_a_policy() -> None:
    with pytest.raises(InvalidArgument, match="TimelinePolicy"):
        PolicyTable(NOW).index("fast", "a")
