"""Timeline policies: the delays, capacity and digest rules of one timeline, and which
policy a timeline gets (the default, or the longest matching per-prefix override).

``TimelinePolicy`` is the ONE declaration of the policy: each field is an option declared
with ``option()`` (its kind, default, doc line and what an unset value means). From it come
the global settings (``settings.py``: ``DIGEST_STREAM_<NAME>``), the per-prefix overrides
(``PolicyOverride``), the checks (``TimelinePolicy`` itself; ``validate.policy``), the
one-line description (``describe``) and the form the store receives (``PACKED``: the options
the store reads, in their packed order; ``store/redis/policy_wire.py`` packs them and the
Lua's ``parse_policy`` reads them by the same list).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from digest_stream.store import calendar
from digest_stream.store.errors import InvalidArgument
from digest_stream.store.limits import MAX_OFFSET, MAX_TTL

#: Seconds a timeline's keys live without being written or maintained (seven days). It is
#: leak protection only: maintenance and open refresh it while the service runs, so records
#: never expire while the service is merely down or behind for less than this.
DEFAULT_TTL = 7 * 24 * 3600.0

#: Records a timeline holds by default (the oldest are dropped past it, and counted): it
#: bounds the work of one open, trim or digest, and the memory of one runaway timeline.
#: ``capacity=None`` lifts the bound (opening then costs O(n log n) in Redis's C code).
DEFAULT_CAPACITY = 10_000

#: The longest maximum_delay a policy with quiet hours may have (seven days): the store gets
#: the quiet windows a due time it sets can fall in, up to maximum_delay ahead (policy_wire).
QUIET_HORIZON = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Kind:
    """How the values of one kind of option are typed, bounded, shown and packed.

    ``bounds`` are pydantic ``Field`` constraints (settings and overrides) and the checks
    ``TimelinePolicy`` makes; ``packed`` names the Lua guard that reads the packed value
    (``POLICY_READERS`` in ``guards.lua``), None when the store never reads the option.
    """

    type: type
    bounds: Mapping[str, Any]
    packed: str | None
    unit: str = ""

    def check(self, name: str, value: object) -> None:
        """Refuse a value of the wrong type or out of bounds (NaN, inf and bool included)."""
        accepted = (int, float) if self.type is float else self.type
        if (isinstance(value, bool) and self.type is not bool) or not isinstance(value, accepted):
            raise InvalidArgument(f"{name} must be of type {self.type.__name__}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidArgument(f"{name} must be finite, got {value!r}")
        size = len(value) if isinstance(value, str) else value
        for bound, limit in self.bounds.items():
            holds, words = _BOUNDS[bound]
            if not holds(size, limit):
                raise InvalidArgument(f"{name} must be {words} {limit}, got {value!r}")

    def show(self, value: object) -> str:
        """A set value as describe() writes it."""
        if isinstance(value, bool):
            return "yes" if value else "no"
        return f"{value:g}{self.unit}" if isinstance(value, float) else f"{value}{self.unit}"


#: pydantic's constraint names, as checks and as words in an error message.
_BOUNDS: dict[str, tuple[Callable[[Any, float], bool], str]] = {
    "ge": (lambda value, limit: value >= limit, ">="),
    "gt": (lambda value, limit: value > limit, ">"),
    "le": (lambda value, limit: value <= limit, "at most"),
    "min_length": (lambda value, limit: value >= limit, "a text of length >="),
}

#: A duration in seconds (packed as the shortest text of its double).
SECONDS = Kind(float, {"ge": 0}, packed="time", unit="s")
#: The keys' TTL: leak protection, bounded by what Redis's PEXPIRE takes.
TTL = Kind(float, {"gt": 0, "le": MAX_TTL}, packed="ttl", unit="s")
#: A number of records (unset is packed as 0).
COUNT = Kind(int, {"ge": 1, "le": MAX_OFFSET}, packed="count")
ATTRIBUTE = Kind(str, {"min_length": 1}, packed=None)  # read by the delivery role only
ZONE = Kind(str, {}, packed=None)  # an IANA time zone name (checked by calendar.zone)
#: A 5-field cron expression: packed as its next fire time, which the caller computes (the
#: Lua has no cron), "" when unset.
CRON = Kind(str, {}, packed="fire")
FLAG = Kind(bool, {}, packed="flag")  # yes or no, packed as "1" or "0"
#: A daily window of wall time, "HH:MM-HH:MM" (checked by calendar.quiet_bounds): packed as
#: its windows in real time ahead, which the caller computes (the Lua has no time zones).
QUIET = Kind(str, {}, packed="quiet")
#: An attribute and the values that make an event urgent (``urgent_rule``): the ingest reads
#: it; the store learns which records are urgent, per record.
URGENT_WHEN = Kind(str, {}, packed=None)


@dataclass(frozen=True, slots=True)
class UrgentRule:
    """``urgent_when`` parsed: an event whose attribute ``attribute`` is one of ``values``
    is urgent."""

    attribute: str
    values: frozenset[str]
    #: ``attribute`` in UTF-8, as the ingest looks for it in an event's bytes.
    key: bytes = b""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self.attribute.encode("utf-8"))

    def __str__(self) -> str:
        return f"{self.attribute}={','.join(sorted(self.values))}"


def urgent_rule(text: str) -> UrgentRule:
    """``urgent_when``'s text, ``ATTRIBUTE=VALUE[,VALUE...]`` (``"severity=critical,fatal"``;
    blanks around names are ignored), as a rule; refuses any other shape, saying why."""
    attribute, equals, listed = text.partition("=")
    attribute = attribute.strip()
    values = [value.strip() for value in listed.split(",")]
    problem = (
        "it has no '='" if not equals
        else "the attribute name is empty" if not attribute
        else "a value cannot hold '='" if "=" in listed
        else "a value is empty" if not all(values)
        else None
    )  # fmt: skip
    if problem is not None:
        raise InvalidArgument(
            f"urgent_when must be ATTRIBUTE=VALUE[,VALUE...] (e.g. 'severity=critical,fatal'): "
            f"{problem}, got {text!r}"
        )
    return UrgentRule(attribute, frozenset(values))


@dataclass(frozen=True, slots=True)
class Option:
    """One policy option as declared: its kind, default, doc line and what unset means."""

    name: str
    kind: Kind
    default: object
    doc: str
    #: None allowed; ``unset`` says what it means ("off", "unlimited")
    optional: bool
    unset: str

    @property
    def type(self) -> Any:
        """The Python type of the option's values (``| None`` when it may be unset)."""
        return self.kind.type | None if self.optional else self.kind.type

    def check(self, value: object) -> None:
        """Refuse a value this option cannot take (None only when optional)."""
        if value is None:
            if not self.optional:
                raise InvalidArgument(f"{self.name} must be set")
            return
        self.kind.check(self.name, value)


def option(default: Any, kind: Kind, doc: str, *, unset: str | None = None) -> Any:
    """A TimelinePolicy field declaring one option; ``unset``: what None means (then allowed)."""
    spec = {"kind": kind, "doc": doc, "unset": unset}
    return dataclasses.field(default=default, metadata=spec)


@dataclass(frozen=True, slots=True)
class TimelinePolicy:
    """Delays (seconds), capacity and digest policy that govern one timeline.

    Each field is one option (see ``OPTIONS``); the checks below are the rules across
    options. ``schedule`` replaces the cool-down (and the leading edge) with the calendar's
    fire times; ``collapse_by`` is read by the delivery role only.
    """

    minimum_delay: float = option(300.0, SECONDS, "Cool-down after a digest (<= maximum_delay).")
    increment_delay: float = option(30.0, SECONDS, "Delay added by each new event.")
    maximum_delay: float = option(1800.0, SECONDS, "Cap on delay after a delivery.")
    ttl: float = option(
        DEFAULT_TTL,
        TTL,
        "TTL of Redis keys, leak protection only (> maximum_delay + maintenance_timeout + "
        "maintenance_interval, <= 10 years).",
    )
    capacity: int | None = option(
        DEFAULT_CAPACITY,
        COUNT,
        "Max records per timeline (oldest dropped, counted).",
        unset="unlimited",
    )
    flush_at: int | None = option(
        None,
        COUNT,
        "A timeline holding this many pending records is due at once (never sooner than 1 s "
        "after its last digest); unset = off.",
        unset="off",
    )
    schedule: str | None = option(
        None,
        CRON,
        "5-field cron: deliver at its fire times in `timezone` instead of after a cool-down "
        '(no leading edge), e.g. `"0 9 * * *"`; unset = off.',
        unset="off",
    )
    timezone: str = option(
        "UTC", ZONE, "IANA timezone of `schedule` and `quiet_hours` (e.g. Europe/Berlin)."
    )
    quiet_hours: str | None = option(
        None,
        QUIET,
        'Daily window in `timezone`, e.g. `"22:00-07:00"` (may cross midnight): a digest due '
        "inside it, the first event's included, waits until it ends; unset = off.",
        unset="off",
    )
    collapse_by: str | None = option(
        None,
        ATTRIBUTE,
        "Attribute name: a digest's records with the same value become one (the newest, with "
        "count and first_seen); unset = off.",
        unset="off",
    )
    urgent_when: str | None = option(
        None,
        URGENT_WHEN,
        "`ATTRIBUTE=VALUE[,VALUE...]`: an event whose attribute has one of these values goes "
        "out at once with what is pending (reason URGENT), through the cool-down, never "
        'sooner than 1 s after the last digest, e.g. `"severity=critical,fatal"`; unset = off.',
        unset="off",
    )
    urgent_passes_snooze: bool = option(
        False,
        FLAG,
        "An urgent event (`urgent_when`) that arrives while its timeline is snoozed goes out "
        "at once too, with what is pending; the snooze holds the rest until its end.",
    )

    def __post_init__(self) -> None:
        for spec in OPTIONS:
            spec.check(getattr(self, spec.name))
        if self.ttl <= self.maximum_delay:
            raise InvalidArgument(
                f"ttl ({self.ttl}) must exceed maximum_delay ({self.maximum_delay})"
            )
        if self.minimum_delay > self.maximum_delay:
            # maximum_delay caps the delay after a delivery: no cool-down may outlast it.
            raise InvalidArgument(
                f"minimum_delay ({self.minimum_delay}) must not exceed maximum_delay "
                f"({self.maximum_delay})"
            )
        capacity = MAX_OFFSET if self.capacity is None else self.capacity
        if self.flush_at is not None and self.flush_at > capacity:
            raise InvalidArgument(
                f"flush_at ({self.flush_at}) must not exceed capacity ({self.capacity}): "
                "a timeline could never hold that many records"
            )
        calendar.zone(self.timezone)
        if self.schedule is not None:
            calendar.check(self.schedule, self.timezone)
        if self.quiet_hours is not None:
            calendar.quiet_bounds(self.quiet_hours)
            if self.maximum_delay > QUIET_HORIZON:
                raise InvalidArgument(
                    f"maximum_delay ({self.maximum_delay}) must be at most {QUIET_HORIZON:g} "
                    f"(7 days) with quiet_hours ({self.quiet_hours!r})"
                )
        if self.urgent_when is not None:
            urgent_rule(self.urgent_when)

    @property
    def urgent(self) -> UrgentRule | None:
        """``urgent_when`` as a rule; None when unset (the ingest asks only then)."""
        return None if self.urgent_when is None else _urgent_rule(self.urgent_when)

    def next_fire(self, now: float) -> float | None:
        """The schedule's first fire time after ``now`` (held to the end of the quiet hours it
        falls in); None without a schedule."""
        if self.schedule is None:
            return None
        return self.quiet_until(calendar.next_fire(self.schedule, self.timezone, now), now)

    def held_until(self, due: float) -> bool:
        """Whether ``due`` is where the quiet hours held a due time: the end of a window."""
        if self.quiet_hours is None:
            return False
        return calendar.quiet_ends_at(self.quiet_hours, self.timezone, due)

    def quiet_until(self, due: float, now: float) -> float:
        """When a timeline due at ``due`` (seen at ``now``) may go out: the end of the quiet
        hours that hold it, else ``due``."""
        if self.quiet_hours is None:
            return due
        return calendar.quiet_until(self.quiet_hours, self.timezone, due, now)


#: One rule per text: policies share their texts, and the ingest asks per urgent record.
_urgent_rule = lru_cache(maxsize=256)(urgent_rule)


def _options() -> tuple[Option, ...]:
    found = []
    for field in dataclasses.fields(TimelinePolicy):
        meta, unset = field.metadata, field.metadata["unset"]
        found.append(
            Option(
                field.name, meta["kind"], field.default, meta["doc"], unset is not None, unset or ""
            )
        )
    return tuple(found)


#: The policy's options, in declaration order.
OPTIONS = _options()
#: The options the store reads, in the order of their packed form (the Lua's POLICY_FIELDS).
PACKED = tuple(spec for spec in OPTIONS if spec.kind.packed is not None)


def describe(policy: TimelinePolicy) -> str:
    """The policy on one line: each option and its value (or what its being unset means)."""
    return ", ".join(
        f"{spec.name} {spec.unset if value is None else spec.kind.show(value)}"
        for spec in OPTIONS
        for value in (getattr(policy, spec.name),)
    )


def declare_fields(namespace: MutableMapping[str, Any], *, overrides: bool = False) -> None:
    """Declare one pydantic field per option in a model's class body (``locals()``): the
    option's default and bounds, or (``overrides``) None by default, which keeps the default's.

    Called from the body of ``Settings`` and ``PolicyOverride``, so each option is declared
    there in its place (the README's table keeps its order) without being written again.
    """
    annotations = namespace.setdefault("__annotations__", {})
    for spec in OPTIONS:
        if overrides:
            annotations[spec.name] = spec.kind.type | None
            namespace[spec.name] = Field(None, **spec.kind.bounds)
        else:
            annotations[spec.name] = spec.type
            namespace[spec.name] = Field(spec.default, description=spec.doc, **spec.kind.bounds)


#: Maps a timeline name to its policy; per-prefix overrides plug in here.
PolicyResolver = Callable[[str], TimelinePolicy]


class PolicyOverride(BaseModel):
    """Per-timeline-prefix changes to the default policy; unset fields keep the default."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    declare_fields(locals(), overrides=True)

    def __init__(self, **options: object) -> None:
        """An override of the options given by name (fields declared above, unseen by mypy)."""
        super().__init__(**options)


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
    table = sorted(  # longest prefix first: "mail:p:*" beats "mail:*" in any order given
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
