"""The runner owns a role's consumer: it joins, hands rebalances over, gives up, leaves."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from confluent_kafka import TopicPartition

from digest_stream.ops.metrics import Metrics
from digest_stream.roles.runner import Runner
from digest_stream.settings import Settings
from digest_stream.store.errors import StoreUnavailable
from tests.support import store_errors
from tests.support.fakes import FakeConsumer

TOPIC = "schedule"


@dataclass
class Recorder:
    """A role that only records what the runner tells it."""

    calls: list[tuple[str, list[int]]] = field(default_factory=list)

    def step(self) -> int:
        return 0

    def close(self) -> None:
        self.calls.append(("close", []))

    def on_assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self.calls.append(("assign", [tp.partition for tp in partitions]))
        return partitions

    def on_revoke(self, partitions: list[int]) -> None:
        self.calls.append(("revoke", partitions))

    def on_lost(self, partitions: list[int]) -> None:
        self.calls.append(("lost", partitions))


class AssignedWhileClosing(FakeConsumer):
    """A rebalance that lands while the consumer leaves its group."""

    def close(self) -> None:
        self.assign([2])
        super().close()


def _runner(consumer: FakeConsumer, metrics: Metrics | None = None) -> Runner:
    settings = Settings(schedule_topic=TOPIC, retry_backoff_initial=0.001, retry_backoff_max=0.01)
    rebalances = None if metrics is None else metrics.rebalances
    return Runner(settings, "delivery", consumer=consumer.as_consumer(), rebalances=rebalances)


def test_rebalances_reach_the_role_and_are_counted_under_its_name() -> None:
    consumer, metrics, role = FakeConsumer(TOPIC), Metrics(), Recorder()
    runner = _runner(consumer, metrics)
    runner.start(role, lambda: False)
    consumer.assign([0, 1])
    consumer.revoke([1])
    consumer.lose([0])
    assert role.calls == [("assign", [0, 1]), ("revoke", [1]), ("lost", [0])]
    assert [tp.partition for tp in consumer.assigned] == []
    assert metrics.value("digest_rebalances_total", role="delivery", kind="assigned") == 2


def test_closing_lets_the_role_finish_then_leaves_and_assigns_nothing_meanwhile() -> None:
    consumer, role = AssignedWhileClosing(TOPIC), Recorder()
    runner = _runner(consumer)
    runner.start(role, lambda: False)
    runner.close(role)
    # The role is not asked where partition 2 starts (its commit lookup would only time out
    # against a closing consumer) and nothing is assigned.
    assert role.calls == [("close", [])]
    assert consumer.assigned == []
    assert consumer.closed


def test_a_redis_outage_is_given_up_when_a_stop_is_asked_for() -> None:
    consumer, metrics, stopping = FakeConsumer(TOPIC), Metrics(), [False]
    runner = _runner(consumer)
    runner.start(Recorder(), lambda: stopping[0])
    calls = 0

    def unreachable() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            stopping[0] = True
        raise store_errors.unreachable()

    with pytest.raises(StoreUnavailable):
        runner.while_store_down(unreachable, errors=metrics.store_errors)
    assert calls == 3
    assert consumer.paused == set()  # resumed on the way out
    assert consumer.polls >= 2  # served the group between attempts


def test_a_partition_paused_then_lost_is_fetched_again_when_assigned_after_the_wait() -> None:
    # Chaos 6 lost 17,756 events this way: delivery paused its partitions for a publish
    # retry's backoff, its session timed out during the broker restart (lost), the wait
    # ended (resume: nothing assigned), and the partitions it got back stayed paused, as
    # librdkafka keeps a pause through a loss and a new assignment (the fake does too).
    consumer, role = FakeConsumer(TOPIC), Recorder()
    runner = _runner(consumer)
    runner.start(role, lambda: False)
    consumer.assign([0, 1])
    runner.wait_serving_group(0.0)
    assert consumer.paused == {0, 1}
    consumer.lose([0, 1])
    runner.resume()
    consumer.assign([0, 1])
    assert consumer.paused == set()
