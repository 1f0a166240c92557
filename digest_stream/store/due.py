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


@dataclass(frozen=True, slots=True)
class NextDue:
    """A timeline's rule for its next due time, from its policy."""

    policy: TimelinePolicy
    #: What next_delivery_at adds to the close time, the rule evaluated once (None: a
    #: calendar, whose next fire depends on the close time).
    _lead: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.policy.schedule is None:  # due(t) - t is the same for every t
            object.__setattr__(self, "_lead", self.due(0.0, self._may_come_soon))

    @property
    def _may_come_soon(self) -> bool:
        """Records alone can make the timeline due at the floor: flush_at, urgent_when."""
        return self.policy.flush_at is not None or self.policy.urgent_when is not None

    def due(self, closed_at: float, soon: bool = False) -> float:
        """When the timeline is due again once a digest closed at ``closed_at``: the
        calendar's next fire, else the cool-down; ``soon`` (a flush, an urgent record or
        flush_at records came while the digest was open): no later than FLUSH_AT_FLOOR
        after the close."""
        policy = self.policy
        fire = policy.next_fire(closed_at)
        due = closed_at + policy.minimum_delay if fire is None else fire
        floor = closed_at + FLUSH_AT_FLOOR
        return floor if soon and floor < due else due

    def after(self, closed_at: float, soon: DigestReason | None = None) -> tuple[float, str]:
        """``due`` with the cause the timeline then waits for: ``soon`` (FLUSHED, URGENT or
        FLUSH_AT) when it made the timeline due sooner, else SCHEDULE or COOLDOWN."""
        due = self.due(closed_at, soon is not None)
        if soon is not None and due < self.due(closed_at):
            return due, soon.value
        return due, "COOLDOWN" if self.policy.schedule is None else "SCHEDULE"

    def next_delivery_at(self, closed_at: float) -> int:
        """What a digest closed at ``closed_at`` names as the earliest its next one can go
        out (ms): the due time, as soon as flush_at or urgent records could make it."""
        if self._lead is not None:  # the publish path's common case: one addition
            return int((closed_at + self._lead) * 1000)
        return int(self.due(closed_at, self._may_come_soon) * 1000)


@lru_cache(maxsize=1024)
def next_due(policy: TimelinePolicy) -> NextDue:
    """The rule of ``policy`` (one object per policy: digests of one policy share it)."""
    return NextDue(policy)
