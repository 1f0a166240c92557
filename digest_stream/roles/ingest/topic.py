"""Which incarnation of the events topic this process reads: its topic id and partition ends.

The fence's offsets only mean something for one incarnation of the topic (a topic deleted and
created again, renamed in the settings, or mirrored to another cluster starts its offsets
afresh). The broker names an incarnation by its topic id; the end offset (high watermark) of a
partition tells, when the id cannot, that a fence lies beyond anything the partition holds.

Both come from one admin round trip, bounded in time, because an assignment handler runs it:
a broker that cannot tell (an old broker without topic ids, an ACL without Describe, a slow
answer, a topic being recreated) leaves the last known id in place, marked not fresh, or none,
with one WARNING line. Without any id the fence works as it did before topic ids (an offset
past the end is still detected); a stale id never resets a fence (fence.py).
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec  # not re-exported for mypy in 2.16

log = logging.getLogger(__name__)

#: Seconds one lookup may take at most (it runs inside a rebalance handler).
LOOKUP_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class TopicId:
    """The events topic's id as this process knows it, and whether the broker just told it.

    ``fresh`` is False when the last ask got no answer: ``value`` is then only the id last
    seen (a guess), never grounds to replace a fence that names another one.
    """

    value: str | None
    fresh: bool


#: No id: the broker never told one (the fence then works as before topic ids).
NO_TOPIC_ID = TopicId(None, fresh=False)


class TopicProbe(Protocol):
    """The events topic's id (cached) and its partitions' end offsets, as the broker says."""

    @property
    def topic(self) -> TopicId:
        """The topic id last seen (value None: never told), fresh when the last ask told it."""
        ...

    @property
    def partitions(self) -> int | None:
        """How many partitions the topic had at the last answer; None before one."""
        ...

    def refresh(self, partitions: Collection[int]) -> dict[int, int]:
        """Ask the broker again; the end offsets of those partitions that answered."""
        ...


class BrokerTopic:
    """A TopicProbe over an AdminClient: one bounded round trip per refresh."""

    def __init__(self, admin: AdminClient, topic: str, timeout: float = LOOKUP_TIMEOUT) -> None:
        self._admin = admin
        self._topic = topic
        self._timeout = timeout
        self._topic_id: str | None = None
        self._fresh = False
        self._partitions: int | None = None
        self._warned = False

    @property
    def topic(self) -> TopicId:
        """The topic id last seen (value None: never told), fresh when the last ask told it."""
        return TopicId(self._topic_id, self._fresh)

    @property
    def partitions(self) -> int | None:
        """How many partitions the topic had at the last answer; None before one."""
        return self._partitions

    def refresh(self, partitions: Collection[int]) -> dict[int, int]:
        """Ask for the topic id and the partitions' ends at once; a failure leaves it stale."""
        described = self._admin.describe_topics(
            TopicCollection([self._topic]), request_timeout=self._timeout
        )[self._topic]
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]  # untyped in 2.16
        ends = self._admin.list_offsets(
            {TopicPartition(self._topic, p): latest for p in partitions},
            request_timeout=self._timeout,
        ) if partitions else {}  # fmt: skip
        concurrent.futures.wait([described, *ends.values()], timeout=self._timeout + 1.0)
        self._admin.poll(0)  # hand librdkafka's log lines over
        self._learn(described)
        found: dict[int, int] = {}
        for tp, future in ends.items():
            if future.done() and future.exception() is None:
                found[tp.partition] = int(future.result().offset)
        return found

    def _learn(self, described: concurrent.futures.Future[object]) -> None:
        problem = ""
        try:
            description = described.result(timeout=0)
        except (KafkaException, concurrent.futures.TimeoutError) as exc:
            description, problem = None, str(exc) or "no answer in time"
        uuid = getattr(description, "topic_id", None)
        # The placement check and the moved-timeline count need it; a failed describe keeps
        # the last one.
        self._partitions = len(getattr(description, "partitions", None) or ()) or self._partitions
        if uuid is not None and (
            uuid.get_most_significant_bits() or uuid.get_least_significant_bits()
        ):
            topic_id = str(uuid)
            if self._topic_id is not None and topic_id != self._topic_id:
                log.warning(
                    "topic %s: its topic id changed %s -> %s", self._topic, self._topic_id, topic_id
                )
            self._topic_id, self._fresh, self._warned = topic_id, True, False
            return
        self._fresh = False
        if not self._warned:
            self._warned = True
            log.warning(
                "topic %s: the broker did not tell its topic id (%s); %s",
                self._topic,
                problem or "no topic ids on this broker",
                f"keeping {self._topic_id}"
                if self._topic_id
                else "a recreated topic is detected only when its partitions end before the fence",
            )
