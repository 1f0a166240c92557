"""Short regression tests for the bugs the chaos scenarios led to (they run in make test)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from digest_stream.wire import codec
from digest_stream.wire.models import ScheduleEntry, ScheduleReason
from tests.chaos.harness import (
    REFUSING_CAUSE,
    OwnRedis,
    Services,
    SettingsFactory,
    recovery_deadline,
)
from tests.support import free_port, wait_until
from tests.support.http import get, metric
from tests.support.kafka import Collector, committed_offsets, end_offsets, send_events
from tests.support.pipeline import ServiceProcess
from tests.support.proxy import TcpProxy


def _running_with_first_digests(
    services: Services, out: Collector, name: str
) -> tuple[ServiceProcess, list[str], list[str]]:
    """One service started, 8 timelines with one event each, their digests out:
    (the process, the timelines, the first ids)."""
    service = services.start()
    services.wait_started(service)
    timelines = [f"{name}:{i}" for i in range(8)]
    first = send_events(services.settings, timelines)
    out.wait_for(lambda: set(first) <= out.record_ids(), 60, "the first digests")
    return service, timelines, first


def _open_attempts(port: int) -> float:
    """store.open calls (failed ones too) of the delivery, from the /metrics endpoint."""
    status, body = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200, f"/metrics answered {status}"
    return metric(body.decode(), "digest_store_call_seconds_count", operation="open") or 0.0


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_rolled_back_fence_is_noticed_when_redis_was_down_at_assignment(
    make_settings: SettingsFactory, own_redis: OwnRedis
) -> None:
    """Redis restarted from an older snapshot AND unreachable while the partitions are assigned.

    The ingest cannot read the fence at assignment, so it starts at the committed offset. It
    must still notice, at its first batch, that Redis is behind what the group committed, and
    replay the gap; otherwise the records between the snapshot and the commit are lost.
    """
    with TcpProxy("127.0.0.1", own_redis.port) as proxy:
        settings = make_settings(
            redis=f"redis://{proxy.address}/0",
            partitions=2,
            minimum_delay=15.0,
            increment_delay=0.1,
            maximum_delay=20.0,
        )
        services = Services(settings)
        out = Collector(settings, settings.output_topic)
        try:
            a, b = services.start(), services.start()
            for proc in (a, b):
                services.wait_started(proc)
            wait_until(
                lambda: "] assigned " in a.log() and "] assigned " in b.log(),
                60,
                "both instances to own a partition",
            )
            timelines = [f"gap:{i}" for i in range(8)]
            first = send_events(settings, timelines)  # immediate digests
            out.wait_for(lambda: set(first) <= out.record_ids(), 60, "the first digests")
            own_redis.snapshot()  # the fence covers `first` only
            pending = send_events(settings, timelines, 2)  # cool-down: WAITING in Redis
            ends = end_offsets(settings, range(2))
            wait_until(
                lambda: committed_offsets(settings, range(2)) == ends,
                30,
                "the pending records to be applied and committed",
            )
            proxy.block()
            services.kill(a)  # its partition moves to b while Redis is unreachable
            own_redis.shutdown_nosave()
            own_redis.start()  # back to the snapshot: `pending` is gone from Redis
            wait_until(
                lambda: "Redis unreachable at assignment" in b.log(),
                60,
                "b to be assigned a's partition during the outage",
            )
            proxy.unblock()
            later = send_events(settings, timelines)
            out.wait_for(
                lambda: set(first + pending + later) <= out.record_ids(),
                90,
                "every record, including those the rollback removed from Redis",
            )
        finally:
            services.cleanup()
            out.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigterm_during_a_redis_outage_stops_cleanly_and_loses_nothing(
    make_settings: SettingsFactory, redis_proxy: TcpProxy
) -> None:
    """An operator restarts the service while Redis is down: a clean exit, then catch-up."""
    settings = make_settings(
        redis=f"redis://{redis_proxy.address}/0", partitions=2, metrics_port=free_port()
    )
    services = Services(settings)
    out = Collector(settings, settings.output_topic)
    try:
        service, timelines, first = _running_with_first_digests(services, out, "term")
        more = send_events(settings, timelines)  # ingested and scheduled, not yet delivered
        redis_proxy.block()
        during = send_events(settings, timelines)
        # A schedule entry arriving now keeps the delivery retrying store.open.
        entry = ScheduleEntry(
            timeline=timelines[0],
            partition=0,
            scheduled_at=int(time.time() * 1000),
            reason=ScheduleReason.RECOVERED,
        )
        producer = Producer({"bootstrap.servers": settings.kafka_bootstrap_servers})
        producer.produce(
            settings.schedule_topic,
            key=timelines[0].encode(),
            value=codec.encode_schedule_entry(entry),
        )
        assert producer.flush(30) == 0
        wait_until(lambda: "Redis unreachable" in service.log(), 30, "the outage noticed")
        metrics = int(settings.metrics_port or 0)
        opens = _open_attempts(metrics)
        wait_until(
            lambda: _open_attempts(metrics) >= opens + 2, 30, "the delivery to retry store.open"
        )
        started = time.monotonic()
        code = service.stop(timeout=90)
        assert code == 0, service.log()[-3000:]
        assert time.monotonic() - started < 30
        assert "role failed" not in service.log(), service.log()[-3000:]
        redis_proxy.unblock()
        service = services.start()
        services.wait_started(service)
        out.wait_for(lambda: set(first + more + during) <= out.record_ids(), 90, "every record")
    finally:
        services.cleanup()
        out.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["OOM", "READONLY"])
def test_a_refusing_redis_pauses_the_service_instead_of_stopping_it(
    make_settings: SettingsFactory, own_redis: OwnRedis, kind: str
) -> None:
    """Issue 12 item 5 through the real client: OOM (noeviction) and READONLY (a replica)."""
    settings = make_settings(redis=own_redis.url, partitions=2)
    services = Services(settings)
    out = Collector(settings, settings.output_topic)
    try:
        service, timelines, first = _running_with_first_digests(services, out, "refuse")
        with own_redis.refusing(kind, 10.0):
            during = send_events(settings, timelines)

            def noticed() -> bool:
                # the cause named, as a running role logs it (ops/failures: outage_line)
                return service.popen.poll() is not None or REFUSING_CAUSE[kind] in service.log()

            wait_until(noticed, 30, f"the service to meet the {kind} replies")
            # Observe a window (asserting something does *not* happen): a stopped role takes
            # the process down within it.
            until = time.monotonic() + 3.0
            while time.monotonic() < until:
                assert service.popen.poll() is None, f"exited on {kind}:\n{service.log()[-2000:]}"
                out.poll(0.1)
        out.wait_for(lambda: set(first + during) <= out.record_ids(), 60, "every record")
    finally:
        services.cleanup()
        out.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_timeline_ready_in_a_rolled_back_snapshot_is_announced_again(
    make_settings: SettingsFactory, own_redis: OwnRedis
) -> None:
    """Chaos 4a found it: all out 306 s after a rollback, with maintenance_timeout 300 s."""
    settings = make_settings(partitions=2)
    services = Services(settings)
    out = Collector(settings, settings.output_topic)
    try:
        ingest = services.start("ingest,scheduler")
        services.wait_started(ingest)
        timelines = [f"rolled:{i}" for i in range(8)]
        first = send_events(settings, timelines)  # READY, announced, nobody delivering yet
        ends = end_offsets(settings, range(2))
        wait_until(lambda: committed_offsets(settings, range(2)) == ends, 30, "applied")
        own_redis.snapshot()  # every timeline READY in the snapshot
        services.wait_started(services.start("delivery"))
        out.wait_for(lambda: set(first) <= out.record_ids(), 60, "the first digests")
        own_redis.shutdown_nosave()
        own_redis.start()  # READY again, their entries consumed and committed
        later = send_events(settings, timelines)
        rolled_back_at = time.monotonic()
        deadline = recovery_deadline(settings)
        while not set(later) <= out.record_ids() and time.monotonic() - rolled_back_at < deadline:
            out.poll(0.2)
        missing = set(later) - out.record_ids()
        assert not missing, f"{len(missing)} events not out {deadline:.0f}s after the rollback"
    finally:
        services.cleanup()
        out.close()
