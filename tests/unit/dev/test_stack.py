"""The `digest-stream dev` entry point: exports and clear failures (status on the running stack:
tests/integration/dev/test_stack.py)."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from digest_stream.cli import main
from digest_stream.dev import process
from digest_stream.dev import stack as devstack
from digest_stream.dev.redis import REDIS_URL


def test_env_prints_the_settings_exports() -> None:
    result = CliRunner().invoke(main, ["dev", "env"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert f"export DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS={devstack.Endpoints().kafka}" in lines
    assert f"export DIGEST_STREAM_REDIS_URL={REDIS_URL}" in lines


def test_missing_tool_fails_with_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(devstack.StackError) as info:
        process.require("java", "install OpenJDK 17")
    assert str(info.value) == "'java' not found on PATH: install OpenJDK 17"
    assert "\n" not in str(info.value)


def test_pid_files_only_match_their_own_process(tmp_path: os.PathLike[str]) -> None:
    # A pid file pointing at an unrelated live process (this test) must not be treated as ours.
    assert not process.alive(os.getpid(), "kafka.Kafka")
    assert process.alive(os.getpid(), "python") or process.alive(os.getpid(), "pytest")


def test_the_registry_is_exported_for_opting_in_not_as_the_setting() -> None:
    lines = devstack.Endpoints().exports(cluster=False, registry=True)
    assert f"export {devstack.REGISTRY_ENV}={devstack.Endpoints().registry_url}" in lines
    assert devstack.Endpoints().registry_url.endswith("/apis/ccompat/v7")
    # Exporting the setting itself would switch every command and test to registry mode.
    assert not any("DIGEST_STREAM_SCHEMA_REGISTRY_URL=" in line for line in lines)


def test_a_kraft_cluster_id_never_starts_with_a_dash() -> None:
    # One base64url id in 64 starts with '-', which kafka-storage's `format -t` reads as an
    # option ("argument --cluster-id/-t: expected one argument"): the dev stack's broker and
    # the tests' own failed to format that often (seen in make test).
    from digest_stream.dev.kafka import new_cluster_id

    ids = [new_cluster_id() for _ in range(3000)]
    assert all(len(one) == 22 and not one.startswith("-") for one in ids)
    assert len(set(ids)) == len(ids)
