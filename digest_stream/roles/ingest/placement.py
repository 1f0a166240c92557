"""Do events arrive on the partition the `partitioner` setting picks for their key? Sampled.

A timeline's state lives on the partition its events arrive on, and a control acts only on
the partition it is read from. Events from a producer that partitions otherwise (librdkafka's
default, CRC32, where the setting says murmur2) still work, but controls sent by EventProducer
(or by anyone following the setting) land elsewhere. This check makes that visible: a counter
and a WARNING naming the setting. One message per partition batch is hashed, at a rotating
position, so the hot path pays one hash per batch, not one per event; a misconfigured
producer puts most of its keys elsewhere and is caught within a few batches.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Final

from confluent_kafka import Message
from prometheus_client import Counter

from digest_stream.roles.ingest.topic import TopicProbe
from digest_stream.settings import env_name
from digest_stream.wire.partitioner import Partitioner, partition_for

log = logging.getLogger(__name__)

WARN_EVERY: Final = 60.0
"""Seconds between two WARNING lines (the counter counts every miss the samples found)."""


class PlacementCheck:
    """Samples one key per partition batch against the configured partitioner."""

    def __init__(
        self, partitioner: Partitioner, topics: TopicProbe, missed: Counter, topic: str
    ) -> None:
        self._partitioner = partitioner
        self._topics = topics
        self._missed = missed
        self._topic = topic
        self._turn = 0
        self._warned_at = -math.inf
        self._since_warning = 0

    def sample(self, partition: int, batch: Sequence[Message], now: float) -> None:
        """Check one message of this partition's batch (the topic's size must be known)."""
        count = self._topics.partitions
        if not count or not batch:
            return  # the broker never described the topic: nothing to compare with
        self._turn += 1
        key = batch[self._turn % len(batch)].key()
        if not key:
            return  # dead-lettered anyway
        expected = partition_for(self._partitioner, key, count)
        if expected == partition:
            return
        self._missed.inc()
        self._since_warning += 1
        if now - self._warned_at < WARN_EVERY:
            return
        log.warning(
            "topic %s: an event of timeline %r arrived on partition %d, but %s=%s puts it on "
            "partition %d (%d such sample(s) since the last warning): its producer uses "
            "another partitioner (librdkafka's default is consistent_random). Its timeline "
            "works, but flush/cancel sent by EventProducer land on another partition and do "
            "nothing; set %s to the producers' partitioner (or theirs to this one)",
            self._topic, key.decode("utf-8", "replace"), partition, env_name("partitioner"),
            self._partitioner, expected, self._since_warning, env_name("partitioner"),
        )  # fmt: skip
        self._warned_at, self._since_warning = now, 0
