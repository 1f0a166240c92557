"""Timelines split by a grown events topic: counted, never silently.

A timeline's state lives with the input partition its key goes to. When partitions are added to
the events topic, a key can go to another partition from then on (the partitioner setting's
hash modulo the new count): the timeline starts over there (a second leading edge, its cool-
down not honoured) while its old partition still holds its pending records and cool-down, and
delivers them when that cool-down ends. Nothing is lost; the digests split. This piece notices
the growth (at an assignment, from the partition count the topic probe reads) and, for a while,
samples the batches' timelines: one whose key went elsewhere under the old count and whose old
partition still holds state is counted (``digest_timelines_moved_total``) and logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from digest_stream.ops.metrics import Metrics
from digest_stream.store.base import DigestStore, NewRecord
from digest_stream.store.errors import BackendError

log = logging.getLogger(__name__)

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
            if state != "absent":
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
