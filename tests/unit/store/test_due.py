"""The store's one rule for when a timeline is due again once its digest closes."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from digest_stream.store.due import next_due
from digest_stream.store.limits import FLUSH_AT_FLOOR
from digest_stream.store.policy import TimelinePolicy
from digest_stream.vocabulary import DigestReason


def test_next_delivery_is_the_cool_down_the_flush_floor_or_the_next_fire() -> None:
    now = 1_000.0
    assert next_due(TimelinePolicy(minimum_delay=300)).next_delivery_at(now) == 1_300_000
    floor = next_due(TimelinePolicy(minimum_delay=300, flush_at=5))
    assert floor.next_delivery_at(now) == 1_001_000
    berlin = ZoneInfo("Europe/Berlin")
    at = datetime(2026, 3, 2, 10, tzinfo=berlin).timestamp()
    daily = next_due(TimelinePolicy(schedule="0 9 * * *", timezone="Europe/Berlin"))
    assert daily.next_delivery_at(at) == int(
        datetime(2026, 3, 3, 9, tzinfo=berlin).timestamp() * 1000
    )


def test_the_due_time_counts_from_the_close_and_names_its_cause() -> None:
    rule = next_due(TimelinePolicy(minimum_delay=300))
    assert rule.after(50.0) == (350.0, "COOLDOWN")  # the cool-down starts at the close
    assert rule.after(50.0, DigestReason.FLUSHED) == (50.0 + FLUSH_AT_FLOOR, "FLUSHED")
    assert rule.after(50.0, DigestReason.FLUSH_AT) == (50.0 + FLUSH_AT_FLOOR, "FLUSH_AT")
    short = next_due(TimelinePolicy(minimum_delay=0.5))
    assert short.after(50.0, DigestReason.FLUSHED) == (50.5, "COOLDOWN")  # sooner anyway
    cron = next_due(TimelinePolicy(schedule="* * * * *"))
    assert cron.after(60.5) == (120.0, "SCHEDULE")


def test_one_rule_object_per_policy() -> None:
    assert next_due(TimelinePolicy()) is next_due(TimelinePolicy())


def test_the_precomputed_lead_is_the_rule_at_every_close_time() -> None:
    for policy in (
        TimelinePolicy(minimum_delay=300),
        TimelinePolicy(minimum_delay=0.25, flush_at=3),
        TimelinePolicy(minimum_delay=300, flush_at=3),
        TimelinePolicy(schedule="*/5 * * * *"),
        TimelinePolicy(minimum_delay=300, flush_at=3, quiet_hours="00:04-00:10"),
    ):
        rule = next_due(policy)
        soon = None if policy.flush_at is None else DigestReason.FLUSH_AT
        for closed_at in (0.1, 1_764_000_000.123, 1_764_000_123.999):
            expected = rule.due(closed_at, soon)
            assert rule.next_delivery_at(closed_at) == int(expected * 1000)


def test_quiet_hours_hold_the_due_time_to_their_end_but_a_flush_passes_them() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    at = datetime(2026, 3, 2, 21, 58, tzinfo=berlin).timestamp()
    ends = datetime(2026, 3, 3, 7, tzinfo=berlin).timestamp()
    quiet = TimelinePolicy(
        minimum_delay=300, flush_at=3, quiet_hours="22:00-07:00", timezone="Europe/Berlin"
    )
    rule = next_due(quiet)
    assert rule.after(at) == (ends, "COOLDOWN")  # 22:03 is inside: held to 07:00
    assert rule.next_delivery_at(at) == int((at + FLUSH_AT_FLOOR) * 1000)  # 21:58:01: outside
    inside = at + 600  # 22:08
    assert rule.after(inside, DigestReason.FLUSH_AT) == (ends, "COOLDOWN")  # held as well
    assert rule.after(inside, DigestReason.FLUSHED) == (inside + FLUSH_AT_FLOOR, "FLUSHED")
    assert rule.next_delivery_at(inside) == int(ends * 1000)
    daily = next_due(
        TimelinePolicy(schedule="0 23 * * *", timezone="Europe/Berlin", quiet_hours="22:00-07:00")
    )
    assert daily.after(at) == (ends, "SCHEDULE")  # the 23:00 fire waits for 07:00
