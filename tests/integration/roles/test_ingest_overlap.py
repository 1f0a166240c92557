"""The ingest's overlapping batches: a rebalance callback that lands while a batch is in flight.

The callbacks are invoked the way librdkafka invokes them (inside the role's thread, between
batches), on a real consumer, broker and Redis, at the one moment that matters: a batch's store
call has run on the worker but the role's thread has not booked it yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Producer

from digest_stream.clock import SystemClock
from digest_stream.kafka import producer_config
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.ingest import ingest_role
from digest_stream.settings import Settings
from digest_stream.store import DigestStore, connect
from digest_stream.wire import codec
from digest_stream.wire.models import Event
from tests.support import wait_until
from tests.support.pipeline import Pipeline, PipelineFactory
from tests.support.proxy import TcpProxy


def produce(pipe: Pipeline, partition: int, first: int, count: int) -> None:
    """Events r<first>..r<first+count-1> of timeline "t" into one partition."""
    producer = Producer({"bootstrap.servers": pipe.settings.kafka_bootstrap_servers})
    now_ms = int(time.time() * 1000)
    for n in range(first, first + count):
        value = codec.encode_event(Event(id=f"r{n}", timestamp=now_ms, payload=b"x"))
        producer.produce(pipe.settings.events_topic, key=b"t", value=value, partition=partition)
    assert producer.flush(10) == 0


class Harness:
    """One Ingest role driven step by step by the test."""

    def __init__(self, pipe: Pipeline, settings: Settings | None = None) -> None:
        # These tests count the records stored for "t" (pending, each once): none may leave
        # in a leading digest (which would also make the step wait out an outage in settle).
        base = settings or pipe.settings
        self.settings = base.model_copy(update={"direct_leading_edge": False})
        self.store: DigestStore = connect(self.settings)
        self.metrics = Metrics()
        self.stopping = False
        producer = Producer(producer_config(self.settings))
        self.runner, self.ingest = ingest_role(
            self.settings, self.store, SystemClock(), self.metrics, producer
        )
        self.runner.start(self.ingest, lambda: self.stopping)

    def close(self) -> None:
        """The graceful stop: the role finishes, the consumer leaves its group."""
        self.runner.close(self.ingest)

    def step_until(self, condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.ingest.step()

    def store_calls(self) -> float:
        """Store calls the ingest finished (its digest_store_call_seconds{operation="add"})."""
        count = self.metrics.registry.get_sample_value(
            "digest_store_call_seconds_count", {"operation": "add"}
        )
        return count or 0.0

    def fetched(self, count: int) -> None:
        """Wait (not stepping) until the consumer has fetched `count` events nobody took yet."""
        wait_until(lambda: self.runner.lag().get(0) == count, 30, f"{count} events fetched")

    def stored_not_booked(self, count: int) -> None:
        """Take `count` fetched events in one step (which hands them to the store worker),
        then wait for their store call only: nothing books it before the next step."""
        self.fetched(count)
        calls = self.store_calls()
        self.ingest.step()
        assert self.runner.lag()[0] == 0  # all taken by that one step
        wait_until(lambda: self.store_calls() == calls + 1, 30, "the batch's store call")

    def applied_and_committed(self, pipe: Pipeline, count: int) -> None:
        """Produce `count` events to partition 0 and step until all are stored and committed."""
        produce(pipe, 0, 0, count)
        self.step_until(
            lambda: pipe.committed(0) == count, f"the first {count} events applied and committed"
        )

    def revoke(self, partition: int) -> None:
        """Run the revocation callback as librdkafka would, inside the role's thread."""
        self.ingest.on_revoke([partition])


def test_a_revocation_books_and_commits_the_batch_in_flight(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=1)
    harness = Harness(pipe)
    try:
        harness.step_until(lambda: 0 in harness.ingest.owned, "the assignment")
        produce(pipe, 0, 0, 20)
        harness.stored_not_booked(20)
        fence = harness.store.applied_offset(0)
        assert fence == 19
        assert pipe.committed(0) < 0  # stored, not booked
        harness.revoke(0)
        # The callback booked the batch and committed exactly what it applied.
        assert pipe.committed(0) == fence + 1
        assert harness.ingest.owned == frozenset()
    finally:
        harness.close()


def test_a_fence_found_behind_during_a_callback_is_rewound_on_the_role_thread(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=2)
    harness = Harness(pipe)
    try:
        harness.step_until(lambda: harness.ingest.owned == {0, 1}, "the assignment")
        harness.applied_and_committed(pipe, 20)
        # Redis loses writes: its fence goes back to 9 while this process applied through 19.
        harness.store.set_applied_offset(0, 9)
        produce(pipe, 0, 20, 10)
        harness.stored_not_booked(10)
        # Partition 1 is revoked meanwhile: the callback must neither seek nor commit past the
        # batch that found the fence behind; it keeps it for the role's thread, which rewinds.
        harness.revoke(1)
        assert pipe.committed(0) == 20
        harness.step_until(
            lambda: harness.store.applied_offset(0) == 29 and pipe.committed(0) == 30,
            "the rewind and replay of partition 0",
        )
        replays = harness.metrics.replays.labels(cause="fence_behind")._value.get()
        assert replays == 1
        assert harness.store.inspect(0, "t").pending == 30  # r0..r29, each once
    finally:
        harness.close()


def test_a_batch_kept_for_the_role_thread_is_dropped_when_its_partition_goes(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=1)
    harness = Harness(pipe)
    try:
        harness.step_until(lambda: 0 in harness.ingest.owned, "the assignment")
        harness.applied_and_committed(pipe, 10)
        harness.store.set_applied_offset(0, 4)  # Redis lost writes
        produce(pipe, 0, 10, 10)
        harness.stored_not_booked(10)
        harness.revoke(0)
        # Not booked, not committed, not kept: the next owner replays from the committed offset
        # (10) and its own fence check, and nothing of this process acts on the partition.
        harness.ingest.step()
        assert pipe.committed(0) == 10
        assert harness.store.applied_offset(0) == 4
        assert harness.metrics.replays.labels(cause="fence_behind")._value.get() == 0
    finally:
        harness.close()


def test_a_batch_given_up_is_read_again_before_anything_after_it(
    pipeline_factory: PipelineFactory, redis_url: str
) -> None:
    pipe = pipeline_factory(partitions=1)
    host, port = redis_url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    with TcpProxy(host, int(port)) as proxy:
        harness = Harness(pipe, pipe.with_settings(redis_url=f"redis://{proxy.address}/0"))
        try:
            harness.step_until(lambda: 0 in harness.ingest.owned, "the assignment")
            harness.applied_and_committed(pipe, 10)
            proxy.block()  # Redis unreachable
            produce(pipe, 0, 10, 10)  # batch A: its call fails on the worker
            harness.stored_not_booked(10)
            produce(pipe, 0, 20, 10)  # batch B: read while A waits for Redis
            harness.fetched(10)
            harness.stopping = True  # a stop request during the outage: A is given up
            harness.ingest.step()
            # A is given up, not committed, and read again before B: B must not be stored
            # before A (its fence would pass A's offsets for good).
            assert pipe.committed(0) == 10
            proxy.unblock()
            harness.stopping = False
            harness.step_until(
                lambda: harness.store.applied_offset(0) == 29 and pipe.committed(0) == 30,
                "A and B applied after the outage",
            )
            assert harness.store.inspect(0, "t").pending == 30  # r0..r29: A was not lost
        finally:
            harness.close()
