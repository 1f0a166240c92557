"""Health and readiness over a read-only view of a process: no broker, no Redis."""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from digest_stream import app as app_module
from digest_stream.clock import Clock, ManualClock
from digest_stream.ops import health as health_module
from digest_stream.ops.health import Health, HealthView, Heartbeats
from digest_stream.ops.metrics import Metrics
from digest_stream.settings import Settings
from digest_stream.store.base import DigestStore


@dataclass
class FakeView:
    """The few things health reads, set by hand."""

    roles: frozenset[str] = frozenset({"ingest", "scheduler", "delivery"})
    owned_partitions: frozenset[int] | None = frozenset({0})
    started: bool = True
    stopping: bool = False
    failed: BaseException | None = None
    settings: Settings = field(default_factory=lambda: Settings(stall_timeout=5.0))
    clock: Clock = field(default_factory=ManualClock)
    metrics: Metrics = field(default_factory=Metrics)
    heartbeats: Heartbeats = field(default_factory=Heartbeats)
    store: DigestStore | None = None

    @property
    def scheduler_runs(self) -> bool:
        return "scheduler" in self.roles

    def loop_roles(self) -> list[str]:
        return [r for r in ("ingest", "delivery") if r in self.roles]


def health(view: HealthView) -> Health:
    return Health(view)


def _imports(module: ModuleType) -> set[str]:
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    found = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_health_does_not_import_the_app() -> None:
    # The view breaks the app <-> health cycle: the app imports health, never the reverse
    # (not even for typing).
    assert "digest_stream.ops.health" in _imports(app_module)
    assert "digest_stream.app" not in _imports(health_module)


def test_ready_with_partitions_and_not_before() -> None:
    view = FakeView()
    assert health(view).ready() == (True, {"ingest_partitions": [0], "status": "ready",
                                           "problems": []})  # fmt: skip
    idle = FakeView(owned_partitions=frozenset(), started=False)
    ok, details = health(idle).ready()
    assert not ok
    assert details["problems"] == ["not started", "no input partitions assigned"]


def test_live_follows_heartbeats_and_failure() -> None:
    view = FakeView()
    view.heartbeats.beat("ingest")
    view.heartbeats.beat("delivery")
    ok, details = health(view).live()
    assert ok
    assert details["status"] == "ok"
    assert set(details["roles"]) == {"ingest", "delivery"}
    view.failed = RuntimeError("boom")
    ok, details = health(view).live()
    assert not ok
    assert details["status"] == "failed"


def test_ingest_without_its_scheduler_is_never_ready() -> None:
    # Its partitions would be owned but never ticked: the second event of a timeline would
    # wait forever, so a probe must not route traffic to it.
    view = FakeView(roles=frozenset({"ingest"}))
    ok, details = health(view).ready()
    assert not ok
    assert details["problems"] == [
        "ingest runs without the scheduler: its partitions are never ticked"
    ]
