"""Calendar schedules across DST changes: no delivery skipped, none doubled (issue 15)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from digest_stream.store import InvalidArgument, TimelinePolicy
from digest_stream.store.calendar import check, longest_gap, next_fire

BERLIN = ZoneInfo("Europe/Berlin")


def fires(expression: str, start: datetime, count: int) -> list[datetime]:
    """The next `count` fire times, each computed from the previous one as the store does
    (a delivery at a fire asks for the next fire after it)."""
    at, found = start.timestamp(), []
    for _ in range(count):
        at = next_fire(expression, "Europe/Berlin", at)
        found.append(datetime.fromtimestamp(at, BERLIN))
    return found


def test_a_daily_time_inside_the_skipped_hour_fires_once_right_after_spring_forward() -> None:
    # 2026-03-29: 02:00 -> 03:00 in Berlin; 02:30 does not exist that day.
    days = fires("30 2 * * *", datetime(2026, 3, 27, 12, tzinfo=BERLIN), 4)
    assert [(d.day, d.hour, d.minute) for d in days] == [
        (28, 2, 30), (29, 3, 0), (30, 2, 30), (31, 2, 30),
    ]  # fmt: skip


def test_a_daily_time_inside_the_repeated_hour_fires_once_at_fall_back() -> None:
    # 2026-10-25: 03:00 -> 02:00 in Berlin; 02:30 happens twice that day, fires once.
    days = fires("30 2 * * *", datetime(2026, 10, 23, 12, tzinfo=BERLIN), 4)
    assert [(d.day, d.hour, d.minute) for d in days] == [
        (24, 2, 30), (25, 2, 30), (26, 2, 30), (27, 2, 30),
    ]  # fmt: skip
    # Even asked from inside the second 02:30 hour, the next fire is the next day's.
    second = datetime(2026, 10, 25, 2, 30, 1, tzinfo=BERLIN).replace(fold=1)
    assert datetime.fromtimestamp(
        next_fire("30 2 * * *", "Europe/Berlin", second.timestamp()), BERLIN
    ) == datetime(2026, 10, 26, 2, 30, tzinfo=BERLIN)


def test_a_nine_oclock_digest_stays_at_nine_local_across_both_changes() -> None:
    spring = fires("0 9 * * *", datetime(2026, 3, 28, 10, tzinfo=BERLIN), 2)
    autumn = fires("0 9 * * *", datetime(2026, 10, 24, 10, tzinfo=BERLIN), 2)
    assert [d.hour for d in spring + autumn] == [9, 9, 9, 9]
    # The real gaps are 23 and 25 hours: the wall clock, not a fixed period.
    assert spring[0].timestamp() - datetime(2026, 3, 28, 9, tzinfo=BERLIN).timestamp() == 23 * 3600
    assert autumn[0].timestamp() - datetime(2026, 10, 24, 9, tzinfo=BERLIN).timestamp() == 25 * 3600


def test_next_fire_is_strictly_after_the_given_time() -> None:
    nine = datetime(2026, 3, 2, 9, tzinfo=BERLIN).timestamp()
    assert next_fire("0 9 * * *", "Europe/Berlin", nine) == nine + 24 * 3600
    assert next_fire("0 9 * * *", "Europe/Berlin", nine - 0.001) == nine


def test_longest_gap_sees_the_longer_week_of_fall_back() -> None:
    start = datetime(2026, 10, 1, tzinfo=BERLIN).timestamp()
    assert longest_gap("0 9 * * 1", "Europe/Berlin", start) == 7 * 24 * 3600 + 3600


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"schedule": "* * * *"}, "5-field cron expression"),
        ({"schedule": "0 0 30 2 *"}, "not a valid cron expression"),
        ({"schedule": "61 * * * *"}, "not a valid cron expression"),
        ({"timezone": "Mars/Olympus"}, "not a known IANA time zone name"),
        ({"flush_at": 0}, "flush_at must be >= 1"),
        ({"flush_at": 11, "capacity": 10}, "must not exceed capacity"),
        ({"collapse_by": ""}, "collapse_by must be a text of length >= 1"),
    ],
)
def test_policies_refuse_bad_fields(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        TimelinePolicy(**changes)  # type: ignore[arg-type]


def test_check_accepts_a_valid_schedule() -> None:
    check("*/15 8-18 * * MON-FRI", "America/New_York")
