"""The leading edge published by the ingest (direct_leading_edge), with a fake broker and the
reference store: one add gives the digest, one produce publishes it, the ack settles it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import redis

from digest_stream.store import MemoryStore
from digest_stream.store.base import NewRecord
from digest_stream.wire import codec
from digest_stream.wire.models import DigestReason, Event, ScheduleReason
from tests.support.fakes import message
from tests.support.ingest import EVENTS, OUTPUT, FlakyStore, IngestRig


class ReclaimFails(MemoryStore):
    """The reference store, unreachable for the first ``failures`` reclaims."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def reclaim(
        self, partition: int, now: float, digest_ids: Sequence[str] | None = None
    ) -> list[str]:
        if self.failures:
            self.failures -= 1
            raise redis.ConnectionError("unreachable (test)")
        return super().reclaim(partition, now, digest_ids)


class Rig(IngestRig):
    def __init__(self, store: MemoryStore | None = None, **overrides: Any) -> None:
        super().__init__(store, direct_leading_edge=True, **overrides)

    def send(  # type: ignore[override]  # a timeline name, not raw key bytes
        self, timeline: str, record_id: str = "r", partition: int = 0, age: float = 0.0
    ) -> None:
        super().send(timeline.encode(), record_id, partition, age)


def test_new_timelines_are_published_by_the_ingest_and_settled_once_acknowledged() -> None:
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
        assert (info.state, info.open_digest, info.pending) == ("waiting", None, 0)
        assert info.last_delivery is not None
        assert info.due == info.last_delivery + rig.settings.minimum_delay  # the cool-down
    assert rig.metrics.value("digest_digests_published_total") == 5
    assert rig.consumer.committed_offsets[0] == 5
    assert rig.store.reclaim(0, time.time()) == []  # every one settled: none kept


def test_an_event_behind_a_leading_digest_in_flight_waits_for_the_cool_down() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    rig.producer.hold = True
    rig.send("t", "first")
    rig.step_until(lambda: rig.ingest.leading_in_flight == 1)  # produced, not acknowledged
    assert rig.store.inspect(0, "t").state == "waiting"  # cooling down since the add
    rig.send("t", "second")
    rig.producer.hold = False
    rig.step_until(lambda: rig.consumer.committed_offsets.get(0) == 2)
    assert [ids for _, _, _, ids in rig.digests()] == [["first"]]
    info = rig.store.inspect(0, "t")
    assert (info.state, info.pending, info.reason) == ("waiting", 1, "COOLDOWN")


def test_a_refused_publish_is_handed_to_delivery_under_the_same_id() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    rig.producer.refuse_next = 1
    rig.send("t", "r")
    rig.step_until(lambda: rig.entries() != [])
    assert rig.entries() == [("t", ScheduleReason.IMMEDIATE)]
    info = rig.store.inspect(0, "t")
    # Reclaimed: open under the id the refused publish carried, so delivery reopens it.
    assert (info.state, info.open_records) == ("ready", 1)
    assert info.open_digest is not None
    assert rig.digests() == []
    assert rig.metrics.value("digest_publish_retries_total") == 1


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
    assert rig.store.reclaim(0, time.time()) == []  # settled


def test_an_outage_waited_out_by_a_reclaim_announces_ready_timelines_again() -> None:
    # Redis may come back from an older snapshot, with READY timelines whose announcements
    # were consumed long ago: the reclaim's wait must re-announce them, as the add's does.
    rig = Rig(ReclaimFails(failures=3))
    rig.consumer.assign([0, 1])
    rig.ingest.step()  # the assignment's take-over tick: nothing READY yet
    record = NewRecord(timeline="old", id="r", timestamp=time.time(), payload=b"p", offset=0)
    rig.store.add(1, [record], time.time())  # READY, its announcement long gone
    rig.producer.refuse_next = 1  # the leading digest is handed back to delivery
    rig.send("t", "r0")
    rig.step_until(lambda: ("old", ScheduleReason.RECOVERED) in rig.entries())
    assert ("t", ScheduleReason.IMMEDIATE) in rig.entries()  # reclaimed once Redis answered
    assert rig.metrics.value("digest_redis_errors_total") == 3
    assert rig.digests() == []


def test_an_acknowledged_digest_of_a_revoked_partition_is_still_settled() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    rig.send("t", "r")
    rig.ingest.step()
    rig.consumer.revoke([0])
    assert rig.ingest.leading_in_flight == 0
    assert rig.store.reclaim(0, time.time()) == []  # settled: the next owner reclaims none
    assert [t for t, _, _, _ in rig.digests()] == ["t"]


def test_the_take_over_hands_unsettled_digests_to_delivery() -> None:
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
