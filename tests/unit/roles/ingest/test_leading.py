"""The leading edge published by the ingest (direct_leading_edge), with a fake broker and the
reference store: one add opens the digest, one produce publishes it, the ack closes it."""

from __future__ import annotations

import time
from collections.abc import Callable

from digest_stream.clock import SystemClock
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.ingest import ingest_role
from digest_stream.settings import Settings
from digest_stream.store import MemoryStore
from digest_stream.wire import codec
from digest_stream.wire.models import DigestReason, Event, ScheduleReason
from tests.support.fakes import FakeConsumer, FakeProducer, FakeTopics, message

EVENTS, SCHEDULE, OUTPUT, DLQ = "events", "schedule", "output", "dlq"


class Rig:
    def __init__(self, **overrides: object) -> None:
        self.settings = Settings(
            events_topic=EVENTS,
            schedule_topic=SCHEDULE,
            output_topic=OUTPUT,
            dlq_topic=DLQ,
            batch_timeout=0.0,
            retry_backoff_initial=0.001,
            retry_backoff_max=0.01,
            direct_leading_edge=True,
            **overrides,  # type: ignore[arg-type]
        )
        self.store = MemoryStore(policy=self.settings.policy())
        self.consumer = FakeConsumer(EVENTS)
        self.producer = FakeProducer()
        self.metrics = Metrics()
        runner, self.ingest = ingest_role(
            self.settings,
            self.store,
            SystemClock(),
            self.metrics,
            self.producer.as_producer(),
            consumer=self.consumer.as_consumer(),
            topics=FakeTopics(),
        )
        runner.start(self.ingest, lambda: False)
        self.offsets = 0

    def send(self, timeline: str, record_id: str = "r", partition: int = 0) -> None:
        value = codec.encode_event(
            Event(id=record_id, timestamp=int(time.time() * 1000), payload=b"p")
        )
        key = timeline.encode()
        self.consumer.queued.append(message(EVENTS, partition, self.offsets, key, value))
        self.offsets += 1

    def step_until(self, condition: Callable[[], bool], steps: int = 20) -> None:
        for _ in range(steps):
            if condition():
                return
            self.ingest.step()
        assert condition()

    def digests(self) -> list[tuple[str, str, DigestReason | None, list[str]]]:
        out = [codec.decode_digest(v or b"") for _, v in self.producer.on(OUTPUT)]
        return [(d.timeline, d.id, d.reason, [r.id for r in d.records]) for d in out]

    def entries(self) -> list[tuple[str, ScheduleReason]]:
        decoded = [codec.decode_schedule_entry(v or b"") for _, v in self.producer.on(SCHEDULE)]
        return [(e.timeline, e.reason) for e in decoded]


def test_new_timelines_are_published_by_the_ingest_and_closed_once_acknowledged() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    for n in range(5):
        rig.send(f"t{n}", f"r{n}")
    rig.step_until(lambda: rig.store.inspect(0, "t4").state == "waiting")
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


def test_an_event_behind_an_open_leading_digest_waits_for_the_cool_down() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    rig.send("t", "first")
    rig.ingest.step()  # added, opened, produced; not acknowledged yet
    assert rig.store.inspect(0, "t").open_digest is not None
    rig.send("t", "second")
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
    assert (info.state, info.open_records) == ("ready", 1)  # open: delivery reopens this id
    assert rig.digests() == []
    assert rig.metrics.value("digest_publish_retries_total") == 1


def test_an_acknowledged_digest_of_a_revoked_partition_is_still_closed() -> None:
    rig = Rig()
    rig.consumer.assign([0])
    rig.send("t", "r")
    rig.ingest.step()
    rig.consumer.revoke([0])
    info = rig.store.inspect(0, "t")
    assert (info.state, info.open_digest) == ("waiting", None)
    assert [t for t, _, _, _ in rig.digests()] == ["t"]


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
    rig.step_until(lambda: rig.store.inspect(0, "t").state == "waiting")
    (digest,) = [codec.decode_digest(v or b"") for _, v in rig.producer.on(OUTPUT)]
    assert [(r.id, r.count) for r in digest.records] == [("b", 2)]
    assert digest.total == 2
