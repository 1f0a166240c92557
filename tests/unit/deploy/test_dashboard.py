"""deploy/grafana: every panel's PromQL parses (promql-parser) and reads metrics the service
exports; the dashboard covers what operators look at; provisioning points at it."""

from __future__ import annotations

from tests.support.deploy import (
    DASHBOARD,
    GRAFANA_PROVISIONING,
    dashboard,
    dashboard_queries,
    exported_families,
    exported_names,
    metric_names,
    yaml_file,
)

# What the issue asks the dashboard to show, by the metric behind each.
REQUIRED = {
    "digest_events_ingested_total": "throughput in",
    "digest_digests_published_total": "throughput out",
    "digest_consumer_lag": "lag per partition",
    "digest_partition_waiting_timelines": "waiting timelines",
    "digest_partition_ready_timelines": "ready timelines",
    "digest_delivery_lateness_seconds_bucket": "immediate and scheduled latency",
    "digest_dead_letters_total": "DLQ by reason",
    "digest_events_dropped_total": "drops by reason",
    "digest_store_call_seconds_bucket": "Redis call latency",
    "digest_owned_partitions": "rebalances",
}
# Metric families exported but not on the dashboard, and why.
LEFT_OUT = {
    # Only exists once a producer queue filled (so no query of it could be checked against a
    # real scrape); the delivery retries and lag panels show the same trouble.
    "digest_producer_queue_full",
}


def test_every_panel_query_parses_and_reads_exported_metrics() -> None:
    queries = dashboard_queries()
    assert len(queries) >= 20
    exported = exported_names()
    for title, expr in queries:
        names = metric_names(expr)  # raises on a query that does not parse
        assert names, title
        assert names <= exported, f"panel {title!r} reads unknown metrics {names - exported}"


def test_the_dashboard_covers_the_operators_view_and_every_exported_metric() -> None:
    used = set().union(*(metric_names(expr) for _, expr in dashboard_queries()))
    missing = {what for name, what in REQUIRED.items() if name not in used}
    assert not missing, f"no panel for {missing}"
    # A family is shown when a panel reads any of its series (a histogram's _bucket or _sum).
    unshown = {name for name, samples in exported_families().items() if not samples & used}
    assert unshown <= LEFT_OUT, (
        f"exported metrics with no panel (add one, or to LEFT_OUT): {unshown - LEFT_OUT}"
    )


def test_panels_are_well_formed_and_use_the_provisioned_datasource() -> None:
    data = dashboard()
    assert data["uid"] == "digest-stream"
    (source,) = yaml_file(GRAFANA_PROVISIONING / "datasources" / "prometheus.yml")["datasources"]
    assert source["type"] == "prometheus"
    ids = [panel["id"] for panel in data["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in data["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": source["uid"]}, panel["title"]
        assert panel["targets"], panel["title"]
        assert panel["description"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def test_the_dashboard_provider_loads_the_directory_compose_mounts_the_dashboard_in() -> None:
    (provider,) = yaml_file(GRAFANA_PROVISIONING / "dashboards" / "digest-stream.yml")["providers"]
    assert provider["type"] == "file"
    # docker-compose.yml mounts the JSON at <path>/<file name>; test_compose.py checks that.
    assert provider["options"]["path"] == "/etc/grafana/dashboards"
    assert DASHBOARD.name == "digest-stream.json"
