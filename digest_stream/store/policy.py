"""Timeline policies: the delays, capacity and digest rules of one timeline, and which
policy a timeline gets (the default, or the longest matching per-prefix override)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from digest_stream.store import calendar
from digest_stream.store.errors import InvalidArgument
from digest_stream.store.limits import MAX_TTL

#: Seconds a timeline's keys live without being written or maintained (seven days). It is
#: leak protection only: maintenance and open refresh it while the service runs, so records
#: never expire while the service is merely down or behind for less than this.
DEFAULT_TTL = 7 * 24 * 3600.0

#: Records a timeline holds by default (the oldest are dropped past it, and counted): it
#: bounds the work of one open, trim or digest, and the memory of one runaway timeline.
#: ``capacity=None`` lifts the bound (opening then costs O(n log n) in Redis's C code).
DEFAULT_CAPACITY = 10_000


@dataclass(frozen=True, slots=True)
class TimelinePolicy:
    """Delays (seconds), capacity and digest policy that govern one timeline.

    ``flush_at``: a WAITING timeline holding this many pending records becomes due at once
    (never sooner than FLUSH_AT_FLOOR after its last delivery). ``schedule`` (5-field cron, in
    ``timezone``): the timeline is due at the schedule's next fire time instead of after a
    cool-down, with no leading edge. ``collapse_by``: an attribute name; the delivery role
    collapses a digest's records sharing its value (the store does not look at it).
    """

    minimum_delay: float = 300.0
    increment_delay: float = 30.0
    maximum_delay: float = 1800.0
    ttl: float = DEFAULT_TTL
    capacity: int | None = DEFAULT_CAPACITY
    flush_at: int | None = None
    schedule: str | None = None
    timezone: str = "UTC"
    collapse_by: str | None = None

    def __post_init__(self) -> None:
        for name in ("minimum_delay", "increment_delay", "maximum_delay", "ttl"):
            if getattr(self, name) < 0:
                raise InvalidArgument(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.ttl > MAX_TTL:
            raise InvalidArgument(f"ttl must be at most {MAX_TTL} seconds, got {self.ttl!r}")
        if self.ttl <= self.maximum_delay:
            raise InvalidArgument(
                f"ttl ({self.ttl}) must exceed maximum_delay ({self.maximum_delay})"
            )
        if self.capacity is not None and self.capacity < 1:
            raise InvalidArgument(f"capacity must be >= 1 when set, got {self.capacity!r}")
        if self.flush_at is not None:
            if self.flush_at < 1:
                raise InvalidArgument(f"flush_at must be >= 1 when set, got {self.flush_at!r}")
            if self.capacity is not None and self.flush_at > self.capacity:
                raise InvalidArgument(
                    f"flush_at ({self.flush_at}) must not exceed capacity ({self.capacity}): "
                    "a timeline could never hold that many records"
                )
        if self.collapse_by is not None and not self.collapse_by:
            raise InvalidArgument("collapse_by must be an attribute name when set")
        calendar.zone(self.timezone)
        if self.schedule is not None:
            calendar.check(self.schedule, self.timezone)

    def next_fire(self, now: float) -> float | None:
        """The schedule's first fire time after ``now``; None without a schedule."""
        if self.schedule is None:
            return None
        return calendar.next_fire(self.schedule, self.timezone, now)


#: Maps a timeline name to its policy; per-prefix overrides plug in here.
PolicyResolver = Callable[[str], TimelinePolicy]


class PolicyOverride(BaseModel):
    """Per-timeline-prefix changes to the default policy; unset fields keep the default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    minimum_delay: float | None = Field(None, ge=0)
    increment_delay: float | None = Field(None, ge=0)
    maximum_delay: float | None = Field(None, ge=0)
    ttl: float | None = Field(None, gt=0, le=MAX_TTL)
    capacity: int | None = Field(None, ge=1)
    flush_at: int | None = Field(None, ge=1)
    schedule: str | None = None
    timezone: str | None = None
    collapse_by: str | None = Field(None, min_length=1)


def prefix_of(pattern: str) -> str:
    """The timeline prefix an override pattern (``"mail:p:*"``) names; refuses other shapes."""
    prefix = pattern.removesuffix("*")
    if not pattern.endswith("*") or not prefix or any(c in prefix for c in "*?["):
        raise InvalidArgument(
            f"{pattern!r} must be a timeline prefix ending in '*' (e.g. 'mail:p:*')"
        )
    return prefix


def overridden(default: TimelinePolicy, override: PolicyOverride) -> TimelinePolicy:
    """The default policy with an override's fields in place of its own."""
    return dataclasses.replace(default, **override.model_dump(exclude_none=True))


def prefix_resolver(
    default: TimelinePolicy, overrides: Mapping[str, PolicyOverride]
) -> PolicyResolver:
    """timeline -> policy: the longest matching override prefix, else the default."""
    if not overrides:
        return lambda _timeline: default
    # Longest prefix first, so "mail:p:*" beats "mail:*" whatever the order given.
    table = sorted(
        ((prefix_of(p), overridden(default, o)) for p, o in overrides.items()),
        key=lambda item: -len(item[0]),
    )

    # Called once per timeline per add batch; timelines repeat, so remember answers.
    @lru_cache(maxsize=65_536)
    def resolve(timeline: str) -> TimelinePolicy:
        for prefix, policy in table:
            if timeline.startswith(prefix):
                return policy
        return default

    return resolve
