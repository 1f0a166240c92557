"""Redis unreachable for seconds (a real TCP proxy drops it): pause, commit nothing, resume."""

from __future__ import annotations

import time

from tests.support import wait_until
from tests.support.kafka import committed_offsets, digest_ids_by_record, end_offsets, send_events
from tests.support.pipeline import PipelineFactory
from tests.support.proxy import TcpProxy

OUTAGE = 5.0


def test_redis_outage_pauses_ingest_commits_nothing_and_loses_nothing(
    pipeline_factory: PipelineFactory, redis_proxy: TcpProxy
) -> None:
    pipe = pipeline_factory(partitions=2, minimum_delay=1.0, increment_delay=0.2, maximum_delay=2.0)
    settings = pipe.settings
    service = pipe.process(DIGEST_STREAM_REDIS_URL=f"redis://{redis_proxy.address}/0")
    out = pipe.output()
    timelines = [f"outage:{i}" for i in range(20)]

    def committed() -> list[int]:
        return committed_offsets(settings, range(2))

    sent = send_events(settings, timelines, 10)  # 200 events
    out.wait_for(lambda: set(sent) <= out.record_ids(), 60, "the first 200 events delivered")
    ends = end_offsets(settings, range(2))
    wait_until(lambda: committed() == ends, 30, "the ingest to commit the first batch")

    redis_proxy.block()
    before_outage = list(sent)
    sent += send_events(settings, timelines, 10)  # arrives while Redis is unreachable
    wait_until(lambda: "Redis unreachable" in service.log(), 30, "the ingest to notice the outage")
    blocked_at = time.monotonic()
    samples = 0
    while time.monotonic() - blocked_at < OUTAGE:  # the fault lasts OUTAGE seconds
        out.poll(0.5)
        assert committed() == ends, "a commit went through while Redis was unreachable"
        samples += 1
    assert service.popen.poll() is None, service.log()[-2000:]
    assert samples >= 3
    assert "partitions paused" in service.log()
    # Nothing sent during the outage came out (it cannot have been stored).
    assert not (set(sent) - set(before_outage)) & out.record_ids()

    redis_proxy.unblock()
    out.wait_for(lambda: set(sent) <= out.record_ids(), 90, "every event after the outage")
    ends = end_offsets(settings, range(2))
    wait_until(lambda: committed() == ends, 30, "the ingest to commit after the outage")
    assert "Redis reachable again; partitions resumed" in service.log()
    duplicated = {r: ids for r, ids in digest_ids_by_record(out.digests).items() if len(ids) > 1}
    assert duplicated == {}
    assert redis_proxy.refused > 0  # the service did try to reconnect through the outage
    assert service.stop() == 0
    out.close()
