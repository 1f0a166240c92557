"""Calendar schedules: the next fire time of a 5-field cron expression in an IANA timezone.

Cron expressions are parsed and evaluated by cronsim (a small, typed, maintained library that
follows Debian cron, DST transitions included): a time skipped by a spring-forward change fires
once right after it, a time repeated by a fall-back change fires once, so a daily or weekly
digest is neither skipped nor doubled. Times cross this module as float seconds since the
epoch; the store receives the next fire time as a number and never parses cron itself.
"""

from __future__ import annotations

import math
from datetime import date, datetime, time, timedelta
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


# Quiet hours --------------------------------------------------------------------------------
#
# A daily window of wall time ("22:00-07:00", crossing midnight when its end is not after its
# start) in the timeline's zone, turned into real [start, end) windows here, so the store gets
# numbers, as it gets a schedule's fire. Each bound is resolved as a fixed time of day fires
# (next_fire): at the first instant the wall clock reads it (the first pass of a repeated
# hour), or, when the clock skips it, at the change that skips it. So each local day has at
# most one window and one end (none doubled), and a window whose bounds both fall in one
# skipped stretch is empty that day. A window never starts before the previous one ends plus
# QUIET_MIN_OPEN: the end of every window is a time outside all of them (a day whose open
# hours a spring-forward change skipped entirely keeps that second), so a digest held to a
# window's end goes out then and never waits another day.

#: The open time kept after a window whose next window would start at or before its end.
QUIET_MIN_OPEN = 1.0
_DAY = timedelta(days=1)


def quiet_bounds(spec: str) -> tuple[time, time]:
    """The wall times a ``"HH:MM-HH:MM"`` quiet-hours text names; InvalidArgument otherwise."""
    parts = spec.split("-")
    try:
        if len(parts) != 2 or not all(len(p) == 5 and p[2] == ":" for p in parts):
            raise ValueError(spec)
        start, end = (time(int(p[:2]), int(p[3:])) for p in parts)
    except ValueError as exc:
        raise InvalidArgument(
            f"quiet_hours {spec!r} must be a daily window HH:MM-HH:MM (e.g. '22:00-07:00')"
        ) from exc
    if start == end:
        raise InvalidArgument(f"quiet_hours {spec!r} must not start and end at the same time")
    return start, end


@lru_cache(maxsize=4096)
def local_instant(zone_info: ZoneInfo, day: date, at: time) -> float:
    """When the wall clock of ``zone_info`` first reads ``at`` on ``day``: its first pass in a
    repeated stretch, the change itself when the clock skips it."""
    naive = datetime.combine(day, at)
    first = naive.replace(tzinfo=zone_info).timestamp()  # fold=0: the first pass
    if datetime.fromtimestamp(first, zone_info).replace(tzinfo=None) == naive:
        return first
    # Skipped: fold=1 reads it with the offset after the change (an instant before it), fold=0
    # with the one before (after it); the change is the first second whose wall time is later.
    low, high = int(naive.replace(tzinfo=zone_info, fold=1).timestamp()), int(first)
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone_info).replace(tzinfo=None) >= naive:
            high = middle
        else:
            low = middle
    return float(high)


def quiet_windows(spec: str, timezone: str, start: float, end: float) -> list[tuple[float, float]]:
    """The quiet windows [from, to) that end after ``start`` and begin by ``end``, in order."""
    begins, ends = quiet_bounds(spec)
    zone_info = zone(timezone)
    crosses = ends <= begins  # "22:00-07:00": it ends the next day
    day = datetime.fromtimestamp(start, zone_info).date() - 2 * _DAY
    last = datetime.fromtimestamp(end, zone_info).date() + _DAY
    windows: list[tuple[float, float]] = []
    previous_end = -math.inf
    while day <= last:
        opens = max(local_instant(zone_info, day, begins), previous_end + QUIET_MIN_OPEN)
        closes = local_instant(zone_info, day + _DAY if crosses else day, ends)
        day += _DAY
        if closes <= opens:
            continue  # both bounds in one skipped stretch: no quiet hours that day
        previous_end = closes
        if closes > start and opens <= end:
            windows.append((opens, closes))
    return windows


def longest_quiet(spec: str, timezone: str, start: float) -> float:
    """The longest quiet window over the next year (seconds): what it can add to a wait."""
    windows = quiet_windows(spec, timezone, start, start + GAP_SAMPLE_HORIZON)
    return max(closes - opens for opens, closes in windows)


def quiet_ends_at(spec: str, timezone: str, at: float) -> bool:
    """Whether a quiet window ends at ``at`` (a due time quiet hours held there)."""
    return any(closes == at for _, closes in quiet_windows(spec, timezone, at - 1, at))


def quiet_until(spec: str, timezone: str, due: float, now: float) -> float:
    """When a timeline due at ``due`` (as seen at ``now``: a due time past is due now) can go
    out: the end of the quiet window it falls in, else ``due`` itself."""
    at = max(due, now)
    for opens, closes in quiet_windows(spec, timezone, at, at):
        if opens <= at < closes:
            return closes
    return due
