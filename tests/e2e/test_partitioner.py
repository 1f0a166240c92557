"""Controls and the partitioner (issue 20, item 6), black-box: a user's stock confluent-kafka
`Producer` (librdkafka's default partitioner, CRC32) sends a timeline's events; the CLI's
`cancel` and `flush` must act where those events are, and the service must notice (a metric, a
WARNING naming the setting) that the configured partitioner would have put them elsewhere."""

from __future__ import annotations

import logging
import time

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from digest_stream.cli import main
from digest_stream.settings import Settings
from digest_stream.wire import codec
from digest_stream.wire.models import DigestReason, Event
from digest_stream.wire.partitioner import partition_for
from tests.support import wait_until
from tests.support.kafka import end_offsets
from tests.support.pipeline import PipelineFactory, cli_flags

T = 1_700_000_000_000
PARTITIONS = 2
MISPLACED = "digest_events_mispartitioned_total"


def _split_timeline(prefix: str) -> str:
    """A timeline that librdkafka's default (CRC32) and murmur2 put on different partitions."""
    for i in range(100):
        name = f"{prefix}{i}"
        key = name.encode()
        if partition_for("consistent_random", key, PARTITIONS) != partition_for(
            "murmur2_random", key, PARTITIONS
        ):
            return name
    raise AssertionError("no timeline in 100 whose partitions differ")


def _stock_send(settings: Settings, timeline: str, *ids: str) -> None:
    """What a user writes: a confluent-kafka Producer on its defaults, key = timeline."""
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap_servers})
    for n, record_id in enumerate(ids):
        event = Event(id=record_id, timestamp=T + n, payload=b"{}")
        producer.produce(
            settings.events_topic, key=timeline.encode(), value=codec.encode_event(event)
        )
    assert producer.flush(30) == 0


def test_cancel_and_flush_act_on_the_partition_of_a_stock_producers_events(
    pipeline_factory: PipelineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    pipe = pipeline_factory(
        partitions=PARTITIONS, minimum_delay=60.0, increment_delay=0.0, maximum_delay=60.0
    )
    caplog.set_level(logging.WARNING)
    app = pipe.app()
    out = pipe.output()
    flags = cli_flags(pipe.settings)
    runner = CliRunner()
    timeline = _split_timeline("stock-")
    held = partition_for("consistent_random", timeline.encode(), PARTITIONS)

    _stock_send(pipe.settings, timeline, "first")
    out.wait_for(lambda: len(out.digests) == 1, 30, "the immediate digest")
    _stock_send(pipe.settings, timeline, "a", "b")  # into the 60 s cool-down

    def pending() -> str:
        result = runner.invoke(main, ["inspect", timeline, *flags])
        assert result.exit_code == 0, result.output
        return result.output

    wait_until(lambda: "pending        2 records" in pending(), 20, "two pending records")
    cancelled = runner.invoke(main, ["cancel", timeline, "--yes", *flags])
    assert cancelled.exit_code == 0, cancelled.output
    wait_until(lambda: "pending        0 records" in pending(), 20, "the cancel applied")
    assert f"partition {held}" in cancelled.output

    _stock_send(pipe.settings, timeline, "c")
    wait_until(lambda: "pending        1 records" in pending(), 20, "c pending")
    flushed = runner.invoke(main, ["flush", timeline, *flags])
    assert flushed.exit_code == 0, flushed.output
    sent = time.monotonic()
    out.wait_for(lambda: len(out.digests) == 2, 20, "the flushed digest (well inside 60 s)")
    assert time.monotonic() - sent < 20
    second = out.digests[1]
    assert ([r.id for r in second.records], second.reason) == (["c"], DigestReason.FLUSHED)

    # The service noticed the events are not where DIGEST_STREAM_PARTITIONER puts them.
    assert app.metrics.value(MISPLACED) >= 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("DIGEST_STREAM_PARTITIONER" in w and timeline in w for w in warnings), warnings
    out.close()


def test_a_control_for_a_timeline_without_state_says_so_and_sends_nothing(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=PARTITIONS)
    flags = cli_flags(pipe.settings)
    runner = CliRunner()
    for command in (["flush", "nobody"], ["cancel", "nobody", "--yes"]):
        result = runner.invoke(main, [*command, *flags])
        assert result.exit_code == 1, result.output
        assert "no partition of" in result.output
        assert "holds state for timeline nobody" in result.output
    assert end_offsets(pipe.settings, range(PARTITIONS)) == [0] * PARTITIONS


def test_no_mispartition_is_counted_when_the_setting_names_the_producers_partitioner(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=PARTITIONS, partitioner="consistent_random")
    app = pipe.app()
    out = pipe.output()
    timelines = [f"ok-{i}" for i in range(8)]
    for timeline in timelines:
        _stock_send(pipe.settings, timeline, f"{timeline}-r")
    out.wait_for(lambda: len(out.digests) == len(timelines), 30, "every immediate digest")
    assert app.metrics.value(MISPLACED) == 0
    out.close()
