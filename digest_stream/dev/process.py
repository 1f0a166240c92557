"""Processes of the local stack: pid files, start-up waits, ports, required tools."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HOST = "127.0.0.1"


class StackError(RuntimeError):
    """A failure the user can act on, reported as one line."""


def say(message: str) -> None:
    """One progress line on stderr."""
    print(f"[dev] {message}", file=sys.stderr, flush=True)


def stack_dir() -> Path:
    """Where pid files, configs, logs and data of the running stack live."""
    default = Path(tempfile.gettempdir()) / "digest-stream-stack"
    return Path(os.environ.get("DIGEST_STREAM_STACK_DIR", str(default)))


def cache_dir() -> Path:
    """Where downloaded jars are cached, outside the repository."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "digest-stream"
    return Path(os.environ.get("DIGEST_STREAM_CACHE_DIR", str(default)))


def read_pid(pid_file: Path) -> int | None:
    """The pid recorded in pid_file, or None."""
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int, marker: str) -> bool:
    """True when pid runs and its command line carries marker (guards against pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return marker in cmdline


def stop_pid(pid_file: Path, marker: str, name: str, grace: float = 20.0) -> None:
    """Stop the process of pid_file (SIGTERM, then SIGKILL after grace) if it is still ours."""
    pid = read_pid(pid_file)
    if pid is None or not alive(pid, marker):
        pid_file.unlink(missing_ok=True)
        return
    say(f"stopping {name} (pid {pid})")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive(pid, marker):
        time.sleep(0.1)
    if alive(pid, marker):
        say(f"{name} did not stop in {grace:.0f}s; killing it")
        os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)


def wait(what: str, check: Callable[[], bool], timeout: float, alive: Callable[[], bool]) -> None:
    """Poll check() until true; fail early when the process died, or at the deadline."""
    start = time.monotonic()
    last_note = start
    while True:
        if check():
            say(f"{what} ready after {time.monotonic() - start:.1f}s")
            return
        if not alive():
            raise StackError(f"{what} exited during start-up; see the logs under {stack_dir()}")
        now = time.monotonic()
        if now - start > timeout:
            raise StackError(f"{what} not ready after {timeout:.0f}s; see logs in {stack_dir()}")
        if now - last_note > 5:
            say(f"waiting for {what} ({now - start:.0f}s)")
            last_note = now
        time.sleep(0.25)


def port_open(port: int) -> bool:
    """Whether something listens on HOST:port."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def require(tool: str, hint: str) -> str:
    """The path of tool, or a StackError with the hint."""
    path = shutil.which(tool)
    if path is None:
        raise StackError(f"'{tool}' not found on PATH: {hint}")
    return path
