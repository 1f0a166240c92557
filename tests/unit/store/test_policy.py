"""Which policy a timeline gets: the default, or the longest matching per-prefix override."""

from __future__ import annotations

import pytest

from digest_stream.store.errors import InvalidArgument
from digest_stream.store.policy import (
    OPTIONS,
    PolicyOverride,
    TimelinePolicy,
    UrgentRule,
    describe,
    overridden,
    prefix_of,
    prefix_resolver,
)

DEFAULT = TimelinePolicy(minimum_delay=300, capacity=50)


def test_the_longest_matching_prefix_wins_whatever_the_order_given() -> None:
    resolve = prefix_resolver(
        DEFAULT,
        {
            "mail:*": PolicyOverride(minimum_delay=60),
            "mail:p:*": PolicyOverride(minimum_delay=5),
        },
    )
    assert resolve("mail:p:7").minimum_delay == 5
    assert resolve("mail:q").minimum_delay == 60
    assert resolve("sms:1") == DEFAULT


def test_an_override_keeps_the_default_fields_it_leaves_unset() -> None:
    policy = overridden(DEFAULT, PolicyOverride(flush_at=10))
    assert (policy.flush_at, policy.capacity, policy.minimum_delay) == (10, 50, 300)


def test_without_overrides_every_timeline_gets_the_default() -> None:
    assert prefix_resolver(DEFAULT, {})("anything") is DEFAULT


@pytest.mark.parametrize("pattern", ["mail", "*", "ma*il:*", "mail?:*", "[a]:*"])
def test_a_pattern_that_is_not_a_prefix_and_a_star_is_refused(pattern: str) -> None:
    with pytest.raises(InvalidArgument, match="must be a timeline prefix ending in"):
        prefix_of(pattern)


def test_an_override_is_checked_as_a_whole_policy() -> None:
    with pytest.raises(InvalidArgument, match="flush_at"):
        overridden(DEFAULT, PolicyOverride(flush_at=100))  # over the default capacity


def test_describe_shows_every_option_with_its_value_or_what_unset_means() -> None:
    policy = TimelinePolicy(minimum_delay=60, capacity=None, flush_at=5, schedule="0 9 * * *")
    parts = describe(policy).split(", ")
    assert [part.split()[0] for part in parts] == [spec.name for spec in OPTIONS]
    shown = {"minimum_delay 60s", "increment_delay 30s", "ttl 604800s", "capacity unlimited",
             "flush_at 5", "schedule 0 9 * * *", "timezone UTC", "collapse_by off"}  # fmt: skip
    assert shown <= set(parts)


def test_an_override_holds_exactly_the_options_each_unset_by_default() -> None:
    assert list(PolicyOverride.model_fields) == [spec.name for spec in OPTIONS]
    assert PolicyOverride().model_dump(exclude_none=True) == {}


# Issue 36 (f): the rules across options belong to the policy's declaration, so a policy
# made anywhere (settings, an override, the store API, the model) meets them.
TOO_LONG_A_COOL_DOWN = r"minimum_delay \(5000(\.0)?\) must not exceed maximum_delay \(1800(\.0)?\)"


def test_a_cool_down_longer_than_the_maximum_delay_is_refused_by_the_constructor() -> None:
    with pytest.raises(InvalidArgument, match=TOO_LONG_A_COOL_DOWN):
        TimelinePolicy(minimum_delay=5000, maximum_delay=1800)
    assert TimelinePolicy(minimum_delay=1800, maximum_delay=1800).minimum_delay == 1800


@pytest.mark.parametrize(
    "override",
    [
        PolicyOverride(minimum_delay=5000),  # over the default's maximum_delay
        PolicyOverride(minimum_delay=5000, maximum_delay=1800),
    ],
)
def test_a_cool_down_longer_than_the_maximum_delay_is_refused_in_an_override(
    override: PolicyOverride,
) -> None:
    with pytest.raises(InvalidArgument, match=TOO_LONG_A_COOL_DOWN):
        overridden(TimelinePolicy(), override)
    with pytest.raises(InvalidArgument, match=TOO_LONG_A_COOL_DOWN):
        prefix_resolver(TimelinePolicy(), {"mail:*": override})
    # an override lowering maximum_delay under the default's cool-down: the same rule
    with pytest.raises(
        InvalidArgument, match=r"minimum_delay \(300.0\) must not exceed maximum_delay \(100.0\)"
    ):
        overridden(TimelinePolicy(), PolicyOverride(maximum_delay=100))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("severity", "it has no '='"),
        (" =critical", "the attribute name is empty"),
        ("severity=", "a value is empty"),
        ("severity=critical,,fatal", "a value is empty"),
        ("severity=a=b", "a value cannot hold '='"),
    ],
)
def test_urgent_when_is_an_attribute_and_its_values_or_says_why_not(
    text: str, problem: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        TimelinePolicy(urgent_when=text)
    assert problem in str(caught.value)
    assert "ATTRIBUTE=VALUE[,VALUE...]" in str(caught.value)


def test_urgent_when_ignores_blanks_around_names() -> None:
    rule = TimelinePolicy(urgent_when=" severity = critical , fatal ").urgent
    assert rule == UrgentRule("severity", frozenset({"critical", "fatal"}))
    assert str(rule) == "severity=critical,fatal"
    assert TimelinePolicy().urgent is None
