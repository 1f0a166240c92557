"""`digest-stream run` ends on a stop signal, even when a role hangs past STOP_TIMEOUT.

Each case runs the command in a child process whose App starts one fake role (no Kafka, no
Redis), then sends it SIGTERM: a hung role must not keep the process alive.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

SCRIPT = """
import os, signal, sys, threading, time
import digest_stream.app as app_module
from digest_stream.cli import main

app_module.STOP_TIMEOUT = 0.5
STEP = {step}

class Runner:  # joins nothing: a role without a consumer
    role = "ingest"
    def start(self, role, stopping): pass
    def lag(self): return {{}}
    def close(self, role): role.close()

class Role:
    step = staticmethod(STEP)
    def close(self): pass

def start(self):
    self._spawn(Runner(), Role())
    self.started = True

app_module.App.start = start
timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
timer.daemon = True
timer.start()
main(["run", "--roles", "ingest,scheduler"])
"""


@pytest.mark.parametrize(
    ("step", "code", "message"),
    [
        ("lambda: time.sleep(0.01) or 0", 0, None),
        ("lambda: time.sleep(3600) or 0", 1, "after the stop; exiting without them"),
        ("lambda: 1 / 0", 1, "stopped after an error: division by zero"),
    ],
    ids=["stops", "hung-role", "failed-role"],
)
def test_run_exits_on_sigterm(step: str, code: int, message: str | None) -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(step=step)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == code, result.stderr
    assert time.monotonic() - started < 30
    if message is not None:
        assert message in result.stderr
    else:
        assert "digest-stream run:" not in result.stderr


@pytest.mark.parametrize("roles", ["ingest", "ingest,delivery", "scheduler"])
def test_run_refuses_a_role_set_that_cannot_deliver(roles: str) -> None:
    # Ingest without the scheduler owns partitions nobody ticks; the scheduler without ingest
    # owns none. Either is refused before connecting to anything, in one line.
    result = subprocess.run(
        [sys.executable, "-m", "digest_stream.cli", "run", "--roles", roles],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"digest-stream run: --roles {roles}: ")
    assert "'ingest,scheduler'" in lines[0] or "add 'ingest'" in lines[0]
