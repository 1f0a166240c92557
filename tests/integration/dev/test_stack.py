"""`digest-stream dev status` on the running local stack."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from digest_stream.cli import main
from digest_stream.dev import stack as devstack


def test_status_reports_the_running_stack() -> None:
    if os.environ.get("DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS") != devstack.Endpoints().kafka:
        pytest.skip("the stack under test is not the local dev stack")
    result = CliRunner().invoke(main, ["dev", "status"])
    assert result.exit_code == 0, result.output
    assert "kafka          up" in result.output
    assert "redis          up" in result.output


def test_status_reports_the_registry_when_it_runs() -> None:
    if os.environ.get(devstack.REGISTRY_ENV) != devstack.Endpoints().registry_url:
        pytest.skip("the registry under test is not the local dev stack's")
    result = CliRunner().invoke(main, ["dev", "status"])
    assert "schema-registry up" in result.output


def test_status_and_env_report_the_secured_parts_when_they_run() -> None:
    from digest_stream.dev import secure

    if os.environ.get(devstack.SECURE_ENV) != str(secure.stack_file()):
        pytest.skip("the secured stack under test is not the local dev stack's")
    result = CliRunner().invoke(main, ["dev", "status"])
    assert "secured        up" in result.output
    exports = CliRunner().invoke(main, ["dev", "env", "--secure"])
    assert exports.exit_code == 0, exports.output
    assert "export DIGEST_STREAM_REDIS_LOAD_LIBRARY=false" in exports.output
