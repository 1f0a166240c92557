"""A real Prometheus scrapes a real `digest-stream run`: every dashboard query and every alert's
compared quantities return data, and a provoked stranded-READY alert fires.

The rules Prometheus loads here are a copy of deploy/prometheus/rules.yml on a clock 60 times
faster: every range window, offset and `for:` of minutes becomes as many seconds (`[10m]` ->
`[10s]`, `for: 5m` -> `for: 5s`), with Prometheus scraping and evaluating every second. The
expressions are otherwise the shipped ones; waiting the real 15 minutes is not a test.
The shipped expressions themselves are evaluated unchanged, over the whole scenario.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from digest_stream.ops.health import READY
from tests.support import free_port, unique, wait_until
from tests.support.deploy import (
    KUBERNETES_GROUP,
    RULES,
    alerts,
    compared_quantities,
    dashboard_queries,
    metric_names,
)
from tests.support.http import get, metric_sum, probe
from tests.support.kafka import send_events
from tests.support.pipeline import Pipeline, PipelineFactory, ServiceProcess
from tests.support.prometheus import PrometheusServer

JOB = "digest-stream"  # the scrape job the rules expect

pytestmark = pytest.mark.slow


def _fast_rules(target: Path) -> Path:
    """rules.yml with minutes read as seconds (windows, offsets, `for:`), the service group."""
    data = yaml.safe_load(RULES.read_text())
    groups = [g for g in data["groups"] if g["name"] != KUBERNETES_GROUP]
    for group in groups:
        for rule in group["rules"]:
            scaled = re.sub(r"\[(\d+)m\]", r"[\1s]", rule["expr"])
            scaled = re.sub(r"offset (\d+)m\b", r"offset \1s", scaled)
            # No subquery, no duration in other units left unscaled.
            assert not re.search(r"\d+(ms|m|h|d|w|y)\b|:", scaled), (rule["alert"], scaled)
            rule["expr"] = scaled
            if "for" in rule:
                assert rule["for"].endswith("m"), rule["alert"]
                rule["for"] = rule["for"][:-1] + "s"
    target.write_text(yaml.safe_dump({"groups": groups}))
    return target


def _start(
    pipe: Pipeline, port: int, roles: str = "ingest,scheduler,delivery", **env: str
) -> ServiceProcess:
    proc = pipe.process(
        roles, DIGEST_STREAM_METRICS_PORT=str(port), DIGEST_STREAM_METRICS_HOST="127.0.0.1", **env
    )
    wait_until(
        lambda: probe(f"http://127.0.0.1:{port}/readyz")[0] == 200,
        60,
        f"/readyz of `digest-stream run --roles {roles}`: {proc.log()}",
        interval=0.2,
    )
    return proc


def _replay_from_start(pipe: Pipeline, partition: int) -> None:
    """`digest-stream replay --from 0`: the fence removed, as if Redis lost the partition."""
    s = pipe.settings
    command = [sys.executable, "-m", "digest_stream.cli", "replay", "--yes",
               "--partition", str(partition), "--from", "0",
               "--kafka-bootstrap-servers", s.kafka_bootstrap_servers,
               "--events-topic", s.events_topic, "--group-id", s.group_id,
               "--redis-url", s.redis_url, "--namespace", s.namespace]  # fmt: skip
    outputs: list[str] = []

    def replayed() -> bool:
        # The group may still list the stopped member for a moment: the CLI then refuses.
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        outputs.append(done.stdout + done.stderr)
        return done.returncode == 0

    wait_until(replayed, 60, f"replay accepted: {outputs[-1:]}", interval=1.0)


def _send_garbage(pipe: Pipeline) -> None:
    producer = Producer({"bootstrap.servers": pipe.settings.kafka_bootstrap_servers})
    producer.produce(pipe.settings.events_topic, key=b"garbage", value=b"\xffnot avro")
    assert producer.flush(30) == 0


def test_a_real_prometheus_reads_every_query_and_fires_a_stranded_ready_alert(
    pipeline_factory: PipelineFactory, tmp_path: Path
) -> None:
    pipe = pipeline_factory(partitions=2, capacity=3)
    port = free_port()
    rules = _fast_rules(tmp_path / "rules-fast.yml")
    with PrometheusServer(tmp_path / "prometheus", JOB, [f"127.0.0.1:{port}"], [rules]) as prom:
        start = time.time()

        def seen(name: str) -> bool:
            # Above zero, and in three scrapes or more: a series born at 1 (a labelled counter's
            # first increment) needs two samples before rate() of it returns anything.
            return (
                prom.value(f"sum({name})") > 0
                and prom.value(f"min(count_over_time({name}[1m]))") >= 3
            )

        # 1. Every role: digests out, a dead letter (not Avro), capacity drops (10 events on a
        #    timeline that keeps 3).
        proc = _start(pipe, port)
        send_events(pipe.settings, [unique("tl") for _ in range(4)], per_timeline=2)
        send_events(pipe.settings, unique("crowded"), per_timeline=10)
        _send_garbage(pipe)
        for expr in ("digest_digests_published_total", "digest_dead_letters_total",
                     "digest_events_dropped_total", "digest_delivery_lateness_seconds_count",
                     "digest_store_call_seconds_count"):  # fmt: skip
            wait_until(partial(seen, expr), 60, f"Prometheus scraped {expr} > 0")
        assert proc.stop() == 0

        # 2. Redis "loses" a partition's fence: the next start replays it (digest_replays_total).
        (partition,) = [p for p in range(2) if pipe.committed(p) > 0][:1]
        _replay_from_start(pipe, partition)
        proc = _start(pipe, port)
        wait_until(lambda: seen("digest_replays_total"), 60, "the replay scraped")
        assert proc.stop() == 0

        # 3. Provoked: ingest and scheduler without delivery, the ingest announcing new
        #    timelines instead of publishing them itself. They become READY and stay;
        #    maintenance re-announces them after maintenance_timeout (3 s here).
        proc = _start(
            pipe,
            port,
            "ingest,scheduler",
            DIGEST_STREAM_MAINTENANCE_TIMEOUT="3",
            DIGEST_STREAM_DIRECT_LEADING_EDGE="false",
        )
        send_events(pipe.settings, [unique("stranded") for _ in range(3)])
        wait_until(lambda: seen("digest_partition_ready_timelines"), 30, "READY timelines scraped")

        def firing() -> set[str]:
            return {a["labels"]["alertname"] for a in prom.alerts() if a["state"] == "firing"}

        wait_until(
            lambda: {"DigestStreamReadyStranded", "DigestStreamTimelinesRecovered"} <= firing(),
            60,
            f"stranded READY alerts firing (firing: {firing()}); {prom.log()[-2000:]}",
            interval=0.5,
        )
        (stranded,) = [a for a in prom.alerts() if a["labels"]["alertname"] ==
                       "DigestStreamReadyStranded"]  # fmt: skip
        assert stranded["labels"]["job"] == JOB
        assert stranded["annotations"]["runbook"] == "docs/operations.md#digeststreamreadystranded"
        # Its value is the READY count the service reports (the 3 new timelines and any of the
        # earlier phases' that fell due after their cool-down with records): nothing delivers
        # them.
        ready = metric_sum(get(f"http://127.0.0.1:{port}/metrics")[1].decode(), READY)
        assert ready >= 3
        assert float(stranded["value"]) == ready, stranded
        end = time.time()

        # What fired over the scenario (Prometheus' own ALERTS series): each provoked loss
        # paged, and nothing that did not happen (no stall, no Redis errors, no skew).
        def fired() -> set[str]:
            history = 'count by (alertname) (count_over_time(ALERTS{alertstate="firing"}[10m]))'
            return {series["metric"]["alertname"] for series in prom.query(history)}

        provoked = {"DigestStreamDeadLetters", "DigestStreamEventsDropped", "DigestStreamReplays",
                    "DigestStreamReadyStranded", "DigestStreamTimelinesRecovered"}  # fmt: skip
        # The last of them fired a moment ago: its ALERTS sample may land a moment later.
        wait_until(lambda: provoked <= fired(), 10, f"fired: {fired()}", interval=0.5)
        quiet = {"DigestStreamRoleStalled", "DigestStreamRedisErrors", "DigestStreamClockSkew"}
        assert not quiet & fired(), f"fired without cause: {quiet & fired()}"

        # Every dashboard query and every quantity an alert compares returned data in the
        # scenario (the shipped expressions, unscaled: their windows cover it all).
        empty = [
            (title, expr)
            for title, expr in dashboard_queries(rate_interval="15s")
            if not prom.query_range(expr, start, end)
        ]
        assert not empty, f"dashboard queries without data: {empty}"
        for alert in alerts():
            if alert.group == KUBERNETES_GROUP:
                continue  # kube-state-metrics series; promtool's unit tests cover it
            prom.query(alert.expr)  # the whole expression evaluates
            for quantity in compared_quantities(alert.expr):
                assert prom.query_range(quantity, start, end), f"{alert.name}: {quantity}"

        # Every metric name they read is one a real scrape of the service produced.
        scraped = prom.metric_names()
        used = set().union(*(metric_names(expr) for _, expr in dashboard_queries()))
        used |= set().union(
            *(metric_names(a.expr) for a in alerts() if a.group != KUBERNETES_GROUP)
        )
        assert used <= scraped, f"never scraped: {used - scraped}"
        assert proc.stop() == 0
