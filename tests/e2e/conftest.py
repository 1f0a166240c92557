"""End-to-end harness: real topics, real Redis, the real app object or the real CLI process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Message

from digest_stream.app import App
from digest_stream.client import EventProducer
from digest_stream.settings import Settings, env_name
from digest_stream.wire import codec
from digest_stream.wire.models import Digest
from tests.conftest import TopicFactory, committed_offsets, unique, wait_until

# Short delays so a digest cycle takes seconds; the semantics are the production ones.
FAST = {
    "minimum_delay": 2.0,
    "increment_delay": 0.5,
    "maximum_delay": 4.0,
    "ttl": 120.0,
    "scheduler_interval": 0.1,
    "maintenance_interval": 1.0,
    "maintenance_timeout": 10.0,
    "batch_timeout": 0.02,
    "retry_backoff_initial": 0.05,
    "retry_backoff_max": 1.0,
}


@dataclass
class Pipeline:
    """Topics, namespace and groups of one test, and ways to run the service on them."""

    settings: Settings
    partitions: int
    apps: list[App] = field(default_factory=list)
    processes: list[ServiceProcess] = field(default_factory=list)

    def with_settings(self, **changes: Any) -> Settings:
        """These settings with some fields changed (validated)."""
        return Settings.model_validate({**self.settings.model_dump(), **changes})

    def app(self, roles: str = "ingest,scheduler,delivery", **changes: Any) -> App:
        """Start an in-process app; it is stopped at the end of the test."""
        app = App(self.with_settings(**changes), roles=frozenset(roles.split(",")))
        app.start()
        self.apps.append(app)
        return app

    def process(self, roles: str = "ingest,scheduler,delivery", **env: str) -> ServiceProcess:
        """Start `digest-stream run` as a separate process; stopped at the end of the test."""
        proc = ServiceProcess(self.settings, roles, env)
        self.processes.append(proc)
        return proc

    def committed(self, partition: int = 0) -> int:
        """The ingest group's committed offset of an input partition (negative: none)."""
        (offset,) = committed_offsets(self.settings, [partition])
        return offset

    def producer(self) -> EventProducer:
        """An EventProducer on the events topic."""
        return EventProducer(
            self.settings.kafka_bootstrap_servers, topic=self.settings.events_topic
        )

    def output(self) -> Collector:
        """A collector of every digest message on the output topic, from the beginning."""
        return Collector(self.settings, self.settings.output_topic)

    def dlq(self) -> Collector:
        """A collector of the DLQ topic."""
        return Collector(self.settings, self.settings.dlq_topic)


class ServiceProcess:
    """The real CLI in a child process, with its own log file; killed by pid."""

    def __init__(self, settings: Settings, roles: str, extra_env: dict[str, str]) -> None:
        env = dict(os.environ)
        for name, value in settings.model_dump(mode="json").items():
            if value is not None:
                env[env_name(name)] = value if isinstance(value, str) else _json(value)
        env.update(extra_env)
        self.log_path = Path(os.environ.get("PYTEST_TMP", "/tmp")) / f"{unique('svc')}.log"
        self._log = self.log_path.open("wb")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "digest_stream.cli", "run", "--roles", roles],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    @property
    def pid(self) -> int:
        """The child's pid."""
        return self.popen.pid

    def kill(self) -> None:
        """SIGKILL: no graceful anything."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait for the graceful stop; returns the exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
        return self.popen.returncode

    def log(self) -> str:
        """What the process printed so far."""
        return self.log_path.read_text(errors="replace")


def _json(value: object) -> str:
    import json

    return json.dumps(value)


class Collector:
    """Reads a topic from the beginning with a fresh group and keeps every message."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.messages: list[Message] = []
        self._consumer = Consumer(
            {
                "bootstrap.servers": settings.kafka_bootstrap_servers,
                "group.id": unique("collector"),
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self._consumer.subscribe([topic])

    def poll(self, timeout: float = 0.1) -> None:
        """Fetch whatever arrived."""
        for message in self._consumer.consume(1000, timeout=timeout):
            if message.error() is None:
                self.messages.append(message)

    def observe(self, seconds: float) -> None:
        """Keep reading for a fixed window: for asserting that nothing *else* arrives."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.poll()

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll until condition() holds, or fail naming what was awaited."""

        def check() -> bool:
            self.poll()
            return condition()

        wait_until(check, timeout, what, interval=0)

    @property
    def digests(self) -> list[Digest]:
        """Every digest message decoded, in arrival order."""
        return [codec.decode_digest(m.value() or b"") for m in self.messages]

    def record_ids(self) -> set[str]:
        """Every record id seen in any digest."""
        return {r.id for d in self.digests for r in d.records}

    def close(self) -> None:
        """Leave the group."""
        self._consumer.close()


PipelineFactory = Callable[..., Pipeline]


def digest_ids_by_record(digests: list[Digest]) -> dict[str, set[str]]:
    """record id -> the digest ids it appeared in (more than one = a real duplicate)."""
    seen: dict[str, set[str]] = {}
    for digest in digests:
        for record in digest.records:
            seen.setdefault(record.id, set()).add(digest.id)
    return seen


@pytest.fixture
def pipeline_factory(
    kafka_bootstrap: str,
    redis_url: str,
    topic_factory: TopicFactory,
    namespace: str,
) -> Iterator[PipelineFactory]:
    """Build a pipeline on fresh topics; stop every app and process it started."""
    made: list[Pipeline] = []

    def make(partitions: int = 4, **changes: Any) -> Pipeline:
        base = unique("e2e")
        settings = Settings.model_validate(
            {
                "kafka_bootstrap_servers": kafka_bootstrap,
                "redis_url": redis_url,
                "namespace": namespace,
                "events_topic": topic_factory(partitions=partitions, name=f"{base}.events"),
                "schedule_topic": topic_factory(partitions=partitions, name=f"{base}.schedule"),
                "output_topic": topic_factory(partitions=partitions, name=f"{base}.output"),
                "dlq_topic": topic_factory(partitions=1, name=f"{base}.dlq"),
                "group_id": f"{base}-ingest",
                "delivery_group_id": f"{base}-delivery",
                **FAST,
                **changes,
            }
        )
        pipe = Pipeline(settings, partitions)
        made.append(pipe)
        return pipe

    yield make
    for pipe in made:
        for app in pipe.apps:
            app.stop()
        for app in pipe.apps:
            app.wait()
        for proc in pipe.processes:
            proc.stop(timeout=30)
