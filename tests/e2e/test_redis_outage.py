"""Redis unreachable for seconds (a real TCP proxy drops it): pause, commit nothing, resume."""

from __future__ import annotations

import time

import redis

from tests.support import free_port, wait_until
from tests.support.http import probe
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


def test_a_redis_refusing_writes_makes_the_service_not_ready(
    pipeline_factory: PipelineFactory, redis_client: redis.Redis
) -> None:
    # docs/operations.md (Upgrades): a refused ds_add is treated like an unavailable Redis,
    # "it pauses and retries, /readyz 503". OOM refuses every write as NOPERM does.
    pipe = pipeline_factory(partitions=2, minimum_delay=1.0, increment_delay=0.2, maximum_delay=2.0)
    port = free_port()
    service = pipe.process(DIGEST_STREAM_METRICS_PORT=str(port))
    url = f"http://127.0.0.1:{port}/readyz"
    wait_until(lambda: probe(url)[0] == 200, 60, "/readyz 200 before the fault")
    used = int(redis_client.info("memory")["used_memory"])
    policy = str(redis_client.config_get("maxmemory-policy")["maxmemory-policy"])
    redis_client.config_set("maxmemory-policy", "noeviction")
    redis_client.config_set("maxmemory", str(max(1, used // 2)))
    try:
        send_events(pipe.settings, [f"oom:{i}" for i in range(4)], 5)
        wait_until(lambda: "partitions paused" in service.log(), 30, "the ingest to pause")
        wait_until(lambda: probe(url)[0] == 503, 10, f"/readyz 503 while paused: {probe(url)}")
    finally:
        redis_client.config_set("maxmemory", "0")
        redis_client.config_set("maxmemory-policy", policy)
    wait_until(lambda: probe(url)[0] == 200, 60, "/readyz 200 once Redis takes writes again")
    assert service.stop() == 0
