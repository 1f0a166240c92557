"""Helpers every test folder shares: unique names, ids, free ports and deadline waits.

Test modules take helpers from this package (`tests.support` and the modules beside this one),
never from another test module or a conftest.py; conftest.py files hold fixtures only.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository checkout (README.md, schemas/, docker-compose.yml), wherever a test sits."""


def unique(prefix: str) -> str:
    """A name no other test (or earlier run) uses: topics, groups, namespaces, users."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def new_id() -> str:
    """A fresh 32-hex-digit id (the shape of digest and record ids)."""
    return uuid.uuid4().hex


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(
    condition: Callable[[], bool], timeout: float, message: str, interval: float = 0.05
) -> None:
    """Poll condition until true; fail with message at the deadline (never a blind sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s: {message}")
        time.sleep(interval)
