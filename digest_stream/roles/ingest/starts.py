"""Where each input partition is read from: at assignment, and when the consumer went back.

The fence rules (fence.py) decide; this piece gathers what it needs (the group's commit, the
store's fence and its topic id, the broker's topic id and the partition's end) and carries the
decision out through the ledger and the applier.
"""

from __future__ import annotations

import logging

from confluent_kafka import OFFSET_INVALID, TopicPartition

from digest_stream.roles.ingest import fence
from digest_stream.roles.ingest.applier import Applier
from digest_stream.roles.ingest.ledger import Ledger
from digest_stream.roles.ingest.topic import TopicProbe
from digest_stream.roles.ingest.worker import Batch
from digest_stream.roles.runner import Runner
from digest_stream.store.base import DigestStore
from digest_stream.store.errors import BackendError, unavailable

log = logging.getLogger(__name__)


class Starts:
    """Start positions of assigned partitions, and the check when the consumer went back."""

    def __init__(
        self,
        store: DigestStore,
        on_state_loss: fence.StateLoss,
        runner: Runner,
        ledger: Ledger,
        applier: Applier,
        topics: TopicProbe,
    ) -> None:
        self._store = store
        self._on_state_loss = on_state_loss
        self._runner = runner
        self._ledger = ledger
        self._applier = applier
        self._topics = topics

    @property
    def topic_id(self) -> str | None:
        """The events topic's id as last seen (None: never told); the store checks it."""
        return self._topics.topic.value

    def assigned(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Own these partitions; returns where each starts."""
        starts = []
        # One bounded round trip for the topic id and every partition's end (topic.py).
        ends = self._topics.refresh([tp.partition for tp in partitions])
        for tp in self._runner.committed(partitions):
            decision = self._starting(tp.partition, tp.offset, ends.get(tp.partition))
            offset = self._act_at_start(tp.partition, decision)
            if offset == OFFSET_INVALID and tp.error is None:
                # No commit (just read): where auto.offset.reset would start, said at once.
                offset = self._runner.reset_start
            starts.append(TopicPartition(tp.topic, tp.partition, offset))
        return starts

    def _starting(self, partition: int, committed: int, end: int | None) -> fence.Decision:
        try:
            found = self._store.fence(partition)
        except BackendError as exc:  # the first add checks the fence instead
            if not unavailable(exc):
                raise
            log.error(
                "partition %d: %s unreachable at assignment (%s)", partition, exc.backend, exc
            )
            return fence.start_without_store(committed)
        return fence.start(
            partition,
            committed,
            found.offset,
            self._on_state_loss,
            fence_topic=found.topic_id,
            topic=self._topics.topic,
            end=end,
        )

    def _act_at_start(self, partition: int, decision: fence.Decision) -> int:
        """Own the partition as decided; returns where to start reading it."""
        assert decision.offset is not None  # a start always names where to read
        self._ledger.assign(partition, decision.offset, decision.expected)
        self._applier.note(decision)
        if decision.reset:
            self._applier.reset_fence(partition, decision.expected, retry=False)
        return decision.offset

    def went_back(self, batch: Batch) -> bool:
        """The consumer reset its position by itself: is this still the topic of the fence?

        librdkafka resets a position past the partition's end (the topic was recreated, the
        log truncated) to auto.offset.reset, silently. Ask the broker for the topic id (a new
        one: the fence left is the old topic's; the store compares it too) and the partition's
        end (a fence past it is an offset reset). False when the batch is dropped (the
        decision seeks).
        """
        partition = batch.partition
        log.warning(
            "partition %d: the consumer went back to offset %d by itself (offset reset); "
            "checking the topic",
            partition,
            batch.first,
        )
        end = self._topics.refresh([partition]).get(partition)
        decision = fence.foreign(
            partition,
            self._on_state_loss,
            fence=self._ledger.expected(partition),
            fence_topic=self._ledger.topic(partition),
            topic=self._topics.topic,
            end=end,
            resume_at=None,
        )
        if decision is None:
            return True
        if decision.wait:
            # The batch goes to the store under the id last seen: a fence naming another is
            # refused there, and the applier waits for the broker (nothing reset on a guess).
            self._applier.note(decision)
            return True
        self._applier.act(partition, decision)
        return decision.apply_now
