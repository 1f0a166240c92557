"""The Kafka Streams peer of the catch-up bench (issues 22, 27) on the real broker: one digest
per timeline, holding every event, once the closers have passed its session windows; the
closers' commit comes without waiting out at-least-once's 30 s commit interval; with two
stream threads (the N-against-N long run) every event still comes out.

Needs the peer built (`make bench-peer-kstreams`: Maven and a JDK 17); skipped otherwise.
"""

from __future__ import annotations

import time

import pytest

from bench import peer_kstreams
from bench.catchup_bench import Committed, backlog, end_offsets, kstreams_catch_up
from bench.common import Stack, create_topics, delete_topics, produce, unique
from bench.latency_bench import PARTITIONS
from tests.support import wait_until

TIMELINES = 30
PER_TIMELINE = 20
# Enough records for two stream threads to overlap in the extractor (20,000 lost 3).
THREADED_EVENTS = 50_000


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

            # At-least-once commits at its 30 s default interval here: no closer yet.
            wait_until(consumed, 120, "the peer never committed the whole backlog")
            committed.consumer.close()
            assert peer.running() is not None, peer.tail()  # printed once every task ran
            # Suppress holds every session until stream time passes its end plus the gap.
            assert peer.digests(1, timeout=1.0) == (0, 0)
            peer_kstreams.closers(kafka_bootstrap, topic, PARTITIONS)
            sent = time.monotonic()
            digests, records = peer.digests(TIMELINES)
            assert (digests, records) == (TIMELINES, TIMELINES * PER_TIMELINE), peer.tail()
            closed = Committed(env, peer.group, end_offsets(env, topic))
            try:
                wait_until(lambda: closed.done() >= closed.total, 60, "closers never committed")
            finally:
                closed.consumer.close()
            # The closers ask for a commit (context.commit()), so their digests (at-least-once
            # emits only when a commit flushes its record cache) and offsets come well before
            # the next interval, about 30 s after the commit the first wait saw.
            took = time.monotonic() - sent
            assert took < 15, f"the closers' commit took {took:.1f} s: not asked for at the closer"
    finally:
        delete_topics(kafka_bootstrap, [topic])


@pytest.mark.slow
def test_two_stream_threads_lose_no_event(kafka_bootstrap: str) -> None:
    # The N-against-N long run's peer (num.stream.threads=2): both threads share one
    # TimestampExtractor, so anything it keeps between records must be its thread's own, or
    # one thread reads the other's record (wrong event times: records dropped as late).
    missing = peer_kstreams.available()
    if missing is not None:
        pytest.skip(missing)
    env = Stack(bootstrap=kafka_bootstrap, redis_url="")
    pairs = backlog(THREADED_EVENTS, 1, "t")
    # Raises unless every timeline comes out as one digest holding its event.
    run = kstreams_catch_up(env, pairs, "at-least-once", threads=2)
    assert run["steady"] > 0
    assert run["cpu"]["process"] > 0
