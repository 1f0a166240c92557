"""The metrics/health HTTP server of a running service, scraped over real HTTP."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from digest_stream.ops import health
from digest_stream.store.redis import library
from tests.support import free_port, unique, wait_until
from tests.support.http import get, metric, metric_sum, probe
from tests.support.pipeline import Pipeline


def test_scrape_a_running_process_and_watch_values_move(
    pipeline_factory: Callable[..., Pipeline],
) -> None:
    # a cool-down long enough to watch the timelines wait in it
    pipe = pipeline_factory(partitions=2, minimum_delay=8.0, maximum_delay=10.0)
    port = free_port()
    proc = pipe.process(
        DIGEST_STREAM_METRICS_PORT=str(port), DIGEST_STREAM_METRICS_HOST="127.0.0.1"
    )
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: probe(f"{base}/readyz")[0] == 200, 60, f"/readyz never 200: {proc.log()}")
    status, ready = probe(f"{base}/readyz")
    assert ready["ingest_partitions"] == [0, 1]
    assert set(ready["library_versions"].values()) == {library.VERSION}
    assert probe(f"{base}/healthz")[0] == 200

    status, body = get(f"{base}/metrics")
    assert status == 200
    before = body.decode()
    assert metric(before, "digest_events_ingested_total") == 0
    assert metric(before, "digest_owned_partitions") == 2

    timelines = [unique("ops") for _ in range(3)]
    with pipe.producer() as producer:
        for n in range(30):
            producer.send(timelines[n % 3], f"e{n}", b"{}")
        producer.flush()

    def scraped() -> str:
        return get(f"{base}/metrics")[1].decode()

    wait_until(
        lambda: metric(scraped(), "digest_events_ingested_total") == 30, 30, "30 events ingested"
    )
    wait_until(
        lambda: (metric(scraped(), "digest_digests_published_total") or 0) >= 3,
        30,
        "3 immediate digests published",
    )
    after = scraped()
    # One batch held all 30 events: three digests of 10, then a cool-down per timeline, with
    # nothing pending: cooling in no set, so none is WAITING.
    assert metric(after, "digest_records_per_digest_sum") == 30
    assert metric_sum(after, "digest_partition_waiting_timelines") == 0
    with pipe.producer() as producer:
        for timeline in timelines:
            producer.send(timeline, unique("late"), b"{}")
        producer.flush()
    wait_until(
        lambda: metric_sum(scraped(), "digest_partition_waiting_timelines") == 3,
        8,
        "the timelines WAITING for the end of their cool-down",
    )
    # The lag is refreshed by the role loop once a second (LAG_REFRESH), from the consumer's
    # cached watermarks: wait for the first refresh that has seen a fetch.
    wait_until(
        lambda: metric(scraped(), "digest_consumer_lag", role="ingest", partition="0") == 0,
        10,
        "the ingest lag of partition 0 exported as 0",
    )
    assert metric(after, "digest_role_loop_age_seconds", role="ingest") is not None
    wait_until(
        lambda: metric(scraped(), "digest_digests_published_total") == 6,
        30,
        "the digests at the end of the cool-down",
    )
    # Delivered, cooling down again with nothing pending: the gauge drops to 0.
    wait_until(
        lambda: metric_sum(scraped(), "digest_partition_waiting_timelines") == 0,
        30,
        "the timelines cooling in no set",
    )
    assert get(f"{base}/nope")[0] == 404
    assert proc.stop() == 0
    assert get(f"{base}/healthz")[0] == 0, "the port is released after a stop"


def test_readyz_refuses_a_library_version_mismatch(
    pipeline_factory: Callable[..., Pipeline], monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = pipeline_factory(partitions=1)
    app = pipe.app(metrics_port=0, metrics_host="127.0.0.1")
    assert app.server is not None
    url = f"http://127.0.0.1:{app.server.port}/readyz"
    wait_until(lambda: probe(url)[0] == 200, 60, "ready")
    monkeypatch.setattr(library, "VERSION", "999")
    monkeypatch.setattr(health, "READY_CACHE_SECONDS", 0.0)
    status, body = probe(url)
    assert status == 503
    assert any("version mismatch" in p for p in body["problems"])


def test_healthz_reports_a_stuck_loop(pipeline_factory: Callable[..., Pipeline]) -> None:
    pipe = pipeline_factory(partitions=1, stall_timeout=5.0)
    app = pipe.app(metrics_port=0, metrics_host="127.0.0.1")
    assert app.server is not None
    url = f"http://127.0.0.1:{app.server.port}/healthz"
    wait_until(lambda: "ingest" in app.heartbeats.ages(), 30, "the ingest loop came round")
    assert probe(url)[0] == 200
    # Freeze the delivery role's heartbeat 10 s in the past: a loop that stopped coming round.
    app.heartbeats.beats["delivery"] = app.heartbeats.clock() - 10.0
    frozen = app.heartbeats.beats["delivery"]
    app.heartbeats.beat = lambda role: frozen  # type: ignore[method-assign]
    status, body = probe(url)
    assert status == 503
    assert body["roles"]["delivery"]["stuck"] is True
    assert body["roles"]["ingest"]["stuck"] is False


def test_no_server_unless_a_port_is_set(pipeline_factory: Callable[..., Pipeline]) -> None:
    app = pipeline_factory(partitions=1).app()
    assert app.server is None
