"""The store's part of the dev stack: the stack and `digest-stream dev` drive whichever part
the chosen backend names, and the Redis part keeps the lines, keys and exit codes users know."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner

from digest_stream.cli import main
from digest_stream.dev import redis as devredis
from digest_stream.dev import stack as devstack
from digest_stream.dev.parts import DevPart, chosen_part, default_part, every_part, part_of
from digest_stream.store.redis.backend import REDIS


@pytest.fixture(autouse=True)
def own_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing here may reach a running stack: its own stack dir, no store or config setting.
    monkeypatch.setenv("DIGEST_STREAM_STACK_DIR", str(tmp_path))
    monkeypatch.delenv("DIGEST_STREAM_STORE", raising=False)
    monkeypatch.delenv("DIGEST_STREAM_CONFIG", raising=False)


class FakePart:
    """A second backend's part, as the stack sees one: it records what it is asked."""

    label = "Fake"
    cluster_help = "Also start the fake cluster."

    def __init__(self, answers: bool) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def up(self, cluster: bool) -> None:
        self.calls.append(f"up cluster={cluster}")

    def down(self) -> None:
        self.calls.append("down")

    def status(self) -> dict[str, bool]:
        return {"fake": self.answers, "fake-cluster": False}

    def cluster_running(self) -> bool:
        return False

    def exports(self, cluster: bool) -> list[str]:
        return ["export DIGEST_STREAM_FAKE_URL=fake://here"]

    def ready(self, states: Mapping[str, bool]) -> bool:
        return states["fake"]


@pytest.fixture
def quiet_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stack's other parts answered without a process: kafka up, the rest down."""
    monkeypatch.setattr(devstack, "kafka_answers", lambda: True)
    monkeypatch.setattr(devstack, "registry_running", lambda: False)
    monkeypatch.setattr(devstack, "secure_running", lambda: False)
    for name in ("registry_down", "secure_down", "kafka_down"):
        monkeypatch.setattr(devstack, name, lambda: None)


def _choose(monkeypatch: pytest.MonkeyPatch, part: DevPart) -> None:
    monkeypatch.setattr(devstack, "chosen_part", lambda: part)
    monkeypatch.setattr(devstack, "every_part", lambda: [part])


def test_the_redis_backend_names_its_part_by_module() -> None:
    part: DevPart = devredis.PART  # mypy holds it to the protocol
    assert part.label == "Redis"
    assert REDIS.dev_part == "digest_stream.dev.redis"
    assert part_of(REDIS) is devredis.PART
    assert chosen_part() is default_part() is devredis.PART
    assert devredis.PART in every_part()  # `dev down` stops it whatever the setting


def test_the_redis_part_keeps_the_status_keys_and_exports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(devredis, "redis_ping", lambda port, cluster=False: True)
    monkeypatch.setattr(devredis, "cluster_running", lambda: False)
    part = devredis.PART
    assert part.status() == {"redis": True, "redis-cluster": False}
    assert part.ready({"redis": True, "redis-cluster": False})
    assert not part.ready({"redis": False, "redis-cluster": True})
    url = f"export DIGEST_STREAM_REDIS_URL=redis://127.0.0.1:{devredis.REDIS_PORT}/0"
    assert part.exports(cluster=False) == [url]
    nodes = ",".join(f"127.0.0.1:{port}" for port in devredis.CLUSTER_PORTS)
    assert part.exports(cluster=True) == [url, f"export DIGEST_STREAM_REDIS_CLUSTER_NODES={nodes}"]


def test_the_stack_drives_only_the_chosen_part(
    monkeypatch: pytest.MonkeyPatch, quiet_stack: None
) -> None:
    fake = FakePart(answers=True)
    _choose(monkeypatch, fake)
    endpoints = devstack.up(cluster=True, kafka=False)
    assert fake.calls == ["up cluster=True"]
    assert endpoints.exports(cluster=True) == [
        f"export DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS={endpoints.kafka}",
        "export DIGEST_STREAM_FAKE_URL=fake://here",
    ]
    # the part's keys sit where the store's always have: after kafka, before the registry
    assert list(devstack.status()) == [
        "kafka", "fake", "fake-cluster", "schema-registry", "secured"
    ]  # fmt: skip
    devstack.down()
    assert fake.calls == ["up cluster=True", "down"]


@pytest.mark.parametrize("answers", [True, False])
def test_dev_status_exits_by_the_parts_readiness(
    monkeypatch: pytest.MonkeyPatch, quiet_stack: None, answers: bool
) -> None:
    _choose(monkeypatch, FakePart(answers=answers))
    result = CliRunner().invoke(main, ["dev", "status"])
    assert result.exit_code == (0 if answers else 1), result.output
    assert f"fake           {'up' if answers else 'down'}" in result.output.splitlines()


def test_dev_status_prints_the_keys_users_know(
    monkeypatch: pytest.MonkeyPatch, quiet_stack: None
) -> None:
    monkeypatch.setattr(devredis, "redis_ping", lambda port, cluster=False: False)
    monkeypatch.setattr(devredis, "cluster_running", lambda: False)
    result = CliRunner().invoke(main, ["dev", "status"])
    assert result.exit_code == 1  # Redis down: as before, whatever else answers
    assert result.output.splitlines() == [
        "kafka          up",
        "redis          down",
        "redis-cluster  down",
        "schema-registry down",
        "secured        down",
    ]


def test_an_unknown_store_stops_dev_with_one_line(
    monkeypatch: pytest.MonkeyPatch, quiet_stack: None
) -> None:
    monkeypatch.setenv("DIGEST_STREAM_STORE", "nope")
    for command in ("env", "status", "up"):
        result = CliRunner().invoke(main, ["dev", command])
        assert result.exit_code == 1, result.output
        line = result.stderr
        assert line.startswith(
            f"digest-stream dev {command}: invalid setting DIGEST_STREAM_STORE: "
            "unknown store 'nope': one of "
        ), line
        assert line.count("\n") == 1
        assert "redis" in line
