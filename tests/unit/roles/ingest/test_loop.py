"""The ingest loop, driven message by message with a fake consumer and the reference store."""

from __future__ import annotations

import time
from collections.abc import Collection

import pytest
import redis
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID

from digest_stream.kafka import reset_start
from digest_stream.store import MemoryStore
from digest_stream.store.base import Fence
from digest_stream.store.errors import BackendError
from digest_stream.wire import codec
from digest_stream.wire.models import Event, ScheduleReason
from tests.support.fakes import message
from tests.support.ingest import DLQ, EVENTS, FlakyStore, IngestRig
from tests.support.kafka import murmur2_choice
from tests.support.store_errors import raised


class Rig(IngestRig):
    def __init__(
        self, store: MemoryStore | None = None, max_event_age: float | None = None
    ) -> None:
        # These tests read what the ingest hands the delivery hop (schedule entries, pending
        # records, READY timelines); the leading edge's loop is test_leading.py's subject.
        super().__init__(
            store or MemoryStore(), max_event_age=max_event_age, direct_leading_edge=False
        )


def test_a_batch_is_stored_announced_and_committed_with_bad_input_dead_lettered() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    assert rig.ingest.owned == {0}
    rig.send(b"t1", "a")
    rig.send(None, "b")  # no key: dead letter
    rig.send(b"t2", "c")
    rig.send(b"t1", "d")
    rig.step_until(lambda: rig.consumer.committed_offsets.get(0) == 4)
    rig.producer.flush()
    assert sorted(rig.entries()) == [
        ("t1", ScheduleReason.IMMEDIATE),
        ("t2", ScheduleReason.IMMEDIATE),
    ]
    assert [k for k, _ in rig.producer.on(DLQ)] == [None]
    assert rig.store.inspect(0, "t1").pending == 2
    assert rig.store.applied_offset(0) == 3
    assert rig.metrics.value("digest_dead_letters_total", reason="missing-key") == 1


def test_events_past_max_event_age_are_dropped_counted_and_committed() -> None:
    rig = Rig(max_event_age=60.0)
    rig.consumer.assign([0, 1])
    rig.send(b"t1", "old-a", partition=0, age=3600)
    rig.send(b"t1", "new", partition=0)
    rig.send(b"t2", "old-b", partition=0, age=3600)
    rig.send(b"t3", "old-c", partition=1, age=3600)
    rig.step_until(
        lambda: (
            rig.consumer.committed_offsets.get(0) == 3
            and rig.consumer.committed_offsets.get(1) == 4
        )
    )
    assert rig.metrics.value("digest_events_dropped_total", reason="max_age") == 3
    assert rig.store.inspect(0, "t1").pending == 1
    assert rig.producer.on(DLQ) == []


def test_a_fence_found_behind_seeks_back_and_commits_nothing_past_it() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    for n in range(5):
        rig.send(b"t", f"r{n}")
    rig.step_until(lambda: rig.consumer.committed_offsets.get(0) == 5)
    rig.store.set_applied_offset(0, 1)  # Redis lost writes 2..4
    rig.send(b"t", "r5")
    rig.step_until(lambda: (0, 2) in rig.consumer.seeks)
    assert rig.consumer.committed_offsets[0] == 5
    assert rig.metrics.value("digest_replays_total", cause="fence_behind") == 1


def test_an_assignment_starts_at_the_fence_when_nothing_is_committed() -> None:
    rig = Rig()
    rig.store.set_applied_offset(3, 41)
    rig.consumer.assign([3])
    assert [(tp.partition, tp.offset) for tp in rig.consumer.assigned] == [(3, 42)]


def test_an_assignment_without_commit_or_fence_names_the_reset_position_itself() -> None:
    # Not OFFSET_INVALID: librdkafka would ask for the commit again before the first fetch.
    rig = Rig()
    rig.consumer.assign([3])
    assert [(tp.partition, tp.offset) for tp in rig.consumer.assigned] == [(3, OFFSET_BEGINNING)]
    rig.send(b"t", "r0", partition=3)
    rig.step_until(lambda: rig.consumer.committed_offsets.get(3) == 1)


@pytest.mark.parametrize(
    ("reset", "start"),
    [
        ("earliest", OFFSET_BEGINNING),
        ("smallest", OFFSET_BEGINNING),
        ("beginning", OFFSET_BEGINNING),
        ("latest", OFFSET_END),
        ("largest", OFFSET_END),
        ("end", OFFSET_END),
        ("error", OFFSET_INVALID),  # librdkafka keeps deciding (and reports the error)
    ],
)
def test_the_reset_position_follows_auto_offset_reset(reset: str, start: int) -> None:
    assert reset_start({"auto.offset.reset": reset}) == start


def test_the_reset_position_without_a_setting_is_librdkafkas_default() -> None:
    assert reset_start({}) == OFFSET_END


@pytest.mark.parametrize(
    "error",
    [
        redis.ConnectionError("unreachable"),
        redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'."),
        redis.ResponseError("BUSY Redis is busy running a script."),
        redis.ResponseError("READONLY You can't write against a read only replica."),
        redis.ResponseError("NOPERM User u has no permissions to run the 'hdel' command"),
        # What redis-py really raises for those replies: its own classes, code word cut off.
        redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
        redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
        redis.exceptions.NoPermissionError("User u has no permissions to run the 'hdel' command"),
        redis.exceptions.MasterDownError("Link with MASTER is down"),
    ],
)
def test_a_redis_outage_pauses_keeps_polling_and_resumes_without_losing_the_batch(
    error: redis.RedisError,
) -> None:
    rig = Rig(FlakyStore(failures=4, error=raised(error)))
    rig.consumer.assign([0])
    rig.send(b"t", "r0")
    rig.step_until(lambda: rig.consumer.committed_offsets.get(0) == 1)
    assert rig.consumer.pauses >= 1
    assert rig.consumer.paused == set()
    assert rig.consumer.polls >= 3  # the group was served while waiting
    assert rig.store.inspect(0, "t").pending == 1
    assert rig.metrics.value("digest_redis_errors_total") == 4


def test_a_revocation_commits_what_was_applied_and_lets_go() -> None:
    rig = Rig()
    rig.consumer.assign([0, 1])
    rig.send(b"t", "r0", partition=1)
    rig.ingest.step()  # taken and handed to the worker
    rig.consumer.revoke([1])
    assert rig.consumer.committed_offsets.get(1) == 1
    assert rig.ingest.owned == {0}
    assert rig.store.applied_offset(1) == 0  # booked by the callback


def test_a_lost_partition_commits_nothing() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    rig.send(b"t", "r0")
    rig.ingest.step()
    rig.consumer.lose([0])
    assert rig.consumer.commits == []
    assert rig.ingest.owned == frozenset()


def test_a_refused_call_that_is_a_bug_still_stops_the_role() -> None:
    error = raised(redis.ResponseError("ERR wrong number of arguments"))
    rig = Rig(FlakyStore(failures=1, error=error))
    rig.consumer.assign([0])
    rig.send(b"t", "r0")
    with pytest.raises(BackendError, match="wrong number"):
        rig.step_until(lambda: False)


# ---------------------------------------------------------------- offsets belong to a topic

OLD, NEW = "XJZlQJpjSHCHp8eFP2gP5w", "rHsPZJPATkK3iNAC8jgMdg"


def _queue(rig: Rig, partition: int, offsets: range, prefix: str) -> None:
    now_ms = int(time.time() * 1000)
    for offset in offsets:
        value = codec.encode_event(Event(id=f"{prefix}{offset}", timestamp=now_ms, payload=b"p"))
        rig.consumer.queued.append(
            message(EVENTS, partition, offset, f"{prefix}{offset}".encode(), value)
        )


def test_an_assignment_on_a_recreated_topic_replays_it_and_resets_the_fence() -> None:
    rig = Rig()
    rig.store.set_applied_offset(0, 19, topic_id=OLD)
    rig.topics.topic_id, rig.topics.ends = NEW, {0: 5}
    rig.consumer.assign([0])
    assert [(tp.partition, tp.offset) for tp in rig.consumer.assigned] == [(0, OFFSET_BEGINNING)]
    assert rig.store.fence(0) == Fence(None, NEW)
    assert rig.metrics.value("digest_replays_total", cause="topic_changed") == 1
    _queue(rig, 0, range(5), "new-")
    rig.step_until(lambda: rig.consumer.committed_offsets.get(0) == 5)
    assert rig.store.fence(0) == Fence(4, NEW)
    assert all(rig.store.inspect(0, f"new-{n}").state == "ready" for n in range(5))
    assert rig.metrics.value("digest_events_skipped_total") == 0


def test_a_topic_recreated_under_a_running_partition_is_read_not_skipped() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    _queue(rig, 0, range(20), "old-")
    rig.step_until(lambda: rig.consumer.committed_offsets.get(0) == 20)
    assert rig.store.fence(0) == Fence(19, rig.topics.topic_id)
    # deleted and created again: librdkafka resets the position to the beginning by itself
    rig.topics.topic_id = NEW
    _queue(rig, 0, range(5), "new-")
    rig.step_until(lambda: (0, OFFSET_BEGINNING) in rig.consumer.seeks)
    assert rig.metrics.value("digest_replays_total", cause="topic_changed") == 1
    assert rig.store.fence(0) == Fence(None, NEW)
    _queue(rig, 0, range(5), "new-")  # read again after the seek
    rig.step_until(lambda: rig.store.fence(0) == Fence(4, NEW))
    assert all(rig.store.inspect(0, f"new-{n}").state == "ready" for n in range(5))
    assert rig.metrics.value("digest_events_skipped_total") == 0


def test_an_offset_reset_without_topic_ids_is_caught_by_the_partition_end() -> None:
    rig = Rig()
    rig.topics.topic_id = None  # an old broker: no topic ids
    rig.consumer.assign([0])
    _queue(rig, 0, range(20), "old-")
    rig.step_until(lambda: rig.consumer.committed_offsets.get(0) == 20)
    rig.topics.ends = {0: 5}
    _queue(rig, 0, range(5), "new-")
    rig.step_until(lambda: (0, OFFSET_BEGINNING) in rig.consumer.seeks)
    assert rig.metrics.value("digest_replays_total", cause="offset_reset") == 1
    assert rig.store.fence(0) == Fence(None, None)


def test_a_stale_topic_id_is_refreshed_instead_of_losing_state() -> None:
    rig = Rig()
    rig.topics.topic_id = OLD
    rig.consumer.assign([0])
    # another owner already stored the recreated topic under its new id
    rig.store.set_applied_offset(0, 2, topic_id=NEW)
    refresh = rig.topics.refresh

    def broker_says_new(partitions: Collection[int]) -> dict[int, int]:
        rig.topics.topic_id = NEW
        return refresh(partitions)

    rig.topics.refresh = broker_says_new  # type: ignore[method-assign]
    _queue(rig, 0, range(3, 5), "new-")
    rig.step_until(lambda: rig.consumer.committed_offsets.get(0) == 5)
    assert rig.store.fence(0) == Fence(4, NEW)
    assert rig.metrics.value("digest_replays_total", cause="topic_changed") == 0


def test_a_stale_topic_id_waits_for_the_broker_instead_of_resetting_the_fence() -> None:
    # Issue 20, item 10: this process cached OLD; the topic was recreated and another owner
    # already moved the fence to NEW. The broker cannot tell the id now (OLD is a guess).
    rig = Rig()
    rig.topics.topic_id = OLD
    rig.consumer.assign([0])
    rig.store.set_applied_offset(0, 2, topic_id=NEW)
    rig.topics.fresh = False
    refresh = rig.topics.refresh
    fences: list[Fence] = []

    def broker_tells_on_the_third_ask(partitions: Collection[int]) -> dict[int, int]:
        fences.append(rig.store.fence(0))
        if rig.topics.refreshes == 2:
            rig.topics.topic_id, rig.topics.fresh = NEW, True
        return refresh(partitions)

    rig.topics.refresh = broker_tells_on_the_third_ask  # type: ignore[method-assign]
    _queue(rig, 0, range(3, 5), "new-")
    rig.step_until(lambda: rig.consumer.committed_offsets.get(0) == 5)
    assert len(fences) == 2  # one ask without an answer (a wait), then the one that told
    assert all(found == Fence(2, NEW) for found in fences), fences
    assert rig.store.fence(0) == Fence(4, NEW)
    assert (0, OFFSET_BEGINNING) not in rig.consumer.seeks
    assert rig.metrics.value("digest_replays_total", cause="topic_changed") == 0
    assert rig.consumer.pauses >= 1  # waited serving the group
    assert not rig.consumer.paused  # and resumed


def test_a_timeline_moved_by_a_grown_topic_is_counted() -> None:
    # Issue 20, item 7: the count read at an assignment grew 2 -> 4; a timeline whose key went
    # to partition 0 or 1 before now arrives on 2 or 3 while its old partition holds state.
    rig = Rig()
    timeline = next(t for t in (f"t{n}" for n in range(1000)) if murmur2_choice(t.encode(), 4) >= 2)
    old, new = murmur2_choice(timeline.encode(), 2), murmur2_choice(timeline.encode(), 4)
    rig.topics.partitions = 2
    rig.consumer.assign([0, 1])
    rig.send(timeline.encode(), "before", partition=old)
    rig.step_until(lambda: rig.store.inspect(old, timeline).state != "absent")
    rig.consumer.revoke([0, 1])
    rig.topics.partitions = 4
    rig.consumer.assign([0, 1, 2, 3])
    rig.send(timeline.encode(), "after", partition=new)
    rig.step_until(lambda: rig.store.inspect(new, timeline).state != "absent")
    assert rig.metrics.value("digest_timelines_moved_total") == 1


def test_rebalances_are_counted_by_kind() -> None:
    rig = Rig()
    rig.consumer.assign([0, 1])
    rig.consumer.revoke([1])
    rig.consumer.lose([0])
    for kind in ("assigned", "revoked", "lost"):
        expected = 2 if kind == "assigned" else 1
        assert rig.metrics.value("digest_rebalances_total", role="ingest", kind=kind) == expected
