"""The sampled placement check (issue 20, item 6): one key per partition batch is compared with
the partitioner setting's choice; misses are counted, and warned about at most once a minute."""

from __future__ import annotations

import logging

import pytest

from digest_stream.ops.metrics import Metrics
from digest_stream.roles.ingest.check import WARN_EVERY, PlacementCheck
from digest_stream.wire.partitioner import Partitioner, partition_for
from tests.support.fakes import FakeTopics, message

PARTITIONS = 2
MISSED = "digest_events_mispartitioned_total"


def _keys_on(partitioner: Partitioner, partition: int, n: int) -> list[bytes]:
    keys = (f"t{i}".encode() for i in range(1000))
    return [k for k in keys if partition_for(partitioner, k, PARTITIONS) == partition][:n]


def _check(metrics: Metrics, count: int | None = PARTITIONS) -> PlacementCheck:
    topics = FakeTopics(partitions=count)
    return PlacementCheck("murmur2_random", topics, metrics.events_mispartitioned, "ev")


def test_one_message_per_batch_is_checked_and_a_miss_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    check = _check(metrics)
    right = [message("ev", 0, i, k, b"v") for i, k in enumerate(_keys_on("murmur2_random", 0, 5))]
    check.sample(0, right, now=0.0)
    assert metrics.value(MISSED) == 0
    # Keys murmur2 puts on partition 1 arriving on 0: a CRC32 producer's, say.
    wrong = [message("ev", 0, i, k, b"v") for i, k in enumerate(_keys_on("murmur2_random", 1, 5))]
    with caplog.at_level(logging.WARNING):
        check.sample(0, wrong, now=1.0)
        check.sample(0, wrong, now=2.0)  # counted, not warned again within WARN_EVERY
        assert metrics.value(MISSED) == 2  # one per batch, not one per message
        assert len(caplog.records) == 1
        assert "DIGEST_STREAM_PARTITIONER=murmur2_random" in caplog.records[0].getMessage()
        check.sample(0, wrong, now=1.0 + WARN_EVERY)
        assert len(caplog.records) == 2
        assert "(2 such sample(s) since the last warning)" in caplog.records[1].getMessage()


def test_nothing_is_checked_while_the_topic_size_is_unknown() -> None:
    metrics = Metrics()
    wrong = [message("ev", 0, 0, k, b"v") for k in _keys_on("murmur2_random", 1, 1)]
    _check(metrics, count=None).sample(0, wrong, now=0.0)
    _check(metrics).sample(0, [message("ev", 0, 0, None, b"v")], now=0.0)  # no key: DLQ's
    assert metrics.value(MISSED) == 0
