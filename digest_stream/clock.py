"""Time sources: the store takes ``now`` explicitly; a clock object supplies it."""

from __future__ import annotations

import math
import time
from typing import Protocol


class Clock(Protocol):
    """A source of wall-clock time in float seconds since the epoch."""

    def now(self) -> float:
        """Current time in seconds."""
        ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> float:
        """Current time from ``time.time()``."""
        return time.time()


class ManualClock:
    """A clock that moves only when told to: tests and simulations drive it."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = _checked(start)

    def now(self) -> float:
        """The time last set."""
        return self._now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (never backwards) and return the new time."""
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"can only advance by a finite, non-negative amount, got {seconds!r}")
        self._now += seconds
        return self._now

    def set(self, now: float) -> None:
        """Jump to ``now`` (may go backwards: clocks on real machines do)."""
        self._now = _checked(now)


def _checked(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"time must be finite, got {value!r}")
    return float(value)
