"""urgent_when at the check (issue 39, item 3): the record of an event its timeline's policy
calls urgent is marked so; nothing is read of events whose policies lack the option."""

from __future__ import annotations

import pytest

from digest_stream.roles.ingest.check import Rules, check
from digest_stream.roles.ingest.urgent import is_urgent, urgent_rules
from digest_stream.settings import Settings
from digest_stream.store.base import NewRecord
from digest_stream.store.policy import UrgentRule
from digest_stream.wire import codec, control
from digest_stream.wire.models import Event

NOW = 1_700_000_000.0


def _event(**attributes: str) -> bytes:
    return codec.encode_event(
        Event(id="r1", timestamp=int(NOW * 1000), payload=b"p", attributes=attributes)
    )


def _rules(settings: Settings) -> Rules:
    return Rules(1000, None, frozenset(), urgent=urgent_rules(settings))


def _urgent(rules: Rules, timeline: bytes, value: bytes) -> bool:
    record = check(timeline, value, None, 7, NOW, rules)
    assert isinstance(record, NewRecord)
    return record.urgent


def test_no_policy_with_urgent_when_asks_nothing() -> None:
    settings = Settings(overrides={"mail:*": {"flush_at": 3}})
    assert urgent_rules(settings) is None
    assert not _urgent(_rules(settings), b"t", _event(severity="critical"))


@pytest.mark.parametrize(
    ("attributes", "urgent"),
    [
        ({"severity": "critical"}, True),
        ({"severity": "fatal", "other": "x"}, True),
        ({"other": "critical", "severity": "warning"}, False),
        ({"Severity": "critical"}, False),  # names and values are matched exactly
        ({"severity": "Critical"}, False),
        ({}, False),
    ],
)
def test_an_event_is_urgent_when_its_attribute_has_one_of_the_values(
    attributes: dict[str, str], urgent: bool
) -> None:
    rules = _rules(Settings(urgent_when="severity=critical, fatal"))
    assert _urgent(rules, b"t", _event(**attributes)) is urgent


def test_only_the_timelines_whose_policy_has_it_are_asked() -> None:
    rules = _rules(Settings(overrides={"ops:*": {"urgent_when": "severity=critical"}}))
    value = _event(severity="critical")
    assert _urgent(rules, b"ops:1", value)
    assert not _urgent(rules, b"mail:1", value)


def test_controls_are_never_urgent() -> None:
    rules = _rules(Settings(urgent_when="severity=critical"))
    record = check(b"t", control.encode(control.Control("flush")), None, 7, NOW, rules)
    assert isinstance(record, NewRecord)
    assert (record.control, record.urgent) == ("flush", False)


def test_a_decoded_event_is_judged_by_its_attributes() -> None:
    # Registry mode decodes the event whole: its attributes are read, not its bytes again.
    rule = UrgentRule("severity", frozenset({"critical"}))
    event = Event(id="r", timestamp=1, payload=b"", attributes={"severity": "critical"})
    assert is_urgent(lambda _: rule, "t", event, b"")
    assert not is_urgent(lambda _: rule, "t", event.model_copy(update={"attributes": {}}), b"")
    assert not is_urgent(lambda _: None, "t", event, b"")
