"""The Kafka Streams peer of the catch-up bench (issue 22) on the real broker: one digest per
timeline, holding every event, once the closers have passed its session windows.

Needs the peer built (`make bench-peer-kstreams`: Maven and a JDK 17); skipped otherwise.
"""

from __future__ import annotations

import pytest

from bench import peer_kstreams
from bench.catchup_bench import Committed, backlog, end_offsets
from bench.common import Stack, create_topics, delete_topics, produce, unique
from bench.latency_bench import PARTITIONS
from tests.support import wait_until

TIMELINES = 30
PER_TIMELINE = 20


@pytest.mark.slow
@pytest.mark.parametrize("guarantee", peer_kstreams.GUARANTEES)
def test_peer_emits_one_digest_per_timeline_with_every_event(
    kafka_bootstrap: str, guarantee: str
) -> None:
    missing = peer_kstreams.available()
    if missing is not None:
        pytest.skip(missing)
    env = Stack(bootstrap=kafka_bootstrap, redis_url="")
    pairs = backlog(TIMELINES * PER_TIMELINE, PER_TIMELINE, "t")
    topic = unique("ks-test")
    create_topics(kafka_bootstrap, [topic], PARTITIONS)
    try:
        produce(kafka_bootstrap, topic, pairs)
        with peer_kstreams.Peer(env, topic, guarantee) as peer:
            peer.launch()
            committed = Committed(env, peer.group, end_offsets(env, topic))

            def consumed() -> bool:
                peer.check()
                return committed.done() >= committed.total

            wait_until(consumed, 120, "the peer never committed the whole backlog")
            committed.consumer.close()
            # Suppress holds every session until stream time passes its end plus the gap.
            assert peer.digests(1, timeout=1.0) == (0, 0)
            peer_kstreams.closers(kafka_bootstrap, topic, PARTITIONS)
            digests, records = peer.digests(TIMELINES)
            assert (digests, records) == (TIMELINES, TIMELINES * PER_TIMELINE), peer.tail()
    finally:
        delete_topics(kafka_bootstrap, [topic])
