"""The fence rules, every branch, without Kafka or Redis."""

from __future__ import annotations

import functools
import logging

from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID

from digest_stream.roles.ingest import fence
from digest_stream.roles.ingest.topic import TopicId

#: The store's name in the decisions' lines (``DigestStore.label``).
STORE = "Redis"
start = functools.partial(fence.start, store=STORE)
after_add = functools.partial(fence.after_add, store=STORE)


def test_a_new_partition_starts_where_auto_offset_reset_says() -> None:
    decision = start(3, committed=-1001, fence=None, on_state_loss="replay")
    assert decision == fence.Decision(OFFSET_INVALID, None)


def test_a_fence_without_a_commit_starts_after_the_fence() -> None:
    assert start(0, committed=-1001, fence=41, on_state_loss="replay") == fence.Decision(42, 41)


def test_fence_and_commit_in_step_start_at_the_commit() -> None:
    decision = start(0, committed=42, fence=41, on_state_loss="replay")
    assert (decision.offset, decision.expected, decision.cause) == (42, 41, None)


def test_a_fence_ahead_of_the_commit_starts_at_the_commit_and_skips_by_fence() -> None:
    # Applied but not committed before a crash: the replay is skipped by the store's fence.
    decision = start(0, committed=10, fence=41, on_state_loss="replay")
    assert (decision.offset, decision.expected, decision.cause) == (10, 41, None)


def test_a_fence_behind_the_commit_replays_from_the_fence() -> None:
    decision = start(0, committed=50, fence=41, on_state_loss="continue")
    assert (decision.offset, decision.expected, decision.cause) == (42, 41, "fence_behind")
    assert decision.level == logging.WARNING


def test_a_missing_fence_with_a_commit_is_a_state_loss_replayed_from_the_start() -> None:
    decision = start(2, committed=50, fence=None, on_state_loss="replay")
    assert (decision.offset, decision.expected, decision.cause) == (
        OFFSET_BEGINNING,
        None,
        "state_loss",
    )
    assert decision.level == logging.ERROR
    assert "replaying from the earliest" in decision.message


def test_a_missing_fence_with_continue_resumes_at_the_commit_and_says_what_is_lost() -> None:
    decision = start(2, committed=50, fence=None, on_state_loss="continue")
    assert (decision.offset, decision.expected, decision.cause) == (50, None, "state_loss")
    assert "before offset 50 are LOST" in decision.message


def test_redis_unreachable_at_assignment_expects_the_committed_fence() -> None:
    assert fence.start_without_store(50) == fence.Decision(50, 49)
    assert fence.start_without_store(0) == fence.Decision(0, None)
    assert fence.start_without_store(-1001) == fence.Decision(OFFSET_INVALID, None)


def test_a_fence_in_step_needs_nothing() -> None:
    assert after_add(0, expected=20, fence_before=20, on_state_loss="replay") is None
    assert after_add(0, expected=20, fence_before=25, on_state_loss="replay") is None


def test_a_fence_behind_rewinds_to_it() -> None:
    decision = after_add(0, expected=20, fence_before=9, on_state_loss="continue")
    assert decision is not None
    assert (decision.offset, decision.expected, decision.cause) == (10, 9, "fence_behind")
    assert not decision.apply_now


def test_a_fence_gone_replays_or_applies_now_as_the_policy_says() -> None:
    replay = after_add(0, expected=20, fence_before=None, on_state_loss="replay")
    assert replay is not None
    assert replay.offset == OFFSET_BEGINNING
    assert not replay.apply_now
    cont = after_add(0, expected=20, fence_before=None, on_state_loss="continue")
    assert cont is not None
    assert cont.apply_now
    assert cont.expected is None
    assert "before this batch are LOST" in cont.message


def test_every_decision_names_the_store_it_is_about() -> None:
    # A second backend's operator reads its own name: no line names Redis by itself.
    lines = [
        fence.after_add(0, expected=20, fence_before=9, on_state_loss="replay", store="Pebble"),
        fence.after_add(0, expected=20, fence_before=None, on_state_loss="replay", store="Pebble"),
        fence.start(0, committed=50, fence=None, on_state_loss="continue", store="Pebble"),
        fence.start(0, committed=50, fence=10, on_state_loss="replay", store="Pebble"),
    ]
    for decision in lines:
        assert decision is not None
        assert "Pebble" in decision.message
        assert "Redis" not in decision.message


# ---------------------------------------------------------------- offsets belong to a topic

OLD, NEW = "XJZlQJpjSHCHp8eFP2gP5w", "rHsPZJPATkK3iNAC8jgMdg"


def told(value: str | None) -> TopicId:
    """A topic id the broker just told."""
    return TopicId(value, fresh=True)


def test_a_fence_of_another_topic_is_replayed_from_the_beginning_and_reset() -> None:
    decision = start(
        0,
        committed=-1001,
        fence=19,
        on_state_loss="replay",
        fence_topic=OLD,
        topic=told(NEW),
        end=5,
    )
    assert (decision.offset, decision.expected, decision.cause, decision.reset) == (
        OFFSET_BEGINNING,
        None,
        "topic_changed",
        True,
    )
    assert decision.level == logging.ERROR
    assert f"topic id changed {OLD} -> {NEW}" in decision.message
    assert "the fence 19 was the old topic's" in decision.message
    assert "on_state_loss=replay" in decision.message


def test_a_fence_of_another_topic_with_continue_starts_at_the_commit() -> None:
    decision = start(
        0, committed=3, fence=19, on_state_loss="continue", fence_topic=OLD, topic=told(NEW)
    )
    assert (decision.offset, decision.expected, decision.cause, decision.reset) == (
        3,
        None,
        "topic_changed",
        True,
    )
    assert "from the committed offset 3 on (records before it are NOT read)" in decision.message


def test_a_fence_of_another_topic_with_continue_and_no_commit_starts_where_reset_says() -> None:
    decision = start(
        0, committed=-1001, fence=19, on_state_loss="continue", fence_topic=OLD, topic=told(NEW)
    )
    assert (decision.offset, decision.cause, decision.reset) == (
        OFFSET_INVALID,
        "topic_changed",
        True,
    )
    assert "where auto.offset.reset says" in decision.message


def test_the_same_topic_or_an_unknown_id_is_no_change() -> None:
    same = start(
        0, committed=20, fence=19, on_state_loss="replay", fence_topic=OLD, topic=told(OLD)
    )
    assert same == fence.Decision(20, 19)
    # an old broker (no id now) or a fence from before topic ids: fenced as before
    assert start(0, 20, 19, "replay", fence_topic=OLD, topic=told(None)) == same
    assert start(0, 20, 19, "replay", fence_topic=None, topic=told(NEW)) == same


def test_a_fence_at_or_past_the_partition_end_is_an_offset_reset() -> None:
    decision = start(0, committed=20, fence=19, on_state_loss="replay", end=5)
    assert (decision.offset, decision.cause, decision.reset) == (
        OFFSET_BEGINNING,
        "offset_reset",
        True,
    )
    assert "the fence 19 is at or past the end of the partition (5)" in decision.message
    at_end = start(0, committed=20, fence=19, on_state_loss="continue", end=19)
    assert (at_end.offset, at_end.cause) == (20, "offset_reset")
    # fully consumed: the fence is the last offset, the end the next one
    assert start(0, committed=20, fence=19, on_state_loss="replay", end=20) == fence.Decision(
        20, 19
    )


def test_a_fence_reset_for_a_new_topic_reads_it_as_the_policy_said() -> None:
    # reset with nothing applied yet (a crash before the first add): no second alarm
    replay = start(0, committed=50, fence=None, on_state_loss="replay", fence_topic=NEW)
    assert replay == fence.Decision(OFFSET_BEGINNING, None)
    cont = start(0, committed=50, fence=None, on_state_loss="continue", fence_topic=NEW)
    assert cont == fence.Decision(50, None)
    fresh = start(0, committed=-1001, fence=None, on_state_loss="continue", fence_topic=NEW)
    assert fresh == fence.Decision(OFFSET_BEGINNING, None)


def test_a_running_partition_on_another_topic_replays_or_applies_the_batch_now() -> None:
    replay = fence.foreign(
        1, "replay", fence=10, fence_topic=OLD, topic=told(NEW), end=None, resume_at=None
    )
    assert replay is not None
    assert (replay.offset, replay.cause, replay.reset, replay.apply_now) == (
        OFFSET_BEGINNING,
        "topic_changed",
        True,
        False,
    )
    cont = fence.foreign(
        1, "continue", fence=10, fence_topic=OLD, topic=told(NEW), end=None, resume_at=None
    )
    assert cont is not None
    assert (cont.cause, cont.reset, cont.apply_now) == ("topic_changed", True, True)
    assert "reading it from this batch on" in cont.message
    assert fence.foreign(1, "replay", fence=10, fence_topic=OLD, topic=told(OLD),
                         end=11, resume_at=None) is None  # fmt: skip
    assert fence.foreign(1, "replay", fence=None, fence_topic=None, topic=told(NEW),
                         end=0, resume_at=None) is None  # fmt: skip


def test_a_stale_topic_id_never_resets_a_fence() -> None:
    # Issue 20, item 10: the broker could not tell the id now; OLD is only the last one seen,
    # and another owner may already have moved the fence to the recreated topic's id.
    stale = TopicId(OLD, fresh=False)
    running = fence.foreign(
        1, "replay", fence=2, fence_topic=NEW, topic=stale, end=None, resume_at=None
    )
    assert running is not None
    assert (running.wait, running.reset, running.cause) == (True, False, None)
    assert running.level == logging.WARNING
    assert f"names topic id {NEW}" in running.message
    assert f"last saw {OLD}" in running.message
    # at assignment: starts from the fence as usual; the first add's topic check decides
    assigned = start(0, committed=3, fence=2, on_state_loss="replay", fence_topic=NEW, topic=stale)
    assert (assigned.offset, assigned.expected, assigned.cause, assigned.reset) == (
        3,
        2,
        None,
        False,
    )
    assert "cannot tell" in assigned.message
    # once the broker tells the same id again, the fence is the old topic's: reset, as before
    known = start(0, 3, 2, "replay", fence_topic=NEW, topic=told(OLD))
    assert (known.offset, known.cause, known.reset) == (OFFSET_BEGINNING, "topic_changed", True)


def test_a_batch_found_applied_beyond_the_booked_fence_is_one_this_process_ran_before() -> None:
    # the re-run of a call whose reply was lost: the fence covers the batch (10..14)
    assert fence.applied_unbooked(9, 10, 14)
    assert fence.applied_unbooked(None, 10, 14)  # a first batch: nothing booked yet
    assert fence.applied_unbooked(9, 10, 10)  # applied in part (the fence moves per record)
    # the usual call, and a start below the fence (the previous owner's uncommitted tail)
    assert not fence.applied_unbooked(9, 10, 9)
    assert not fence.applied_unbooked(14, 8, 14)
    assert not fence.applied_unbooked(None, 10, None)
    assert not fence.applied_unbooked(None, 10, 9)
