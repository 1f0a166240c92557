"""deploy/kubernetes: every manifest validates offline against the Kubernetes schemas that
kubernetes-validate bundles, and its settings against the settings model (as test_compose.py
does for docker-compose.yml); probes, termination and KEDA's bounds agree with the service."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
from kubernetes_validate import ValidationError, validate

from digest_stream.app import STOP_TIMEOUT
from digest_stream.settings import ENV_PREFIX, Settings, env_name
from tests.support.deploy import kubernetes_resources

# The oldest Kubernetes these manifests claim (PDB unhealthyPodEvictionPolicy is GA in 1.31)
# and the newest the validator bundles.
VERSIONS = ("1.31", "1.37")
KEDA_KINDS = {"ScaledObject", "TriggerAuthentication"}


def _one(kind: str) -> dict[str, Any]:
    (found,) = [r for r in kubernetes_resources() if r["kind"] == kind]
    return found


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def _pod_env(container: dict[str, Any]) -> dict[str, str]:
    """What the container's environment holds: envFrom the ConfigMap and Secret, then env."""
    by_name = {(r["kind"], r["metadata"]["name"]): r for r in kubernetes_resources()}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(by_name["ConfigMap", source["configMapRef"]["name"]]["data"])
        else:
            env.update(by_name["Secret", source["secretRef"]["name"]]["stringData"])
    env.update({item["name"]: item["value"] for item in container.get("env", [])})
    return env


def _settings(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    # Read exactly as the pod reads them: from the environment, nothing of this shell's.
    known = {env_name(name) for name in Settings.model_fields}
    ours = {name for name in env if name.startswith(ENV_PREFIX)}
    assert ours <= known, f"unknown settings in the manifests: {sorted(ours - known)}"
    for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()


@pytest.mark.parametrize("version", VERSIONS)
def test_every_core_resource_validates_strictly_against_the_kubernetes_schema(
    version: str,
) -> None:
    resources = [r for r in kubernetes_resources() if r["kind"] not in KEDA_KINDS]
    kinds = {r["kind"] for r in resources}
    assert {"Deployment", "PodDisruptionBudget", "ConfigMap", "Secret", "Job"} <= kinds
    for resource in resources:
        validate(resource, version, strict=True)  # raises on an unknown or mistyped field


def test_the_validator_refuses_a_mistyped_manifest() -> None:
    deployment = copy.deepcopy(_one("Deployment"))
    deployment["spec"]["template"]["spec"]["terminationGracePeriodSecond"] = 90
    with pytest.raises(ValidationError):
        validate(deployment, VERSIONS[0], strict=True)
    deployment = copy.deepcopy(_one("Deployment"))
    _container(deployment)["livenessProbe"]["httpGet"]["port"] = [9464]
    with pytest.raises(ValidationError):
        validate(deployment, VERSIONS[0], strict=True)


def test_pod_settings_are_settings_and_serve_probes_to_the_kubelet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deployment = _one("Deployment")
    container = _container(deployment)
    settings = _settings(_pod_env(container), monkeypatch)
    assert settings.metrics_host == "0.0.0.0", "the kubelet probes from outside the pod"
    (port,) = container["ports"]
    assert port["containerPort"] == settings.metrics_port
    assert container["args"][:1] == ["run"]
    roles = container["args"][container["args"].index("--roles") + 1]
    assert set(roles.split(",")) == {"ingest", "scheduler", "delivery"}
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                        ("readinessProbe", "/readyz")):  # fmt: skip
        assert container[probe]["httpGet"] == {"path": path, "port": port["name"]}, probe
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(settings.metrics_port)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > STOP_TIMEOUT + 10
    # A surge pod beyond the partition count owns nothing, is never ready, stalls the rollout.
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_secrets_live_in_the_secret_not_the_config_map() -> None:
    data = _one("ConfigMap")["data"]
    secret = _one("Secret")["stringData"]
    assert env_name("redis_url") in secret
    assert env_name("kafka_config") in secret
    assert not {env_name("redis_url"), env_name("kafka_config")} & set(data)


def test_the_topics_job_runs_with_the_same_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    job = _container(_one("Job"))
    assert job["args"][:2] == ["topics", "create"]
    assert job["envFrom"] == _container(_one("Deployment"))["envFrom"]
    _settings(_pod_env(job), monkeypatch)


def test_the_disruption_budget_covers_the_pods_one_at_a_time() -> None:
    pdb = _one("PodDisruptionBudget")["spec"]
    labels = _one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["maxUnavailable"] == 1


def test_keda_scales_the_deployment_on_the_ingest_lag_up_to_the_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # kubernetes-validate bundles no CRD schemas: the ScaledObject's shape is checked here,
    # field by field, against KEDA's v1alpha1 API (scaleTargetRef and triggers required;
    # trigger metadata is a map of strings).
    scaled = _one("ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    spec = scaled["spec"]
    assert set(spec) <= {"scaleTargetRef", "minReplicaCount", "maxReplicaCount",
                         "pollingInterval", "cooldownPeriod", "advanced", "triggers",
                         "idleReplicaCount", "fallback", "initialCooldownPeriod"}  # fmt: skip
    deployment = _one("Deployment")
    assert spec["scaleTargetRef"] == {"name": deployment["metadata"]["name"]}
    settings = _settings(_pod_env(_container(deployment)), monkeypatch)
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    assert all(isinstance(v, str) for v in meta.values()), "trigger metadata is strings only"
    assert meta["bootstrapServers"] == settings.kafka_bootstrap_servers
    assert meta["consumerGroup"] == settings.group_id, "the ingest group, not delivery's"
    assert meta["topic"] == settings.events_topic
    assert int(meta["lagThreshold"]) > 0
    assert meta["allowIdleConsumers"] == "false"
    args = _container(_one("Job"))["args"]
    partitions = int(args[args.index("--partitions") + 1])
    assert spec["maxReplicaCount"] == partitions, "a pod beyond the partitions owns nothing"
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    (step,) = behavior["scaleDown"]["policies"]
    assert step == {"type": "Pods", "value": 1, "periodSeconds": step["periodSeconds"]}
