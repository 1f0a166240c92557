"""Missing topics in the log (issue 36 h): one line naming them and `digest-stream topics
create`, the same again only every REMIND_INTERVAL while they stay missing, one when they exist;
librdkafka's raw UNKNOWN_TOPIC_OR_PART stays at DEBUG."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, Message

from digest_stream.kafka import ClientErrors, admin_config, usable
from digest_stream.ops.topics import REMIND_INTERVAL, MissingTopics, missing_line
from digest_stream.settings import Settings

TOPICS = {
    "d.events": "DIGEST_STREAM_EVENTS_TOPIC",
    "d.schedule": "DIGEST_STREAM_SCHEDULE_TOPIC",
    "d.dlq": "DIGEST_STREAM_DLQ_TOPIC",
}
EVENTS_MISSING = (
    "Kafka topic d.events (DIGEST_STREAM_EVENTS_TOPIC) does not exist: create it with "
    "`digest-stream topics create` (run with the same settings); the service waits for it and "
    "needs no restart"
)


class Clock:
    """A monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Watch:
    """A MissingTopics on a hand-moved clock, and the lines it logged since the last look."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO, logger="digest_stream.ops.topics")
        self.caplog = caplog
        self.clock = Clock()
        self.topics = MissingTopics(TOPICS, clock=self.clock)

    def lookup(self, *missing: str, after: float = 10.0) -> list[tuple[str, str]]:
        """One lookup ``after`` seconds past the last one, finding ``missing``: what it logged."""
        self.clock.now += after
        self.topics.update(missing)
        return lines(self.caplog)


@pytest.fixture
def watch(caplog: pytest.LogCaptureFixture) -> Watch:
    """A watch of TOPICS, nothing missing yet."""
    return Watch(caplog)


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """The watch's lines logged since the last call, as (level, text)."""
    found = [
        (record.levelname, record.getMessage())
        for record in caplog.records
        if record.name == "digest_stream.ops.topics"
    ]
    caplog.clear()
    return found


def test_a_missing_topic_is_named_once_then_every_remind_interval(watch: Watch) -> None:
    assert watch.lookup("d.events") == [("WARNING", EVENTS_MISSING)]
    assert watch.topics.missing == {"d.events": "DIGEST_STREAM_EVENTS_TOPIC"}
    for _ in range(5):  # a lookup every 10 s: silent until the interval is over
        assert watch.lookup("d.events") == []
    reminder = watch.lookup("d.events", after=REMIND_INTERVAL - 50)
    assert reminder == [("WARNING", f"{EVENTS_MISSING} (missing for 60s)")]
    assert watch.lookup("d.events") == []


def test_a_newly_missing_topic_is_named_at_once_with_the_others(watch: Watch) -> None:
    watch.lookup("d.events")
    # in the service's order of its topics, with how long the first has been missing
    assert watch.lookup("d.dlq", "d.events") == [
        (
            "WARNING",
            "Kafka topics d.events (DIGEST_STREAM_EVENTS_TOPIC), d.dlq (DIGEST_STREAM_DLQ_TOPIC) "
            "do not exist: create them with `digest-stream topics create` (run with the same "
            "settings); the service waits for them and needs no restart (missing for 10s)",
        )
    ]


def test_a_topic_that_appears_is_said_once_and_the_others_still_remind(watch: Watch) -> None:
    watch.lookup("d.events", "d.schedule")
    assert watch.lookup("d.schedule") == [
        (
            "INFO",
            "Kafka topic d.events (DIGEST_STREAM_EVENTS_TOPIC) exists now; the service uses it",
        )
    ]
    assert watch.lookup("d.schedule", after=REMIND_INTERVAL - 10) == [
        ("WARNING", missing_line({"d.schedule": "DIGEST_STREAM_SCHEDULE_TOPIC"}, REMIND_INTERVAL))
    ]
    assert [level for level, _ in watch.lookup()] == ["INFO"]
    assert watch.topics.missing == {}
    assert watch.lookup() == []
    # deleted again later: named at once, as new
    assert watch.lookup("d.events") == [("WARNING", EVENTS_MISSING)]


def test_librdkafkas_missing_topic_error_is_debug_and_others_still_warn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="digest_stream.kafka")
    missing = KafkaError(
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        "Subscribed topic not available: d.events: Broker: Unknown topic or partition",
    )
    other = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed")
    errors = ClientErrors()
    batch = [Message(topic="d.events", error=missing), Message(topic="d.events", error=other)]
    assert list(usable(batch, "ingest", errors)) == []
    levels = [(r.levelname, "UNKNOWN_TOPIC_OR_PART" in r.getMessage()) for r in caplog.records]
    assert levels == [("DEBUG", True), ("WARNING", False)]
    assert errors.latest() == other  # each still reported, in order


def test_an_admin_lookup_never_asks_the_broker_to_create_a_topic() -> None:
    assert admin_config(Settings())["allow.auto.create.topics"] is False
    # the user's kafka_config still wins, as for every client
    settings = Settings(kafka_config={"allow.auto.create.topics": True})
    assert admin_config(settings)["allow.auto.create.topics"] is True
