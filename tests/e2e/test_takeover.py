"""A partition's new owner announces every READY timeline it takes over (issue 12, items 1, 11).

The dangerous moment: ingest committed a batch's offsets, its timelines are READY in Redis, but
their IMMEDIATE announcements never reached the schedule topic (a SIGKILL before the broker's
ack, a lost partition). Reproduced deterministically, black-box: the first `digest-stream run`
announces to a throwaway topic (so, as far as delivery can tell, every announcement is lost) and
is SIGKILLed once the input is committed. The restarted service must deliver every timeline
within seconds, not after `maintenance_timeout` (kept at its 300 s default here).
"""

from __future__ import annotations

import time
import uuid

from tests.support.kafka import TopicFactory
from tests.support.pipeline import PipelineFactory

TIMELINES = 300
PER_TIMELINE = 10
#: Session timeout (10 s) + a cool-down-free first digest + generous slack on a 2-core box.
BOUND_SECONDS = 45.0


def test_ready_timelines_whose_announcements_were_lost_are_delivered_after_a_restart(
    pipeline_factory: PipelineFactory, topic_factory: TopicFactory
) -> None:
    pipe = pipeline_factory(
        partitions=2, maintenance_timeout=300.0, maintenance_interval=30.0, ttl=3600.0
    )
    lost = topic_factory(partitions=2)
    first = pipe.process(roles="ingest,scheduler", DIGEST_STREAM_SCHEDULE_TOPIC=lost)
    timelines = [f"burst-{n}" for n in range(TIMELINES)]
    with pipe.producer() as producer:
        for n in range(PER_TIMELINE):
            for timeline in timelines:
                producer.send(timeline, f"{timeline}-{n}-{uuid.uuid4().hex[:6]}", b"{}")
        producer.flush()
    sent = TIMELINES * PER_TIMELINE
    deadline = time.monotonic() + 120
    while pipe.committed(0) + pipe.committed(1) < sent:
        assert time.monotonic() < deadline, "the burst was not committed within 120 s"
        time.sleep(0.2)
    first.kill()

    out = pipe.output()
    restarted = time.monotonic()
    pipe.process(roles="ingest,scheduler,delivery")
    out.wait_for(
        lambda: {d.timeline for d in out.digests} >= set(timelines),
        BOUND_SECONDS,
        f"a digest for each of the {TIMELINES} stranded timelines",
    )
    took = time.monotonic() - restarted
    print(f"all {TIMELINES} stranded timelines delivered {took:.1f}s after the restart")
    assert took < BOUND_SECONDS
