"""OS-level names for the service's threads, so `top -H`, `ps -L` and /proc show which role a
thread's CPU went to (Python before 3.14 names its threads for Python only; librdkafka names
its own, ``rdk:*``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
from collections.abc import Callable

_PR_SET_NAME = 15  # prctl(2)
_NAME_BYTES = 15  # the kernel keeps 15 bytes and a NUL


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        # PyDLL: the call keeps the GIL (a CDLL call releases it, and the thread would then
        # wait a switch interval to get it back before its first task)
        libc = ctypes.PyDLL(ctypes.util.find_library("c") or "libc.so.6")
        prctl: Callable[..., int] = libc.prctl
        return prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def name_os_thread(name: str | None = None) -> None:
    """Give the calling thread ``name`` (default: its Python name) at the OS level, cut to 15
    bytes; a no-op where the platform cannot (naming is for operators, never needed)."""
    if _PRCTL is None:
        return
    text = (name or threading.current_thread().name).encode("utf-8", "replace")[:_NAME_BYTES]
    _PRCTL(_PR_SET_NAME, ctypes.c_char_p(text), 0, 0, 0)
