"""Calendar schedules across every IANA zone's DST changes of two years (issue 20, item 2).

The fire times a schedule must have are computed here independently of cronsim, from the
zone's offsets alone, and ``next_fire`` is compared with them at instants just before, inside
and after each change, and chained from fire to fire as the store does. Semantics checked:

- a fixed time of day (``"30 2 * * *"``, weekly ``"30 2 * * 0"``) fires once a matching day: at
  the first instant the wall clock reads it (the earlier one in a repeated hour), or at the
  change itself when the clock skips it;
- a wildcard minute or hour (``"0 * * * *"``) follows the real clock: it fires at every
  instant the wall clock reads a matching minute, so twice in a repeated hour (two real hours)
  and not inside a skipped one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

from hypothesis import given, settings
from hypothesis import strategies as st

from digest_stream.store.calendar import next_fire

#: The two years scanned, from a fixed date (the result must not depend on today's date).
SCAN_FROM = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
SCAN_DAYS = 2 * 366
#: Offsets are compared once a week: IANA changes in these years are weeks apart.
SCAN_STEP = 7 * 86400
#: Every offset in use is a whole number of quarter hours (Nepal, Chatham, Lord Howe...).
QUARTER = 900
HOUR = 3600
DAY = 86400


@dataclass(frozen=True)
class Change:
    """One offset change of a zone: the instant, and the offsets before and after."""

    zone: str
    at: float
    before: int
    after: int

    @property
    def span(self) -> int:
        """The length of the skipped or repeated stretch of wall time (seconds)."""
        return abs(self.after - self.before)

    def affected(self) -> tuple[datetime, datetime]:
        """The first wall time the change skips or repeats, and one in the middle of them."""
        first = wall(self.at + min(self.before, self.after))
        return first, first + timedelta(minutes=self.span // 120)


def wall(instant_with_offset: float) -> datetime:
    """A naive wall time from an instant already shifted by the zone's offset."""
    return datetime(1970, 1, 1) + timedelta(seconds=instant_with_offset)


def offset(zone: ZoneInfo, at: float) -> int:
    """The zone's UTC offset (seconds) at an instant."""
    found = datetime.fromtimestamp(at, zone).utcoffset()
    assert found is not None
    return int(found.total_seconds())


def changes_of(name: str) -> list[Change]:
    """The zone's offset changes in the scanned years, each found to the second."""
    zone = ZoneInfo(name)
    found: list[Change] = []
    last = offset(zone, SCAN_FROM)
    end = SCAN_FROM + SCAN_DAYS * DAY
    at = SCAN_FROM
    while at < end:
        step = at + SCAN_STEP
        now = offset(zone, step)
        if now != last:
            low, high = at, step  # offset(low) == last != offset(high)
            while high - low > 1:
                middle = (low + high) // 2
                if offset(zone, middle) == last:
                    low = middle
                else:
                    high = middle
            found.append(Change(name, high, last, now))
            last = now
        at = step
    return found


@cache
def all_changes() -> list[Change]:
    """Every zone's changes, one zone per group of zones whose offsets change identically
    (they have the same clock, so the same fire times)."""
    groups: dict[tuple[int, tuple[tuple[float, int], ...]], list[Change]] = {}
    for name in sorted(available_timezones()):
        changes = changes_of(name)
        if changes:
            key = (changes[0].before, tuple((c.at, c.after) for c in changes))
            groups.setdefault(key, changes)
    return [change for changes in groups.values() for change in changes]


# ------------------------------------------------------------------ the fires a schedule must have


def fixed_fire(zone: ZoneInfo, day: date, at: time, changes: list[Change]) -> float:
    """When a fixed time of day fires on ``day``: its first occurrence, or the change that
    skips it."""
    naive = datetime.combine(day, at)
    real = [
        instant
        for fold in (0, 1)
        if datetime.fromtimestamp(
            instant := naive.replace(tzinfo=zone, fold=fold).timestamp(), zone
        ).replace(tzinfo=None)
        == naive
    ]
    if real:
        return min(real)
    # Skipped: fold=1 reads it with the offset after the change (an instant before it), fold=0
    # with the offset before (an instant after it); the clock jumps past it in between.
    early = naive.replace(tzinfo=zone, fold=1).timestamp()
    late = naive.replace(tzinfo=zone, fold=0).timestamp()
    return next(c.at for c in changes if early < c.at <= late)


@dataclass(frozen=True)
class Fixed:
    """A schedule at a fixed time of day, daily or on one weekday (cron's 0 = Sunday)."""

    at: time
    weekday: int | None = None

    @property
    def expression(self) -> str:
        """The cron expression."""
        days = "*" if self.weekday is None else str(self.weekday)
        return f"{self.at.minute} {self.at.hour} * * {days}"

    def fires(self, zone: ZoneInfo, start: float, end: float, changes: list[Change]) -> list[float]:
        """Its fires in [start, end]."""
        first = datetime.fromtimestamp(start, zone).date() - timedelta(days=1)
        days = (first + timedelta(days=n) for n in range(int((end - start) // DAY) + 3))
        return sorted(
            fire
            for day in days
            if self.weekday is None or (day.weekday() + 1) % 7 == self.weekday
            if start <= (fire := fixed_fire(zone, day, self.at, changes)) <= end
        )


@dataclass(frozen=True)
class EveryMinuteOf:
    """A schedule with a wildcard hour: at the given minutes of every hour (quarter hours)."""

    minutes: tuple[int, ...]

    @property
    def expression(self) -> str:
        """The cron expression."""
        return f"{','.join(map(str, self.minutes))} * * * *"

    def fires(self, zone: ZoneInfo, start: float, end: float, changes: list[Change]) -> list[float]:
        """Its fires in [start, end]: each instant the wall clock reads one of the minutes."""
        first = (start + QUARTER - 1) // QUARTER * QUARTER
        grid = (first + n * QUARTER for n in range(int((end - first) // QUARTER) + 1))
        return [at for at in grid if datetime.fromtimestamp(at, zone).minute in self.minutes]


Schedule = Fixed | EveryMinuteOf


def schedules(change: Change) -> Iterator[tuple[Schedule, int, list[float]]]:
    """The schedules tried around a change: how far around it to chain their fires (seconds),
    and the instants to ask their next fire at."""
    first, middle = change.affected()
    weekday = (first.date().weekday() + 1) % 7
    span, at = change.span, change.at
    # Both passes of a repeated stretch (or both sides of a skipped one), their edges and middles.
    asked = [at + step for step in (-span, -span // 2, -1, 0, 1, span // 2, span - 1, span)]
    yield EveryMinuteOf((0,)), 4 * HOUR, asked
    for wall_time in sorted({first.time(), middle.time()}):  # the skipped or repeated times
        yield Fixed(wall_time), 2 * DAY, asked
        yield Fixed(wall_time, weekday), 8 * DAY, asked
    for common in (time(2, 30), time(1, 0), time(1, 30)):  # common ones, whatever the zone
        if common not in (first.time(), middle.time()):
            yield Fixed(common), 2 * DAY, [at, at + span // 2]


def wrong_fires(change: Change, schedule: Schedule, around: int, asked: list[float]) -> list[str]:
    """How ``next_fire`` departs from the fires the schedule must have around the change."""
    zone = ZoneInfo(change.zone)
    changes = [c for c in all_changes() if c.zone == change.zone]
    start, end = change.at - around, change.at + around
    expected = schedule.fires(zone, start, end + around, changes)  # a period past the end
    expression, name = schedule.expression, change.zone
    wrong: list[str] = []

    def show(at: float) -> str:
        return datetime.fromtimestamp(at, zone).isoformat()

    for at in asked:
        got = next_fire(expression, name, at)
        want = min(fire for fire in expected if fire > at)
        if got != want:
            wrong.append(f"{name} {expression!r} after {show(at)}: {show(got)}, not {show(want)}")
    # Chained as the store does: each delivery asks for the fire after the one it served.
    chained: list[float] = []
    at = start
    while at <= end and len(chained) <= len(expected):
        fire = next_fire(expression, name, at)
        if fire <= at:
            wrong.append(f"{name} {expression!r} after {show(at)}: {show(fire)} is not later")
            break
        chained.append(fire)
        at = fire
    within = [fire for fire in expected if start < fire <= at]
    if chained != within:
        wrong.append(
            f"{name} {expression!r} chained: {[show(f) for f in chained]}, "
            f"not {[show(f) for f in within]}"
        )
    return wrong


def test_every_zones_changes_are_found() -> None:
    changes = all_changes()
    zones = {c.zone for c in changes}
    # Clocks going both ways, and the odd shifts (30 min at Lord Howe, 2 h at Troll) among them.
    assert any(c.after > c.before for c in changes)
    assert any(c.after < c.before for c in changes)
    assert {c.span for c in changes} >= {1800, HOUR, 2 * HOUR}
    assert len(zones) >= 20
    assert len(changes) >= 4 * len(zones)


def test_next_fire_neither_skips_nor_doubles_nor_goes_back_across_any_dst_change() -> None:
    wrong = [
        line
        for change in all_changes()
        for schedule, around, asked in schedules(change)
        for line in wrong_fires(change, schedule, around, asked)
    ]
    assert not wrong, f"{len(wrong)} wrong fire times, e.g.:\n" + "\n".join(wrong[:20])


def test_a_daily_fire_asked_in_the_second_pass_of_the_repeated_hour_is_the_next_days() -> None:
    # The reported case: Berlin's second 02:10 on 2026-10-25 is 01:10 UTC; 02:30 already fired
    # (at its first occurrence, 00:30 UTC), so the next fire is the next day's 02:30.
    asked = datetime(2026, 10, 25, 1, 10, tzinfo=UTC).timestamp()
    assert next_fire("30 2 * * *", "Europe/Berlin", asked) == (
        datetime(2026, 10, 26, 1, 30, tzinfo=UTC).timestamp()
    )


def test_an_hourly_schedule_fires_in_both_passes_of_the_repeated_hour() -> None:
    # Two real hours read 02:xx in Berlin on 2026-10-25: an hourly digest goes out in each.
    at = datetime(2026, 10, 24, 23, 30, tzinfo=UTC).timestamp()
    fires = []
    for _ in range(4):
        at = next_fire("0 * * * *", "Europe/Berlin", at)
        fires.append(datetime.fromtimestamp(at, UTC).hour)
    assert fires == [0, 1, 2, 3]  # 02:00 (+2), 02:00 (+1), 03:00, 04:00 Berlin


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_next_fire_is_later_than_any_instant_near_a_change(data: st.DataObject) -> None:
    change = data.draw(st.sampled_from(all_changes()))
    expression = data.draw(
        st.sampled_from(["30 2 * * *", "0 1 * * *", "*/15 * * * *", "0 */2 * * *", "5 0 * * 1"])
    )
    at = change.at + data.draw(st.floats(-2 * DAY, 2 * DAY, allow_nan=False))
    assert next_fire(expression, change.zone, at) > at
