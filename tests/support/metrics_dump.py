"""A hook that writes a service process's counters to a file when it stops.

Fault-injection tests account for drops across process lifetimes: each `digest-stream run`
they start loads this hook through the real `hooks` setting (no test switch in the service):
``ServiceProcess(settings, roles, metrics_dump_env(path, env))``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from prometheus_client import Counter, generate_latest
from prometheus_client.metrics_core import Metric

from digest_stream.ops.hooks import Hook
from digest_stream.ops.metrics import Metrics
from digest_stream.settings import Settings, env_name

PATH_ENV = "DIGEST_STREAM_TEST_METRICS_FILE"


class _Counters:
    """A collector of some counters only: live gauges (lag, per-partition stats) need the
    clients the stopped roles have closed."""

    def __init__(self, counters: list[Counter]) -> None:
        self._counters = counters

    def collect(self) -> Iterator[Metric]:
        for counter in self._counters:
            yield from counter.collect()


class DumpCounters(Hook):
    """Writes every declared counter in the Prometheus text format when the roles stop."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def on_stop(self, metrics: Metrics) -> None:
        counters = [m for m in vars(metrics).values() if isinstance(m, Counter)]
        self._path.write_bytes(generate_latest(_Counters(counters)))


def dump_counters(settings: Settings) -> Hook:
    """The hook factory named in the `hooks` setting."""
    return DumpCounters(Path(os.environ[PATH_ENV]))


def metrics_dump_env(path: Path, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a service process that also dumps its counters to ``path`` at its stop
    (any hooks ``env`` already loads are kept)."""
    hooks_env = env_name("hooks")
    hooks = json.loads(env.get(hooks_env, "[]"))
    return {
        **env,
        hooks_env: json.dumps([*hooks, f"{__name__}:dump_counters"]),
        PATH_ENV: str(path),
    }
