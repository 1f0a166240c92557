"""The fence policy, every branch, without Kafka or Redis."""

from __future__ import annotations

import logging

from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID

from digest_stream.roles.ingest import fence


def test_a_new_partition_starts_where_auto_offset_reset_says() -> None:
    decision = fence.start(3, committed=-1001, fence=None, policy="replay")
    assert decision == fence.Decision(OFFSET_INVALID, None)


def test_a_fence_without_a_commit_starts_after_the_fence() -> None:
    assert fence.start(0, committed=-1001, fence=41, policy="replay") == fence.Decision(42, 41)


def test_fence_and_commit_in_step_start_at_the_commit() -> None:
    decision = fence.start(0, committed=42, fence=41, policy="replay")
    assert (decision.offset, decision.expected, decision.cause) == (42, 41, None)


def test_a_fence_ahead_of_the_commit_starts_at_the_commit_and_skips_by_fence() -> None:
    # Applied but not committed before a crash: the replay is skipped by the store's fence.
    decision = fence.start(0, committed=10, fence=41, policy="replay")
    assert (decision.offset, decision.expected, decision.cause) == (10, 41, None)


def test_a_fence_behind_the_commit_replays_from_the_fence() -> None:
    decision = fence.start(0, committed=50, fence=41, policy="continue")
    assert (decision.offset, decision.expected, decision.cause) == (42, 41, "fence_behind")
    assert decision.level == logging.WARNING


def test_a_missing_fence_with_a_commit_is_a_state_loss_replayed_from_the_start() -> None:
    decision = fence.start(2, committed=50, fence=None, policy="replay")
    assert (decision.offset, decision.expected, decision.cause) == (
        OFFSET_BEGINNING,
        None,
        "state_loss",
    )
    assert decision.level == logging.ERROR
    assert "replaying from the earliest" in decision.message


def test_a_missing_fence_with_continue_resumes_at_the_commit_and_says_what_is_lost() -> None:
    decision = fence.start(2, committed=50, fence=None, policy="continue")
    assert (decision.offset, decision.expected, decision.cause) == (50, None, "state_loss")
    assert "before offset 50 are LOST" in decision.message


def test_redis_unreachable_at_assignment_expects_the_committed_fence() -> None:
    assert fence.start_without_store(50) == fence.Decision(50, 49)
    assert fence.start_without_store(0) == fence.Decision(0, None)
    assert fence.start_without_store(-1001) == fence.Decision(OFFSET_INVALID, None)


def test_a_fence_in_step_needs_nothing() -> None:
    assert fence.after_add(0, expected=20, fence_before=20, policy="replay") is None
    assert fence.after_add(0, expected=20, fence_before=25, policy="replay") is None


def test_a_fence_behind_rewinds_to_it() -> None:
    decision = fence.after_add(0, expected=20, fence_before=9, policy="continue")
    assert decision is not None
    assert (decision.offset, decision.expected, decision.cause) == (10, 9, "fence_behind")
    assert not decision.apply_now


def test_a_fence_gone_replays_or_applies_now_as_the_policy_says() -> None:
    replay = fence.after_add(0, expected=20, fence_before=None, policy="replay")
    assert replay is not None
    assert replay.offset == OFFSET_BEGINNING
    assert not replay.apply_now
    cont = fence.after_add(0, expected=20, fence_before=None, policy="continue")
    assert cont is not None
    assert cont.apply_now
    assert cont.expected is None
    assert "before this batch are LOST" in cont.message
