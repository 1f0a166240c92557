"""The pipeline harness: one test's topics, namespace and groups, and the service running on
them, as in-process apps or as real `digest-stream run` processes (the `pipeline_factory`
fixture of tests/conftest.py builds it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from digest_stream.app import App
from digest_stream.client import EventProducer
from digest_stream.ops.hooks import Hook
from digest_stream.settings import Settings, env_name
from tests.support import unique
from tests.support.kafka import Collector, committed_offsets

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

    def app(
        self, roles: str = "ingest,scheduler,delivery", hooks: Sequence[Hook] = (), **changes: Any
    ) -> App:
        """Start an in-process app (with ``hooks`` registered); stopped at the end of the test."""
        app = App(self.with_settings(**changes), roles=frozenset(roles.split(",")), hooks=hooks)
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
        env = {**os.environ, **settings_env(settings), **extra_env}
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


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment variables that give a CLI command these settings (unset ones left out)."""
    return {
        env_name(name): value if isinstance(value, str) else json.dumps(value)
        for name, value in settings.model_dump(mode="json").items()
        if value is not None
    }


def cli_flags(settings: Settings) -> list[str]:
    """The flags that point a CLI command at one test's topics and namespace."""
    return [
        "--kafka-bootstrap-servers", settings.kafka_bootstrap_servers,
        "--redis-url", settings.redis_url,
        "--namespace", settings.namespace,
        "--events-topic", settings.events_topic,
        "--schedule-topic", settings.schedule_topic,
        "--output-topic", settings.output_topic,
        "--dlq-topic", settings.dlq_topic,
    ]  # fmt: skip


def inspected(timeline: str, flags: Sequence[str]) -> str:
    """What ``digest-stream inspect TIMELINE`` prints (it must succeed)."""
    from click.testing import CliRunner

    from digest_stream.cli import main

    result = CliRunner().invoke(main, ["inspect", timeline, *flags])
    assert result.exit_code == 0, result.output
    return result.output


PipelineFactory = Callable[..., Pipeline]
"""The `pipeline_factory` fixture: `make(partitions=4, **setting_changes) -> Pipeline`."""
