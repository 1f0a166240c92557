"""The timeline policy as the Lua library receives it: one packed form for every command.

A policy is packed as ``POLICY_WIDTH`` text arguments, one per option of ``policy.PACKED`` in
that order (the library's ``POLICY_FIELDS`` constant is written from the same list, and
``parse_policy`` in ``guards.lua`` reads it). A call on several timelines sends each distinct
policy once, counted, and points at it by its index from 1 (``PolicyTable``): ``ds_add``,
``ds_open_many`` and ``ds_close_many`` alike.
"""

from __future__ import annotations

from collections.abc import Callable

from digest_stream.store import calendar, validate
from digest_stream.store.policy import PACKED, TimelinePolicy
from digest_stream.store.redis.replies import arg


def _seconds(value: object, _policy: TimelinePolicy, _now: float) -> str:
    assert isinstance(value, (int, float))  # a TimelinePolicy checked it
    return arg(value)


def _fire(value: object, policy: TimelinePolicy, now: float) -> str:
    # the calendar's next fire time: the Lua has no cron, the caller computes it
    fire = None if value is None else policy.next_fire(now)
    return "" if fire is None else arg(fire)


def _quiet(value: object, policy: TimelinePolicy, now: float) -> str:
    # the quiet windows [from, to) a due time this call sets can fall in: from the one now is
    # in (or the next) to the last that begins by now + maximum_delay (no rule of the store
    # sets a due time later; a schedule's fire is held in Python, _fire), and an hour past
    # it for a close whose caller's clock runs ahead; "" when unset (the Lua has no zones)
    if value is None:
        return ""
    assert isinstance(value, str)  # a TimelinePolicy checked it
    ahead = now + policy.maximum_delay + _QUIET_SKEW
    windows = calendar.quiet_windows(value, policy.timezone, now, ahead)
    return ",".join(arg(bound) for window in windows for bound in window)


#: How far past maximum_delay the packed quiet windows reach (seconds).
_QUIET_SKEW = 3600.0

#: How a value of each packed kind is written (Kind.packed), by the Lua guard that reads it.
_WRITERS: dict[str, Callable[[object, TimelinePolicy, float], str]] = {
    "time": _seconds,
    "ttl": _seconds,
    "count": lambda value, _policy, _now: str(value or 0),  # unset is 0
    "flag": lambda value, _policy, _now: "1" if value else "0",
    "fire": _fire,
    "quiet": _quiet,
}

#: The library's POLICY_FIELDS: each packed option's name and the guard that reads it.
POLICY_FIELDS = tuple((spec.name, spec.kind.packed) for spec in PACKED)
#: Arguments of one packed policy.
POLICY_WIDTH = len(POLICY_FIELDS)


def pack(policy: TimelinePolicy, now: float) -> tuple[str, ...]:
    """One policy's POLICY_WIDTH arguments, as at ``now`` (the schedule's next fire)."""
    return tuple(
        _WRITERS[spec.kind.packed or ""](getattr(policy, spec.name), policy, now) for spec in PACKED
    )


class PolicyTable:
    """The distinct policies of one call, each packed once, and each one's index from 1.

    Equal policies (even distinct objects) share one entry. ``args()`` is the call's
    policy arguments: the count, then each policy's POLICY_WIDTH fields.
    """

    def __init__(self, now: float) -> None:
        self._now = now
        self._by_object: dict[int, tuple[object, int]] = {}
        self._by_fields: dict[tuple[str, ...], int] = {}

    def index(self, policy: object, timeline: str) -> int:
        """The index of ``timeline``'s policy in this call's table (checked and added on first
        sight)."""
        # Most timelines of a call share one policy object: it is packed once per call. The
        # entry holds the object, so its id is not reused while the table lives.
        found = self._by_object.get(id(policy))
        if found is not None:
            return found[1]
        fields = pack(validate.policy(policy, timeline), self._now)
        number = self._by_fields.setdefault(fields, len(self._by_fields) + 1)
        self._by_object[id(policy)] = (policy, number)
        return number

    def args(self) -> list[str | bytes]:
        """The count of distinct policies, then each one's packed fields, in index order."""
        out: list[str | bytes] = [str(len(self._by_fields))]
        for fields in self._by_fields:  # insertion order is index order
            out += fields
        return out
