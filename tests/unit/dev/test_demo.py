"""`make demo` (scripts/demo.sh) stops the stack only when it started it, also on Ctrl-C
(issue 20, item 13). The script drives a stub `digest-stream` that only logs what it is asked:
nothing here starts or stops the real (shared) stack."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support import REPO_ROOT, wait_until

# The stub: logs each call; `dev status` answers as STUB_STATUS says; `run` waits for SIGTERM
# (as the service does); `produce` waits STUB_PRODUCE seconds (a Ctrl-C arrives meanwhile).
STUB = """#!/usr/bin/env bash
echo "$*" >> "$STUB_LOG"
case "$1 ${2:-}" in
  "dev status") printf 'kafka          %s\\nredis          down\\n' "$STUB_STATUS" ;;
  "dev env") echo "export DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS=stub:1" ;;
  run*) trap 'echo stopped >> "$STUB_LOG"; exit 0' TERM; while :; do sleep 0.05; done ;;
  produce*) sleep "${STUB_PRODUCE:-0}" ;;
esac
exit 0
"""


def _demo(tmp_path: Path, status: str, produce: float = 0.0) -> subprocess.Popen[bytes]:
    stub = tmp_path / "digest-stream"
    stub.write_text(STUB)
    stub.chmod(0o755)
    env = {
        **os.environ,
        "DIGEST_STREAM_DEMO_CLI": str(stub),
        "STUB_LOG": str(tmp_path / "calls"),
        "STUB_STATUS": status,
        "STUB_PRODUCE": str(produce),
        "DEMO_SECONDS": "1",
    }
    # A test run started in the background of a shell without job control (`make test &`)
    # inherits SIGINT ignored, which the demo would inherit too, and bash cannot trap a signal
    # ignored on entry. A handled signal is reset to its default on exec: handle it here.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Its own session: a Ctrl-C reaches the whole foreground group, as from a terminal.
    return subprocess.Popen(
        ["bash", str(REPO_ROOT / "scripts" / "demo.sh")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_a_demo_that_started_the_stack_stops_it_after_the_service(tmp_path: Path) -> None:
    demo = _demo(tmp_path, "down")
    output, _ = demo.communicate(timeout=60)
    assert demo.returncode == 0, output
    calls = [c.split()[0] if not c.startswith("dev") else c for c in _calls(tmp_path)]
    assert "dev up" in calls
    assert calls[-1] == "dev down", calls
    assert calls.index("stopped") < calls.index("dev down")  # the service first
    assert b"stopping the stack the demo started" in output


def test_a_stack_that_was_already_running_is_left_running(tmp_path: Path) -> None:
    demo = _demo(tmp_path, "up")
    output, _ = demo.communicate(timeout=60)
    assert demo.returncode == 0, output
    assert "dev down" not in _calls(tmp_path)
    assert "stopped" in _calls(tmp_path)  # its own service is still stopped
    assert b"leaves it up (`make stack-down` stops it)" in output


def test_ctrl_c_stops_the_service_and_the_stack_it_started(tmp_path: Path) -> None:
    demo = _demo(tmp_path, "down", produce=30.0)
    wait_until(lambda: any(c.startswith("produce") for c in _calls(tmp_path)), 30, "produce")
    started = time.monotonic()
    os.killpg(demo.pid, signal.SIGINT)
    output, _ = demo.communicate(timeout=30)
    assert time.monotonic() - started < 10, output
    assert demo.returncode == 130, output
    calls = _calls(tmp_path)
    assert calls[-2:] == ["stopped", "dev down"], calls
