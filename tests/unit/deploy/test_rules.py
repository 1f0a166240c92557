"""deploy/prometheus: promtool checks and unit-tests the alert rules; every alert has a unit
test, a runbook entry in docs/operations.md, and reads only metrics the service exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO_ROOT
from tests.support.deploy import (
    KUBERNETES_GROUP,
    PROMETHEUS_CONFIG,
    RULES,
    RULES_TEST,
    alerts,
    exported_names,
    metric_names,
    yaml_file,
)

OPERATIONS = REPO_ROOT / "docs" / "operations.md"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        pytest.fail(
            "promtool is missing: install Debian's `prometheus` package"
            " (make test installs it: scripts/system-deps.sh)"
        )
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)


def test_promtool_accepts_the_rules_and_the_compose_config() -> None:
    checked = _promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout
    config = _promtool("check", "config", str(PROMETHEUS_CONFIG))
    assert config.returncode == 0, config.stdout + config.stderr


def test_promtool_unit_tests_pass() -> None:
    result = _promtool("test", "rules", str(RULES_TEST))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_promtool_unit_tests_catch_a_wrong_expectation(
    tmp_path: Path,
) -> None:
    # The unit tests compare labels and rendered annotations: a wrong value must fail them.
    text = RULES_TEST.read_text().replace('"3 messages went', '"4 messages went')
    assert text != RULES_TEST.read_text()
    broken = tmp_path / "rules_test.yml"
    broken.write_text(text.replace("  - rules.yml", f"  - {RULES}"))
    result = _promtool("test", "rules", str(broken))
    assert result.returncode != 0
    assert "DigestStreamDeadLetters" in result.stdout + result.stderr


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    fired = {
        case["alertname"]
        for test in yaml_file(RULES_TEST)["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    names = [a.name for a in alerts()]
    assert len(names) == len(set(names)), "alert names repeat"
    assert set(names) <= fired, f"alerts without a firing unit test: {set(names) - fired}"


def test_every_alert_has_a_runbook_entry_in_operations_md() -> None:
    text = OPERATIONS.read_text()
    # GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes.
    anchors = {
        re.sub(r"[^a-z0-9 _-]", "", m.group(1).strip().lower()).replace(" ", "-")
        for m in re.finditer(r"^#+ (.+)$", text, re.MULTILINE)
    }
    for alert in alerts():
        runbook = alert.rule["annotations"]["runbook"]
        assert runbook == f"docs/operations.md#{alert.name.lower()}", alert.name
        assert alert.name.lower() in anchors, f"docs/operations.md has no heading {alert.name}"
        assert alert.rule["labels"]["severity"] in {"critical", "warning"}, alert.name
        assert alert.rule["annotations"]["summary"], alert.name


def test_alert_expressions_read_only_metrics_the_service_exports() -> None:
    exported = exported_names()
    for alert in alerts():
        names = metric_names(alert.expr)
        assert names, alert.name
        if alert.group == KUBERNETES_GROUP:
            assert all(n.startswith("kube_") for n in names), alert.name
        else:
            assert names <= exported, f"{alert.name} reads unknown metrics {names - exported}"
