"""A real Prometheus server (Debian's `prometheus` package) for one test: loopback, a free port,
its own data directory, stopped by pid; queried through its HTTP API."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import urllib.parse
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import yaml

from tests.support import free_port, wait_until
from tests.support.http import get


class PrometheusServer:
    """`prometheus` scraping static targets every second and evaluating rule files."""

    def __init__(
        self,
        workdir: Path,
        job: str,
        targets: list[str],
        rule_files: list[Path],
        interval: str = "1s",
    ) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail(
                "prometheus is missing: install Debian's `prometheus` package"
                " (make test installs it: scripts/system-deps.sh)"
            )
        workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}],
        }
        config_path = workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "prometheus.log"
        self._log = self.log_path.open("wb")
        self.popen = subprocess.Popen(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def __enter__(self) -> PrometheusServer:
        try:
            wait_until(
                lambda: self.popen.poll() is not None or get(f"{self.url}/-/ready")[0] == 200,
                60,
                "Prometheus ready",
                interval=0.2,
            )
            assert self.popen.poll() is None, f"Prometheus exited: {self.log()}"
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM by pid, SIGKILL if it has not stopped within 30 s."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        self._log.close()

    def log(self) -> str:
        """What Prometheus printed so far."""
        return self.log_path.read_text(errors="replace")

    def api(self, path: str, **params: str | float) -> Any:
        """The `data` of a successful API call; fails the test on an error answer."""
        query = urllib.parse.urlencode(params)
        status, body = get(f"{self.url}/api/v1/{path}?{query}", timeout=30)
        answer = json.loads(body) if body else {}
        assert status == 200, f"{path} {params}: HTTP {status} {answer}"
        assert answer.get("status") == "success", f"{path} {params}: {answer}"
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of an expression, now."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", f"{expr}: {data['resultType']}"
        result: list[dict[str, Any]] = data["result"]
        return result

    def value(self, expr: str) -> float:
        """The single value of an expression now (0 when it returns nothing)."""
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else 0.0

    def query_range(self, expr: str, start: float, end: float) -> list[dict[str, Any]]:
        """The series an expression returns anywhere in [start, end], one point a second."""
        data = self.api("query_range", query=expr, start=start, end=end, step=1)
        result: list[dict[str, Any]] = data["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing)."""
        found: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return found

    def metric_names(self) -> set[str]:
        """Every metric name Prometheus has stored (from its scrapes and its own `up`)."""
        return set(self.api("label/__name__/values"))
