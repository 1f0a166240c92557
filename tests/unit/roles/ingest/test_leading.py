"""The leading edge published by the ingest (direct_leading_edge), with a fake broker and the
reference store: the add opens the digest, one produce publishes it, the ack closes it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from digest_stream.clock import ManualClock
from digest_stream.store import MemoryStore, TimelinePolicy
from digest_stream.store.base import DigestTarget
from digest_stream.wire import codec
from digest_stream.wire.models import DigestReason, Event, ScheduleReason
from tests.support.fakes import message
from tests.support.ingest import EVENTS, OUTPUT, FlakyStore, IngestRig
from tests.support.store_errors import unreachable


class CloseFails(MemoryStore):
    """The reference store, unreachable for the first ``failures`` leading closes."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def close_leading(self, nonce: str, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        if self.failures:
            self.failures -= 1
            raise unreachable()
        return super().close_leading(nonce, targets, now)


class SlowStore(FlakyStore):
    """Unreachable for the first ``failures`` adds, each failure ``seconds`` of the clock."""

    def __init__(self, failures: int, clock: ManualClock, seconds: float, **kwargs: Any) -> None:
        super().__init__(failures, **kwargs)
        self.clock, self.seconds = clock, seconds

    def add(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures:
            self.clock.advance(self.seconds)
        return super().add(*args, **kwargs)


class Rig(IngestRig):
    def __init__(self, store: MemoryStore | None = None, **overrides: Any) -> None:
        super().__init__(store, direct_leading_edge=True, **overrides)

    def send(  # type: ignore[override]  # a timeline name, not raw key bytes
        self, timeline: str, record_id: str = "r", partition: int = 0, age: float = 0.0
    ) -> None:
        super().send(timeline.encode(), record_id, partition, age)


def test_new_timelines_are_published_by_the_ingest_and_closed_once_acknowledged() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    for n in range(5):
        rig.send(f"t{n}", f"r{n}")
    rig.step_until(lambda: len(rig.digests()) == 5 and rig.ingest.leading_in_flight == 0)
    digests = rig.digests()
    assert sorted((t, why, ids) for t, _, why, ids in digests) == [
        (f"t{n}", DigestReason.IMMEDIATE, [f"r{n}"]) for n in range(5)
    ]
    assert len({digest_id for _, digest_id, _, _ in digests}) == 5
    assert rig.entries() == []  # no schedule entry: no delivery hop
    for n in range(5):
        info = rig.store.inspect(0, f"t{n}")
        # closed: cooling down from the close, nothing open
        assert (info.state, info.open_digest, info.pending) == ("cooling", None, 0)
        assert info.last_delivery is not None
        assert info.due == info.last_delivery + rig.settings.policy().minimum_delay  # the cool-down
    assert rig.metrics.value("digest_digests_published_total") == 5
    assert rig.consumer.committed_offsets[0] == 5


def test_an_event_behind_a_leading_digest_in_flight_waits_behind_it() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    rig.producer.hold = True
    rig.send("t", "first")
    rig.step_until(lambda: rig.ingest.leading_in_flight == 1)  # produced, not acknowledged
    info = rig.store.inspect(0, "t")
    (first_id,) = [info.open_digest]
    assert (info.state, info.open_records) == ("ready", 1)  # its open digest until the ack
    rig.send("t", "second")
    rig.step_until(lambda: rig.consumer.committed_offsets.get(0) == 2)
    info = rig.store.inspect(0, "t")
    assert (info.state, info.open_digest, info.pending) == ("ready", first_id, 1)
    rig.producer.hold = False
    rig.step_until(lambda: rig.ingest.leading_in_flight == 0)
    assert [ids for _, _, _, ids in rig.digests()] == [["first"]]
    info = rig.store.inspect(0, "t")
    assert (info.state, info.pending, info.reason) == ("waiting", 1, "COOLDOWN")


def test_the_cool_down_starts_when_the_digest_is_built_not_when_the_batch_was_read() -> None:
    """Issue 26, item 3: an add that waited out an outage as long as minimum_delay opens the
    digest at the call's time, and the digest names a next delivery after it is published."""
    clock = ManualClock(time.time())
    policy = TimelinePolicy(minimum_delay=60.0)
    rig = Rig(SlowStore(3, clock, 20.0, policy=policy), clock=clock, minimum_delay=60.0)
    rig.consumer.assign([0])
    read_at = clock.now()
    rig.send("t", "r0")
    rig.step_until(lambda: rig.ingest.leading_in_flight == 0 and rig.digests() != [])
    (digest,) = [codec.decode_digest(v or b"") for _, v in rig.producer.on(OUTPUT)]
    assert clock.now() == read_at + 60.0  # three failed adds of 20 s each
    assert digest.next_delivery_at == int((read_at + 60.0 + 60.0) * 1000)
    info = rig.store.inspect(0, "t")
    assert (info.last_delivery, info.due) == (read_at + 60.0, read_at + 120.0)


def test_a_refused_publish_is_handed_to_delivery_under_the_same_id() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    rig.producer.refuse_next = 1
    rig.send("t", "r")
    rig.step_until(lambda: rig.entries() != [])
    assert rig.entries() == [("t", ScheduleReason.IMMEDIATE)]
    info = rig.store.inspect(0, "t")
    # Still open under the id the refused publish carried, so delivery reopens it.
    assert (info.state, info.open_records) == ("ready", 1)
    (refused,) = [codec.decode_digest(v or b"") for _, _, v in rig.producer.refused]
    assert info.open_digest == refused.id
    assert rig.digests() == []
    assert rig.metrics.value("digest_publish_retries_total") == 1
    assert rig.ingest.leading_in_flight == 0


def test_a_redis_outage_on_the_add_publishes_the_leading_digest_once_it_is_back() -> None:
    rig = Rig(FlakyStore(failures=3))
    rig.consumer.assign([0])
    rig.send("t", "r0")
    rig.step_until(
        lambda: rig.consumer.committed_offsets.get(0) == 1 and rig.ingest.leading_in_flight == 0
    )
    assert rig.consumer.pauses >= 1
    assert rig.consumer.paused == set()
    assert [(t, why, ids) for t, _, why, ids in rig.digests()] == [
        ("t", DigestReason.IMMEDIATE, ["r0"])
    ]
    assert rig.entries() == []
    assert rig.metrics.value("digest_redis_errors_total") == 3
    assert rig.store.inspect(0, "t").state == "cooling"  # closed


def test_a_close_that_finds_redis_down_is_tried_again_at_the_next_step() -> None:
    rig = Rig(CloseFails(failures=2))
    rig.consumer.assign([0])
    rig.send("t", "r0")
    rig.step_until(lambda: rig.store.inspect(0, "t").state == "cooling")
    assert rig.metrics.value("digest_redis_errors_total") == 2
    assert [ids for _, _, _, ids in rig.digests()] == [["r0"]]  # published once
    assert rig.entries() == []
    assert rig.ingest.leading_in_flight == 0


def test_an_acknowledged_digest_of_a_revoked_partition_is_still_closed() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    rig.send("t", "r")
    rig.ingest.step()
    rig.consumer.revoke([0])
    assert rig.ingest.leading_in_flight == 0
    info = rig.store.inspect(0, "t")
    assert (info.state, info.open_digest) == ("cooling", None)  # the next owner finds it closed
    assert [t for t, _, _, _ in rig.digests()] == ["t"]


def test_the_take_over_announces_digests_never_acknowledged() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    rig.producer.hold = True  # produced, never acknowledged: as if the process died here
    rig.send("t", "r")
    rig.step_until(lambda: rig.ingest.leading_in_flight == 1)
    taken = Rig(rig.store)  # the next owner, on the same store
    taken.consumer.assign([0])
    taken.step_until(lambda: taken.entries() != [])
    assert taken.entries() == [("t", ScheduleReason.RECOVERED)]
    assert rig.store.inspect(0, "t").state == "ready"


def test_collapse_by_and_policies_apply_as_in_delivery() -> None:
    rig = Rig(collapse_by="kind")
    rig.consumer.assign([0])
    for record_id in ("a", "b"):
        value = codec.encode_event(
            Event(id=record_id, timestamp=int(time.time() * 1000), payload=b"p",
                  attributes={"kind": "x"})
        )  # fmt: skip
        rig.consumer.queued.append(message(EVENTS, 0, rig.offsets, b"t", value))
        rig.offsets += 1
    rig.step_until(lambda: rig.producer.on(OUTPUT) != [])
    (digest,) = [codec.decode_digest(v or b"") for _, v in rig.producer.on(OUTPUT)]
    assert [(r.id, r.count) for r in digest.records] == [("b", 2)]
    assert digest.total == 2


def test_a_batch_produce_refused_as_a_whole_hands_every_digest_to_delivery() -> None:
    rig = Rig()
    rig.consumer.assign([0])

    def refused(*_: Any, **__: Any) -> int:
        raise KafkaException(KafkaError(KafkaError._UNKNOWN_TOPIC))

    rig.producer.produce_batch = refused  # type: ignore[method-assign]
    for n in range(3):
        rig.send(f"t{n}", f"r{n}")
    rig.step_until(lambda: len(rig.entries()) == 3)
    assert sorted(rig.entries()) == [(f"t{n}", ScheduleReason.IMMEDIATE) for n in range(3)]
    for n in range(3):
        info = rig.store.inspect(0, f"t{n}")
        assert (info.state, info.open_records) == ("ready", 1)  # still open, same id
    assert rig.ingest.leading_in_flight == 0


def test_a_handler_closes_the_acknowledged_digests_of_an_add_still_answering() -> None:
    # One add leads two timelines; the broker has answered for one when the partition is
    # revoked: that one is closed in the handler, the other when its own report comes.
    rig = Rig()
    rig.consumer.assign([0])
    rig.producer.hold = True
    rig.send("a", "r1")
    rig.send("b", "r2")
    rig.step_until(lambda: rig.ingest.leading_in_flight == 2)
    (first_report, first), second = rig.producer.pending
    assert first.key() == b"a"
    assert first_report is not None
    first_report(None, first)  # the broker's answer for "a" only
    rig.producer.pending = [second]
    rig.consumer.revoke([0])
    assert rig.ingest.leading_in_flight == 1  # "b" is still on its way
    assert rig.store.inspect(0, "a").state == "cooling"
    assert rig.store.inspect(0, "b").state == "ready"  # open, behind its publish
    rig.producer.hold = False
    rig.step_until(lambda: rig.ingest.leading_in_flight == 0)
    assert rig.store.inspect(0, "b").state == "cooling"


def test_a_failed_part_fails_its_own_digest_of_the_add_alone() -> None:
    # The add's reports are counted together; the one that failed names its digest by key.
    rig = Rig()
    rig.consumer.assign([0])
    rig.producer.hold = True
    for name in ("a", "b", "c"):
        rig.send(name, f"r-{name}")
    rig.step_until(lambda: rig.ingest.leading_in_flight == 3)
    (report_a, a), (report_b, b), (report_c, c) = rig.producer.pending
    rig.producer.pending = []
    assert report_a is not None
    assert report_b is not None
    assert report_c is not None
    report_a(None, a)
    report_b(KafkaError(KafkaError._MSG_TIMED_OUT), b)
    report_c(None, c)
    rig.producer.hold = False
    rig.step_until(lambda: rig.ingest.leading_in_flight == 0)
    states = {name: rig.store.inspect(0, name).state for name in ("a", "b", "c")}
    assert states == {"a": "cooling", "b": "ready", "c": "cooling"}  # b: left to delivery
    assert rig.entries() == [("b", ScheduleReason.IMMEDIATE)]  # announced, same digest
