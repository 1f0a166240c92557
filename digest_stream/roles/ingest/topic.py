"""The events topic as the broker describes it: which incarnation this process reads (its topic
id), its partitions' ends, and its growth (timelines split by it, counted).

The fence's offsets only mean something for one incarnation of the topic (a topic deleted and
created again, renamed in the settings, or mirrored to another cluster starts its offsets
afresh). The broker names an incarnation by its topic id; the end offset (high watermark) of a
partition tells, when the id cannot, that a fence lies beyond anything the partition holds.

Both come from one admin round trip, bounded in time, because an assignment handler runs it:
a broker that cannot tell (an old broker without topic ids, an ACL without Describe, a slow
answer, a topic being recreated) leaves the last known id in place, marked not fresh, or none,
with one WARNING line. Without any id the fence works as it did before topic ids (an offset
past the end is still detected); a stale id never resets a fence (fence.py).

A timeline's state lives with the input partition its key goes to. When partitions are added to
the events topic, a key can go to another partition from then on (the partitioner setting's
hash modulo the new count): the timeline starts over there (a second leading edge, its cool-
down not honoured) while its old partition still holds its pending records and cool-down, and
delivers them when that cool-down ends. Nothing is lost; the digests split. ``MovedTimelines``
notices the growth (at an assignment, from the partition count the probe reads) and, for a
while, samples the batches' timelines: one whose key went elsewhere under the old count and
whose old partition still holds state is counted (``digest_timelines_moved_total``) and logged.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec  # not re-exported for mypy in 2.16

from digest_stream.ops.metrics import Metrics
from digest_stream.store.base import DigestStore, NewRecord
from digest_stream.store.errors import BackendError
from digest_stream.vocabulary import State

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


#: Store look-ups per partition batch at most: the check runs on the ingest's thread.
CHECKS_PER_BATCH = 8
#: Keys hashed per partition batch at most: the partitioner's hash is pure Python (5-15 us), and
#: a watch lasts up to the largest maximum_delay, so a batch of new timelines must not pay one
#: per record for that long.
HASHES_PER_BATCH = 256
#: Timelines remembered as checked (each is looked up once per growth).
TRACKED = 100_000
#: Moved timelines named in the log, one line each; later ones are only counted.
NAMED = 20
#: The shortest watch after a growth (seconds), whatever the policies' maximum_delay.
MIN_WATCH = 60.0


@dataclass
class _Growth:
    old: int
    new: int
    until: float  # monotonic


class MovedTimelines:
    """Counts timelines whose old partition still holds state after the topic grew."""

    def __init__(
        self,
        store: DigestStore,
        metrics: Metrics,
        topic: str,
        watch: float,
        place: Callable[[bytes, int], int],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        # Where the producers put a key among n partitions (a partitioner setting selects it).
        self._place = place
        self._metrics = metrics
        self._topic = topic
        # Long enough for the old partitions to deliver what they held (maximum_delay).
        self._watch = max(watch, MIN_WATCH)
        self._monotonic = monotonic
        self._count: int | None = None
        self._growth: _Growth | None = None
        self._checked: set[str] = set()
        self._found = 0

    def counted(self, partitions: int | None) -> None:
        """The topic's partition count as just read (None: unknown); notices a growth."""
        if partitions is None:
            return
        before, self._count = self._count, partitions
        if before is None or partitions <= before:
            return
        self._growth = _Growth(before, partitions, self._monotonic() + self._watch)
        self._checked.clear()
        log.warning(
            "topic %s grew from %d to %d partitions: a timeline whose key now goes to another "
            "partition starts over there (a second leading edge) while its old partition "
            "delivers what it holds at the end of its cool-down; nothing is lost. Counting "
            "them (digest_timelines_moved_total) for %.0fs",
            self._topic,
            before,
            partitions,
            self._watch,
        )

    def _watching(self) -> bool:
        return self._growth is not None and self._monotonic() < self._growth.until

    def check(self, partition: int, records: Sequence[NewRecord]) -> None:
        """Sample a batch's timelines for ones split by the growth (a few look-ups at most)."""
        growth = self._growth
        if growth is None:
            return
        if not self._watching():
            self._end(growth)
            return
        looked = hashed = 0
        checked = self._checked
        for record in records:
            timeline = record.timeline
            if timeline in checked:
                continue
            if looked >= CHECKS_PER_BATCH or hashed >= HASHES_PER_BATCH or len(checked) >= TRACKED:
                return  # sampled: the next batches look at the rest
            checked.add(timeline)
            hashed += 1
            old = self._place(timeline.encode(), growth.old)
            if old == partition:
                continue  # it did not move
            looked += 1
            try:
                state = self._store.inspect(old, timeline).state
            except BackendError:
                return  # accounting only: the add's own retries handle an outage
            if state != State.ABSENT:
                self._moved(timeline, old, partition)

    def _moved(self, timeline: str, old: int, new: int) -> None:
        self._metrics.timelines_moved.inc()
        self._found += 1
        if self._found <= NAMED:
            log.info(
                "timeline %r moved from partition %d to %d (the topic grew): its digests "
                "split; the old partition still holds its state and delivers it",
                timeline,
                old,
                new,
            )

    def _end(self, growth: _Growth) -> None:
        log.info(
            "topic %s: %d timelines found split by the growth from %d to %d partitions",
            self._topic,
            self._found,
            growth.old,
            growth.new,
        )
        self._growth, self._found = None, 0
        self._checked.clear()
