"""The service's librdkafka settings (digest_stream/kafka.py)."""

from __future__ import annotations

from confluent_kafka import OFFSET_BEGINNING

from digest_stream.kafka import consumer_config, reset_start
from digest_stream.settings import Settings


def test_added_partitions_are_noticed_within_seconds_and_read_from_their_start() -> None:
    # Issue 20, item 7: librdkafka's default refresh (300 s) left new partitions unread.
    config = consumer_config(Settings(), "group")
    assert int(config["topic.metadata.refresh.interval.ms"]) <= 10_000
    # A partition without a commit (a new one) starts at its beginning: nothing skipped.
    assert reset_start(config) == OFFSET_BEGINNING


def test_the_user_kafka_config_still_wins() -> None:
    settings = Settings(kafka_config={"topic.metadata.refresh.interval.ms": "60000"})
    assert consumer_config(settings, "group")["topic.metadata.refresh.interval.ms"] == "60000"


def test_client_errors_keep_the_cause_behind_all_brokers_down() -> None:
    from confluent_kafka import KafkaError

    from digest_stream.kafka import ClientErrors, producer_config

    now = [0.0]
    errors = ClientErrors(clock=lambda: now[0])
    assert errors.latest() is None
    errors(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error"))
    errors(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    latest = errors.latest(within=30)
    assert latest is not None
    assert latest.code() == KafkaError._AUTHENTICATION
    now[0] = 31.0
    assert errors.latest(within=30) is None  # no longer reported: no longer standing
    assert producer_config(Settings(), errors)["error_cb"] is errors
