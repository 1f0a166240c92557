"""The operators' kit under deploy/ as data: alert rules, dashboard queries, manifests, and the
metric names a PromQL expression reads (parsed with promql-parser, never with a regex)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import promql_parser
import yaml

from digest_stream.ops import health
from digest_stream.ops.metrics import Metrics
from tests.support import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "rules.yml"
RULES_TEST = DEPLOY / "prometheus" / "rules_test.yml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "digest-stream.json"
GRAFANA_PROVISIONING = DEPLOY / "grafana" / "provisioning"
KUBERNETES = DEPLOY / "kubernetes"
#: The rule group that reads kube-state-metrics, not the service (no real scrape has it).
KUBERNETES_GROUP = "digest-stream-kubernetes"

_SET_OPERATORS = {"and", "or", "unless"}
_COMPARISONS = {"==", "!=", ">", "<", ">=", "<="}


@dataclass(frozen=True)
class Alert:
    """One alerting rule of rules.yml."""

    group: str
    name: str
    expr: str
    rule: dict[str, Any]


def yaml_file(path: Path) -> Any:
    """One YAML document."""
    return yaml.safe_load(path.read_text())


def alerts() -> list[Alert]:
    """Every alerting rule, in file order."""
    found = []
    for group in yaml_file(RULES)["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                found.append(Alert(group["name"], rule["alert"], rule["expr"], rule))
    return found


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard JSON."""
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def dashboard_queries(rate_interval: str = "1m") -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel target, Grafana's $__rate_interval filled in."""
    queries = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", rate_interval)
            queries.append((panel["title"], expr))
    return queries


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (it must parse)."""
    names: set[str] = set()

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            names.update(m.value for m in node.matchers.matchers if m.name == "__name__")

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def compared_quantities(expr: str) -> list[str]:
    """The expressions an alert compares with its thresholds, as PromQL.

    An alert's expression returns nothing while it does not fire, so "does it read real
    series" is asked of what it compares: each side of and/or/unless, and the non-literal side
    of each comparison with a number (``x > 60`` -> ``x``).
    """
    node = promql_parser.parse(expr)
    found: list[str] = []

    def descend(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.ParenExpr):
            descend(node.expr)
        elif isinstance(node, promql_parser.BinaryExpr) and str(node.op) in _SET_OPERATORS:
            descend(node.lhs)
            descend(node.rhs)
        elif isinstance(node, promql_parser.BinaryExpr) and str(node.op) in _COMPARISONS:
            if isinstance(node.rhs, promql_parser.NumberLiteral):
                descend(node.lhs)
            elif isinstance(node.lhs, promql_parser.NumberLiteral):
                descend(node.rhs)
            else:
                found.append(str(node))
        else:
            found.append(str(node))

    descend(node)
    return found


def kubernetes_resources() -> list[dict[str, Any]]:
    """Every resource of every manifest under deploy/kubernetes/."""
    resources: list[dict[str, Any]] = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        resources.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return resources


def exported_families() -> dict[str, set[str]]:
    """Every metric family the service declares -> the sample names it exports: the Metrics
    registry and the gauges computed at scrape time (ops/health.py)."""
    families: dict[str, set[str]] = {}
    for family in Metrics().registry.collect():
        if family.type == "counter":
            families[family.name] = {f"{family.name}_total"}
        elif family.type == "histogram":
            families[family.name] = {f"{family.name}_{s}" for s in ("bucket", "sum", "count")}
        else:
            families[family.name] = {family.name}
    gauges = (health.WAITING, health.READY, health.OVERDUE, health.LAG, health.OWNED)
    families.update({name: {name} for name in (*gauges, health.LOOP_AGE, health.READY_G)})
    families[health.LIBRARY_OK] = {health.LIBRARY_OK}
    return families


def exported_names() -> set[str]:
    """Every sample name the service exports, and Prometheus' own `up` of each target."""
    return {"up"}.union(*exported_families().values())
