"""What the runner's outage pause relies on, against the real broker (roles/runner.py).

librdkafka keeps a partition's pause through a revocation and the next assignment: a
partition paused by a wait (a publish retry's backoff, a Redis outage), revoked or lost
meanwhile and assigned again after the wait ended, is never fetched unless resumed. So the
runner resumes what it is assigned outside a wait (tests/unit/roles/test_runner.py).
"""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support import unique, wait_until
from tests.support.kafka import TopicFactory

PER_PARTITION = 50


def _member(bootstrap: str, group: str, topic: str, rebalances: list[str]) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "partition.assignment.strategy": "range",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )

    def assigned(_c: Consumer, _p: list[TopicPartition]) -> None:
        rebalances.append("assign")

    def revoked(_c: Consumer, _p: list[TopicPartition]) -> None:
        rebalances.append("revoke")

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
    return consumer


def test_a_pause_outlives_a_revocation_and_the_next_assignment(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for n in range(2 * PER_PARTITION):
        producer.produce(topic, b"x", partition=n % 2)
    assert producer.flush(10) == 0
    group = unique("pause")
    first: list[str] = []
    member = _member(kafka_bootstrap, group, topic, first)
    other: Consumer | None = None
    try:
        wait_until(lambda: member.poll(0.1) is None and bool(member.assignment()), 30, "assigned")
        member.pause(member.assignment())
        other = _member(kafka_bootstrap, group, topic, [])
        joined = other

        def rebalanced() -> bool:
            joined.poll(0.05)
            member.poll(0.05)
            return first[-2:] == ["revoke", "assign"] and bool(joined.assignment())

        wait_until(rebalanced, 30, "the group rebalanced onto both members")
        kept = [tp.partition for tp in member.assignment()]
        got = 0
        for _ in range(40):  # 4 s of polling: every message of the partition would come
            message = member.poll(0.1)
            joined.poll(0)
            got += message is not None and message.error() is None
        assert got == 0, f"partition {kept} was read without a resume: the runner's assumption"
        member.resume(member.assignment())
        wait_until(lambda: member.poll(0.1) is not None, 30, "read once resumed")
    finally:
        member.close()
        if other is not None:
            other.close()
