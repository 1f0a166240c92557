"""docker-compose.yml cannot start here (no Docker engine); check it against the settings."""

from __future__ import annotations

from typing import Any

import yaml

from digest_stream.settings import ENV_PREFIX, Settings, env_name
from tests.support import REPO_ROOT

ROOT = REPO_ROOT


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_compose_has_kafka_redis_and_the_service() -> None:
    services = _compose()["services"]
    assert {"kafka", "redis", "digest-stream"} <= set(services)
    assert services["kafka"]["image"].startswith("apache/kafka:4")
    assert services["redis"]["image"] == "redis:7"
    assert "9092:9092" in services["kafka"]["ports"]
    assert "6379:6379" in services["redis"]["ports"]
    assert "KAFKA_PROCESS_ROLES" in services["kafka"]["environment"]  # KRaft, no ZooKeeper


def test_compose_service_env_names_are_settings() -> None:
    env = _compose()["services"]["digest-stream"]["environment"]
    known = {env_name(name) for name in Settings.model_fields}
    ours = {name for name in env if name.startswith(ENV_PREFIX)}
    assert ours, "the service gets no DIGEST_STREAM_* settings"
    assert ours <= known, f"unknown settings in docker-compose.yml: {sorted(ours - known)}"
    # The values must parse as settings too.
    Settings.model_validate({k[len(ENV_PREFIX) :].lower(): v for k, v in env.items()})


def test_compose_service_points_at_the_compose_brokers() -> None:
    services = _compose()["services"]
    env = services["digest-stream"]["environment"]
    host, port = env["DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS"].split(":")
    assert host == "kafka"
    assert (
        f"PLAINTEXT://kafka:{port}"
        in services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    )
    assert env["DIGEST_STREAM_REDIS_URL"].startswith("redis://redis:6379")


def test_compose_runs_every_role_with_metrics_and_a_readiness_healthcheck() -> None:
    services = _compose()["services"]
    service = services["digest-stream"]
    assert service["command"][:1] == ["run"]
    roles = service["command"][service["command"].index("--roles") + 1]
    assert set(roles.split(",")) == {"ingest", "scheduler", "delivery"}
    port = service["environment"]["DIGEST_STREAM_METRICS_PORT"]
    assert f"{port}:{port}" in service["ports"]
    assert service["environment"]["DIGEST_STREAM_METRICS_HOST"] == "0.0.0.0"
    assert f"127.0.0.1:{port}/readyz" in " ".join(service["healthcheck"]["test"])
    for name in ("kafka", "redis", "digest-stream"):
        assert "healthcheck" in services[name], name
    assert service["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    assert services["topics"]["command"][:2] == ["topics", "create"]


def test_compose_redis_keeps_an_append_only_file_on_a_named_volume() -> None:
    data = _compose()
    redis = data["services"]["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command
    volumes = {v.split(":")[0] for s in data["services"].values() for v in s.get("volumes", [])}
    assert {"redis-data", "kafka-data"} <= volumes
    assert volumes <= set(data["volumes"]), "every volume is a named volume"


def test_compose_sample_producer_is_an_opt_in_profile() -> None:
    services = _compose()["services"]
    producer = services["producer"]
    assert producer["profiles"] == ["producer"]
    assert producer["command"][0] == "produce"
    for name in ("producer", "topics"):
        env = services[name]["environment"]
        assert env["DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS"] == "kafka:19092"
        Settings.model_validate({k[len(ENV_PREFIX) :].lower(): v for k, v in env.items()})


def test_compose_offers_a_schema_registry_the_service_can_point_at() -> None:
    services = _compose()["services"]
    registry = services["schema-registry"]
    assert registry["image"].startswith("apicurio/apicurio-registry-mem:2.6.")
    assert registry["ports"] == ["127.0.0.1:8081:8080"]  # loopback only on the host
    text = (ROOT / "docker-compose.yml").read_text()
    url = "http://schema-registry:8080/apis/ccompat/v7"
    assert f"# DIGEST_STREAM_SCHEMA_REGISTRY_URL: {url}" in text
    assert Settings(schema_registry_url=url).schema_registry_url == url


def test_compose_runs_prometheus_on_the_rules_and_scraping_the_service() -> None:
    data = _compose()
    prometheus = data["services"]["prometheus"]
    mounted = {c["target"]: data["configs"][c["source"]]["file"] for c in prometheus["configs"]}
    config_path = next(t for t in mounted if t.endswith("prometheus.yml"))
    assert f"--config.file={config_path}" in prometheus["command"]
    config = yaml.safe_load((ROOT / mounted[config_path]).read_text())
    # Rule files resolve relative to the config file, inside the container as in the checkout.
    for rule_file in config["rule_files"]:
        target = f"{config_path.rsplit('/', 1)[0]}/{rule_file}"
        assert mounted[target] == "./deploy/prometheus/rules.yml"
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "digest-stream"  # the job the rules' DigestStreamDown selects
    port = data["services"]["digest-stream"]["environment"]["DIGEST_STREAM_METRICS_PORT"]
    assert job["static_configs"] == [{"targets": [f"digest-stream:{port}"]}]
    assert "healthcheck" in prometheus


def test_compose_runs_grafana_with_the_datasource_and_the_dashboard_provisioned() -> None:
    data = _compose()
    grafana = data["services"]["grafana"]
    mounted = {c["target"]: data["configs"][c["source"]]["file"] for c in grafana["configs"]}
    for path in mounted.values():
        assert (ROOT / path).is_file(), path
    sources = [t for t in mounted if t.startswith("/etc/grafana/provisioning/datasources/")]
    providers = [t for t in mounted if t.startswith("/etc/grafana/provisioning/dashboards/")]
    assert len(sources) == 1
    assert len(providers) == 1
    (source,) = yaml.safe_load((ROOT / mounted[sources[0]]).read_text())["datasources"]
    assert source["url"] == "http://prometheus:9090"
    assert "9090:9090" in data["services"]["prometheus"]["ports"]
    (provider,) = yaml.safe_load((ROOT / mounted[providers[0]]).read_text())["providers"]
    dashboard = f"{provider['options']['path']}/digest-stream.json"
    assert mounted[dashboard] == "./deploy/grafana/dashboards/digest-stream.json"
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"
    assert "healthcheck" in grafana
