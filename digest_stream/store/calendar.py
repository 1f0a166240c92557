"""Calendar schedules: the next fire time of a 5-field cron expression in an IANA timezone.

Cron expressions are parsed and evaluated by cronsim (a small, typed, maintained library that
follows Debian cron, DST transitions included): a time skipped by a spring-forward change fires
once right after it, a time repeated by a fall-back change fires once, so a daily or weekly
digest is neither skipped nor doubled. Times cross this module as float seconds since the
epoch; the store receives the next fire time as a number and never parses cron itself.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from digest_stream.store.errors import InvalidArgument

#: Fires sampled (at most) when measuring a schedule's longest gap between two deliveries.
GAP_SAMPLE_FIRES = 1_000
#: ... and how far ahead (seconds, a bit over a year, so a yearly schedule shows its gap).
GAP_SAMPLE_HORIZON = 400 * 24 * 3600.0


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The IANA timezone called ``name``; InvalidArgument when there is none."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidArgument(f"timezone {name!r} is not a known IANA time zone name") from exc


def check(expression: str, timezone: str) -> None:
    """Refuse what is not a 5-field cron expression that fires, or an unknown timezone."""
    zone(timezone)
    if len(expression.split()) != 5:
        raise InvalidArgument(
            f"schedule {expression!r} must be a 5-field cron expression "
            "(minute hour day-of-month month day-of-week)"
        )
    try:
        next_fire(expression, timezone, 0.0)
    except (CronSimError, StopIteration) as exc:
        raise InvalidArgument(f"schedule {expression!r} is not a valid cron expression") from exc


def next_fire(expression: str, timezone: str, after: float) -> float:
    """The first fire time strictly after ``after`` (seconds since the epoch)."""
    start = datetime.fromtimestamp(after, zone(timezone))  # fold=1 in a second pass
    fires = CronSim(expression, start)
    fire = next(fires).timestamp()
    # cronsim walks a fixed time of day on the wall clock, fold dropped, and answers a time
    # in a repeated hour with its first pass: asked in the second pass, that one has passed
    # (it fired then), so the fires up to ``after`` are stepped over, never returned.
    while fire <= after:
        fire = next(fires).timestamp()
    return fire


def longest_gap(expression: str, timezone: str, start: float) -> float:
    """The longest time between two consecutive fires over the next year (seconds)."""
    previous = next_fire(expression, timezone, start)
    gap = 0.0
    for _ in range(GAP_SAMPLE_FIRES):
        fire = next_fire(expression, timezone, previous)
        gap = max(gap, fire - previous)
        if fire - start > GAP_SAMPLE_HORIZON:
            break
        previous = fire
    return gap
