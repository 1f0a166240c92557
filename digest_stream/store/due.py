"""When a timeline is due again once its digest closes: the store's rule, declared once.

The store attaches it to every digest it opens (``OpenDigest.next_due``): the publisher
copies ``next_delivery_at`` from it into the digest, and the close applies it (the model
here; the Redis close with the same inputs: the policy's packed form, whose calendar fire
Python computes at the close time, ``store/redis/policy_wire.py``). The
due time depends on the close time, which is the digest's build time and is only known
after the open, so the open returns the rule, not a time: the digest and the close then
evaluate it at the same instant (``closing_at``), and a retried digest at its new one.

The Lua close evaluates the last step itself (``soon``: a flush, an urgent record or flush_at
records that came while the digest was open), atomically with what it reads; a calendar's next fire
cannot be computed in Lua, so it travels as an argument. That the two stay one rule is held
by tests/integration/store/test_due_rule.py: one table of cases through every store's close,
each left as this rule says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from digest_stream.store.limits import FLUSH_AT_FLOOR
from digest_stream.store.policy import TimelinePolicy
from digest_stream.vocabulary import DigestReason

#: The early causes quiet hours do not hold: a flush is asked for, an urgent record is urgent.
_PASS_QUIET_HOURS = frozenset({DigestReason.FLUSHED, DigestReason.URGENT})


@dataclass(frozen=True, slots=True)
class NextDue:
    """A timeline's rule for its next due time, from its policy."""

    policy: TimelinePolicy
    #: What next_delivery_at adds to the close time, the rule evaluated once (None: a
    #: calendar, whose next fire depends on the close time).
    _lead: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        policy = self.policy
        if policy.schedule is None and policy.quiet_hours is None:  # due(t) - t is constant
            object.__setattr__(self, "_lead", self.due(0.0, self._soonest))

    @property
    def _soonest(self) -> DigestReason | None:
        """What can make the timeline due soonest without anyone asking: an urgent record
        (it passes quiet hours), else flush_at records."""
        if self.policy.urgent_when is not None:
            return DigestReason.URGENT
        return None if self.policy.flush_at is None else DigestReason.FLUSH_AT

    def due(self, closed_at: float, soon: DigestReason | None = None) -> float:
        """When the timeline is due again once a digest closed at ``closed_at``: the
        calendar's next fire, else the cool-down, held to the end of the quiet hours it
        falls in; ``soon`` (a flush, an urgent record or flush_at records came while the
        digest was open): no later than FLUSH_AT_FLOOR after the close (flush_at's also held
        by quiet hours; a flush and an urgent record pass them)."""
        policy = self.policy
        fire = policy.next_fire(closed_at)
        if fire is None:
            due = policy.quiet_until(closed_at + policy.minimum_delay, closed_at)
        else:
            due = fire
        if soon is None:
            return due
        floor = closed_at + FLUSH_AT_FLOOR
        if soon not in _PASS_QUIET_HOURS:
            floor = policy.quiet_until(floor, closed_at)
        return floor if floor < due else due

    def after(self, closed_at: float, soon: DigestReason | None = None) -> tuple[float, str]:
        """``due`` with the cause the timeline then waits for: ``soon`` (FLUSHED, URGENT or
        FLUSH_AT) when it made the timeline due sooner, else SCHEDULE or COOLDOWN."""
        due = self.due(closed_at, soon)
        if soon is not None and due < self.due(closed_at):
            return due, soon.value
        return due, "COOLDOWN" if self.policy.schedule is None else "SCHEDULE"

    def cooled(self, last_delivery: float) -> float:
        """When a cooling timeline (closed at ``last_delivery`` with nothing pending) can go
        out again: its cool-down's end, held to the end of the quiet hours it falls in."""
        policy = self.policy
        return policy.quiet_until(last_delivery + policy.minimum_delay, last_delivery)

    def next_delivery_at(self, closed_at: float) -> int:
        """What a digest closed at ``closed_at`` names as the earliest its next one can go
        out (ms): the due time, as soon as flush_at or urgent records could make it."""
        if self._lead is not None:  # the publish path's common case: one addition
            return int((closed_at + self._lead) * 1000)
        return int(self.due(closed_at, self._soonest) * 1000)


@lru_cache(maxsize=1024)
def next_due(policy: TimelinePolicy) -> NextDue:
    """The rule of ``policy`` (one object per policy: digests of one policy share it)."""
    return NextDue(policy)
