"""Partitions added to the events topic are read within seconds (issue 20, item 7).

Black-box through the CLI: `digest-stream run` delivers a first event of each of a few
timelines (they then cool down on partitions 0 and 1), the events topic grows from 2 to 4
partitions with `AdminClient.create_partitions`, and a second event of each follows at once,
produced with murmur2 (the keys were picked to land on the new partitions 2 and 3). librdkafka
noticed new partitions only at its metadata refresh (300 s by default), so these came out
after up to five minutes; the service refreshes every 10 s now. The events reach the new
partitions before the consumer knows them: they must be read from the beginning, none
skipped. Each of these timelines moved while its old partition held its cool-down: it starts
over on its new partition (a second leading edge, out at once), and is counted.
"""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions

from tests.support import free_port, wait_until
from tests.support.http import get, metric
from tests.support.kafka import murmur2_choice, send_events
from tests.support.pipeline import PipelineFactory

BEFORE, AFTER = 2, 4
#: Well under librdkafka's 300 s default: the 10 s refresh, one eager rebalance, a digest.
BOUND = 30.0
COOLDOWN = 90.0


def _timelines(count: int) -> list[str]:
    """Timelines whose key goes to a new partition once the topic has AFTER partitions."""
    names = (f"grown-{n}" for n in range(10_000))
    return [t for t in names if murmur2_choice(t.encode(), AFTER) >= BEFORE][:count]


def test_events_on_added_partitions_come_out_within_seconds(
    pipeline_factory: PipelineFactory,
) -> None:
    # A cool-down longer than the bound: the old partitions still hold these timelines when
    # their second events arrive, which then come out as a second leading edge.
    pipe = pipeline_factory(
        partitions=BEFORE, minimum_delay=COOLDOWN, maximum_delay=COOLDOWN, ttl=600.0
    )
    settings = pipe.settings
    port = free_port()
    proc = pipe.process(DIGEST_STREAM_METRICS_PORT=str(port))
    timelines = _timelines(6)
    out = pipe.output()
    try:
        first = send_events(settings, timelines)
        out.wait_for(lambda: set(first) <= out.record_ids(), 90, "the first events")

        admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap_servers})
        topic = settings.events_topic
        admin.create_partitions([NewPartitions(topic, AFTER)])[topic].result(timeout=30)
        wait_until(
            lambda: len(admin.list_topics(topic, timeout=5).topics[topic].partitions) == AFTER,
            30,
            "the added partitions to be listed",
        )
        sent_at = time.monotonic()
        second = send_events(settings, timelines)
        out.wait_for(lambda: set(second) <= out.record_ids(), BOUND, "events on new partitions")
        took = time.monotonic() - sent_at
        print(f"events on the added partitions out after {took:.1f}s")
        assert took < COOLDOWN  # not held by the old partition's cool-down: a new leading edge

        def counted() -> bool:
            status, body = get(f"http://127.0.0.1:{port}/metrics")
            moved = metric(body.decode(), "digest_timelines_moved_total") if status == 200 else 0
            return moved == len(timelines)

        wait_until(counted, 10, "every moved timeline counted")
        assert "grew from 2 to 4 partitions" in proc.log()
    except BaseException:
        print(proc.log()[-6000:])
        raise
    finally:
        out.close()
