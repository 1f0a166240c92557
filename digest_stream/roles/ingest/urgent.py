"""Urgency at the check: which timelines' events are looked at (``urgent_rules``, from the
settings' policies), and whether an event is urgent by its timeline's ``urgent_when``
(``is_urgent``: the one attribute read off the event's bytes, not the decoded event)."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from digest_stream.settings import Settings
from digest_stream.store.policy import UrgentRule
from digest_stream.wire.event_head import EventHead, event_attribute
from digest_stream.wire.models import Event

#: timeline -> its policy's urgent_when rule (None: the timeline has none).
UrgentRules = Callable[[str], UrgentRule | None]


def urgent_rules(settings: Settings) -> UrgentRules | None:
    """timeline -> its urgent_when rule, None when neither the default policy nor any
    override has the option (the hot path then asks nothing)."""
    policies = [settings.policy(), *(settings.policy_for(p) for p in settings.overrides)]
    if all(policy.urgent_when is None for policy in policies):
        return None
    resolve = settings.resolver()

    @lru_cache(maxsize=65_536)  # one lookup per timeline, as the resolver's own cache
    def rule_of(timeline: str) -> UrgentRule | None:
        return resolve(timeline).urgent

    return rule_of


def is_urgent(rules: UrgentRules, timeline: str, event: EventHead | Event, value: bytes) -> bool:
    """Whether the timeline's policy has urgent_when and the event's attribute is one of its
    values (``value``: the event's plain Avro, which the check accepted)."""
    rule = rules(timeline)
    if rule is None:
        return False
    if type(event) is Event:  # registry mode: decoded whole already
        found = event.attributes.get(rule.attribute)
    else:
        found = event_attribute(value, rule.key)
    return found in rule.values
