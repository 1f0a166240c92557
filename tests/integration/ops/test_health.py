"""Health and readiness over a read-only view of a process: no broker, no Redis."""

from __future__ import annotations

import ast
import inspect
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest
import redis
from confluent_kafka import KafkaException

from digest_stream import app as app_module
from digest_stream.clock import Clock, ManualClock
from digest_stream.kafka import ClientErrors
from digest_stream.ops import health as health_module
from digest_stream.ops.health import Health, HealthView, Heartbeats
from digest_stream.ops.metrics import Metrics
from digest_stream.settings import Settings
from digest_stream.store.base import DigestStore
from digest_stream.store.errors import InvalidState
from digest_stream.store.redis import RedisStore
from tests.support.proxy import TcpProxy


@dataclass
class FakeView:
    """The few things health reads, set by hand."""

    roles: frozenset[str] = frozenset({"ingest", "scheduler", "delivery"})
    owned_partitions: frozenset[int] | None = frozenset({0})
    started: bool = True
    stopping: bool = False
    paused_roles: list[str] = field(default_factory=list)
    failed: BaseException | None = None
    settings: Settings = field(default_factory=lambda: Settings(stall_timeout=5.0))
    clock: Clock = field(default_factory=ManualClock)
    metrics: Metrics = field(default_factory=Metrics)
    heartbeats: Heartbeats = field(default_factory=Heartbeats)
    store: DigestStore | None = None
    kafka_errors: ClientErrors = field(default_factory=ClientErrors)
    missing_topics: dict[str, str] = field(default_factory=dict)

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


def test_not_ready_names_the_missing_topics_and_what_creates_them() -> None:
    # Issue 36 (h): "no input partitions assigned" alone did not say why.
    view = FakeView(
        owned_partitions=frozenset(),
        missing_topics={"d.events": "DIGEST_STREAM_EVENTS_TOPIC"},
    )
    ok, details = health(view).ready()
    assert not ok
    assert details["problems"] == [
        "no input partitions assigned",
        "Kafka topic d.events (DIGEST_STREAM_EVENTS_TOPIC) does not exist "
        "(`digest-stream topics create`)",
    ]


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


def test_a_loop_waiting_for_the_store_is_not_stuck_and_says_so() -> None:
    # Issue 38: the field speaks of the store; its old name stays as a deprecated alias.
    now = [0.0]
    view = FakeView(heartbeats=Heartbeats(clock=lambda: now[0]))
    view.heartbeats.beat("ingest")
    view.heartbeats.beat("delivery")
    probe = health(view)
    ok, details = probe.live()
    assert ok
    assert details["waiting_for_store"] is False
    assert details["waiting_for_redis"] is False
    view.metrics.store_errors.inc()  # a store call failed: the loops wait it out
    now[0] = 60.0  # past stall_timeout (5 s)
    ok, details = probe.live()
    assert ok, details
    assert details["waiting_for_store"] is True
    assert details["waiting_for_redis"] is True
    assert details["roles"]["ingest"]["stuck"] is False


def test_ingest_without_its_scheduler_is_never_ready() -> None:
    # Its partitions would be owned but never ticked: the second event of a timeline would
    # wait forever, so a probe must not route traffic to it.
    view = FakeView(roles=frozenset({"ingest"}))
    ok, details = health(view).ready()
    assert not ok
    assert details["problems"] == [
        "ingest runs without the scheduler: its partitions are never ticked"
    ]


def test_a_role_paused_for_an_outage_is_not_ready_and_ready_again_when_it_resumes() -> None:
    # A Redis refusing writes (OOM, an ACL) still answers the version check: the pause is
    # what tells that the role cannot do its work.
    view = FakeView(paused_roles=["ingest"])
    ok, details = health(view).ready()
    assert not ok
    assert details["problems"] == ["ingest paused, waiting out an outage (see the log)"]
    view.paused_roles = []
    assert health(view).ready()[0]


@pytest.mark.parametrize(
    ("error", "category"),
    [
        (RuntimeError("connect redis://svc:s3cret@10.0.0.7/0 failed"), "internal"),
        (redis.ResponseError("NOPERM user svc:s3cret has no permissions"), "redis"),
        (KafkaException("broker 10.0.0.7: s3cret"), "kafka"),
        (InvalidState("timeline s3cret:7 is READY"), "store"),
    ],
)
def test_healthz_names_the_failure_not_its_text(error: BaseException, category: str) -> None:
    # The probe answers anyone who reaches the port: the text (hosts, users, timelines) stays
    # in the log, the body says what kind of failure it was.
    view = FakeView(failed=error)
    ok, details = health(view).live()
    assert not ok
    assert details["status"] == "failed"
    assert details["error"] == {"category": category, "type": type(error).__name__}
    assert "s3cret" not in json.dumps(details)


def test_readyz_names_a_redis_error_by_its_class(
    redis_proxy: TcpProxy, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis.Redis.from_url(
        f"redis://{redis_proxy.address}/0", socket_timeout=1, socket_connect_timeout=1
    )
    view = FakeView(store=RedisStore(client, namespace=namespace))
    probe = health(view)
    assert probe.ready()[0]
    redis_proxy.block()
    with caplog.at_level(logging.WARNING, logger="digest_stream.ops.health"):
        ok, details = probe._check_ready()  # the uncached check
    assert not ok
    assert len(details["problems"]) == 1
    problem = details["problems"][0]
    assert problem.startswith("Redis unreachable (")
    assert problem.endswith("Error)")
    port = redis_proxy.address.rsplit(":", 1)[1]
    assert port not in json.dumps(details)
    assert any("readiness: Redis unreachable" in r.getMessage() for r in caplog.records)
    client.close()


def test_readiness_names_a_standing_kafka_refusal(caplog: pytest.LogCaptureFixture) -> None:
    # Issue 28, failure 3: /readyz said only "no input partitions assigned" while librdkafka
    # was refused the login; now it names the cause (not the text: that names hosts, users).
    from confluent_kafka import KafkaError

    sasl = {"security.protocol": "SASL_SSL", "sasl.username": "svc", "sasl.password": "pw"}
    view = FakeView(owned_partitions=frozenset(), settings=Settings(kafka_config=sasl))
    view.kafka_errors(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: bad"))
    with caplog.at_level(logging.WARNING):
        ok, details = health(view).ready()
    assert not ok
    assert details["problems"] == [
        "no input partitions assigned",
        "Kafka authentication failure (_AUTHENTICATION): see the log",
    ]
    assert details["kafka_error"] == {"kind": "authentication", "code": "_AUTHENTICATION"}
    assert "Kafka SASL authentication failed" in caplog.text  # the whole line, in the log
    # An unreachable broker alone does not make a ready process unready (it reconnects).
    busy = FakeView()
    busy.kafka_errors(KafkaError(KafkaError._TRANSPORT, "Connection refused"))
    ok, details = health(busy).ready()
    assert ok, details
    assert details["kafka_error"]["kind"] == "unreachable"
