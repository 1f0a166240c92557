"""Quiet hours (issue 39, item 2): the option's checks, its windows in real time, and the DST
property: across every zone's changes of two years, a window's bounds resolve as a fixed time
of day fires (the first pass of a repeated hour, the change itself in a skipped one), no day's
window end is skipped or doubled, and a digest held to a window's end goes out then.

The windows a zone must have are computed here from ``fixed_fire`` of the cron DST test (the
zone's offsets alone), not from the code under test.
"""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from digest_stream.store import InvalidArgument, TimelinePolicy
from digest_stream.store.calendar import QUIET_MIN_OPEN, quiet_until, quiet_windows
from digest_stream.store.policy import PACKED
from digest_stream.store.redis.policy_wire import pack
from digest_stream.store.redis.replies import arg
from tests.unit.store.test_calendar_dst import DAY, Change, all_changes, fixed_fire

BERLIN = ZoneInfo("Europe/Berlin")
NAMES = [spec.name for spec in PACKED]


def berlin(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=BERLIN).timestamp()


def show(at: float) -> str:
    return datetime.fromtimestamp(at, BERLIN).isoformat()


# ------------------------------------------------------------------ the option


@pytest.mark.parametrize(
    "text", ["22-07", "22:00", "22:00-7:00", "24:00-07:00", "22:60-07:00", "x", "07:00-07:00"]
)
def test_quiet_hours_refuse_what_is_not_a_daily_window(text: str) -> None:
    with pytest.raises(InvalidArgument, match="quiet_hours"):
        TimelinePolicy(quiet_hours=text)


def test_quiet_hours_bound_maximum_delay_and_need_a_known_zone() -> None:
    with pytest.raises(InvalidArgument, match=r"maximum_delay .* with quiet_hours"):
        TimelinePolicy(quiet_hours="22:00-07:00", maximum_delay=8 * DAY, ttl=30 * DAY)
    with pytest.raises(InvalidArgument, match="timezone"):
        TimelinePolicy(quiet_hours="22:00-07:00", timezone="Mars/Olympus")


def test_the_store_gets_the_windows_a_due_time_can_fall_in() -> None:
    policy = TimelinePolicy(quiet_hours="22:00-07:00", timezone="Europe/Berlin")
    packed = dict(zip(NAMES, pack(policy, berlin(2026, 3, 2, 21, 50)), strict=True))
    night = (berlin(2026, 3, 2, 22), berlin(2026, 3, 3, 7))
    assert packed["quiet_hours"] == ",".join(map(arg, night))
    unset = dict(zip(NAMES, pack(TimelinePolicy(), 0.0), strict=True))
    assert unset["quiet_hours"] == ""  # nothing to hold


# ------------------------------------------------------------------ around Berlin's changes


def test_a_window_crossing_midnight_holds_to_the_next_mornings_end() -> None:
    assert quiet_until("22:00-07:00", "Europe/Berlin", berlin(2026, 3, 2, 23), 0) == berlin(
        2026, 3, 3, 7
    )
    assert quiet_until("22:00-07:00", "Europe/Berlin", berlin(2026, 3, 2, 21), 0) == berlin(
        2026, 3, 2, 21
    )  # outside: unchanged
    # a due time already past, seen inside the window, is held as well
    assert quiet_until(
        "22:00-07:00", "Europe/Berlin", berlin(2026, 3, 2, 12), berlin(2026, 3, 3, 6)
    ) == berlin(2026, 3, 3, 7)


def test_an_end_in_the_skipped_hour_is_the_change_and_one_in_the_repeated_hour_its_first_pass() -> (
    None
):
    # 2026-03-29 02:00 -> 03:00: quiet "until 02:30" ends when the clock jumps (01:00 UTC)
    spring = quiet_until("22:00-02:30", "Europe/Berlin", berlin(2026, 3, 29, 1, 30), 0)
    assert spring == datetime(2026, 3, 29, 1, tzinfo=UTC).timestamp(), show(spring)
    # 2026-10-25 03:00 -> 02:00: it ends at the first 02:30 (00:30 UTC), held once, not twice
    fall = quiet_until("22:00-02:30", "Europe/Berlin", berlin(2026, 10, 25, 1), 0)
    assert fall == datetime(2026, 10, 25, 0, 30, tzinfo=UTC).timestamp(), show(fall)
    second_pass = datetime(2026, 10, 25, 1, 10, tzinfo=UTC).timestamp()  # the second 02:10
    assert quiet_until("22:00-02:30", "Europe/Berlin", second_pass, 0) == second_pass


def test_a_day_whose_open_hour_is_skipped_keeps_a_second_for_its_digests() -> None:
    # "03:00-02:00" leaves 02:00-03:00 open, which 2026-03-29 skips: that day's window ends
    # at the change and the next one starts a second later, so the held digest goes then.
    windows = quiet_windows(
        "03:00-02:00", "Europe/Berlin", berlin(2026, 3, 28, 12), berlin(2026, 3, 30, 12)
    )
    change = datetime(2026, 3, 29, 1, tzinfo=UTC).timestamp()
    assert (windows[0][1], windows[1][0]) == (change, change + QUIET_MIN_OPEN)
    assert quiet_until("03:00-02:00", "Europe/Berlin", change - 60, 0) == change


# ------------------------------------------------------------------ the property over all changes


def expected_windows(
    zone: ZoneInfo, begins: time, ends: time, first: date, days: int, changes: list[Change]
) -> list[tuple[float, float]]:
    """The windows of ``days`` local days from ``first``, from the zone's offsets alone."""
    found: list[tuple[float, float]] = []
    for n in range(days):
        day = first + timedelta(days=n)
        opens = fixed_fire(zone, day, begins, changes)
        closes = fixed_fire(zone, day + timedelta(days=1) if ends <= begins else day, ends, changes)
        if found and opens <= found[-1][1]:
            opens = found[-1][1] + QUIET_MIN_OPEN
        if closes > opens:
            found.append((opens, closes))
    return found


def _times(change: Change) -> list[time]:
    first, middle = change.affected()
    return sorted({first.time(), middle.time(), time(0, 0), time(2, 30), time(22, 0), time(7, 0)})


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_quiet_hours_across_every_dst_change_neither_skip_nor_double_a_days_end(
    data: st.DataObject,
) -> None:
    change = data.draw(st.sampled_from(all_changes()))
    begins = data.draw(st.sampled_from(_times(change)))
    ends = data.draw(st.sampled_from([t for t in _times(change) if t != begins]))
    spec = f"{begins:%H:%M}-{ends:%H:%M}"
    zone = ZoneInfo(change.zone)
    changes = [c for c in all_changes() if c.zone == change.zone]
    start, end = change.at - 2 * DAY, change.at + 2 * DAY
    got = quiet_windows(spec, change.zone, start, end)
    first = datetime.fromtimestamp(start, zone).date() - timedelta(days=2)
    every = expected_windows(zone, begins, ends, first, 8, changes)
    assert got == [w for w in every if w[1] > start and w[0] <= end], spec
    # In order and apart; one window a day, its bounds a day apart from the next one's (give
    # or take what the change moves a bound by): no end doubled, none skipped (but a day
    # whose whole window the change skips, which has nothing to hold).
    shift = 2 * change.span + QUIET_MIN_OPEN
    longest = DAY + shift if len(every) == 8 else 2 * DAY + shift
    for (opens, closes), (next_opens, next_closes) in itertools.pairwise(got):
        assert closes < next_opens, spec
        for gap in (next_opens - opens, next_closes - closes):
            assert DAY - shift <= gap <= longest, spec
    # A due time anywhere near the change: held to the end of the window it is in, which is
    # outside every window (it goes out then, never held again), and never later than a day
    # and a change's span away.
    due = change.at + data.draw(st.floats(-DAY, DAY, allow_nan=False))
    held = quiet_until(spec, change.zone, due, due)
    inside = [w for w in got if w[0] <= due < w[1]]
    assert held == (inside[0][1] if inside else due)
    assert quiet_until(spec, change.zone, held, held) == held
    assert held - due <= DAY + change.span
