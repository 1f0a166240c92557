"""Before Kafka is used: does it answer, does it take our credentials, may we use our topics
and groups? librdkafka retries each of these by itself and tells only its error callback, so
a wrong SASL password looks like 33 s of "waiting for controller"; asked here in short steps,
the cause is named within a second.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._metadata import ClusterMetadata

from digest_stream.kafka import LIBRDKAFKA_LOGGER, ClientErrors, admin_config
from digest_stream.ops.failures import Failure, KafkaScope, explain_kafka
from digest_stream.settings import Settings, env_name

#: Each metadata request waits this long; between two, librdkafka's error callback is served
#: (an authentication failure comes only through it, within milliseconds of the connect).
STEP = 0.5
#: How long the brokers get to answer at all: a command then gives up, the service goes on
#: (an outage at start is waited out like one later).
REACH_TIMEOUT = 10.0
#: Each topic and group lookup, once the brokers answer.
LOOKUP_TIMEOUT = 10.0
#: A plaintext client that a TLS listener hangs up on sees "Disconnected ... in state
#: APIVERSION_QUERY" in librdkafka's log and only "brokers are down" in its error callback.
#: This many such hang-ups in a row name TLS as the cause (one could be a broker going down).
HANGUPS = 3
#: librdkafka's own words for it in other versions, which explain_kafka knows.
TLS_HANGUP = (
    "Disconnected while requesting ApiVersion: might be caused by incorrect security.protocol "
    "configuration (connecting to a SSL listener?)"
)


class _HangUps(logging.Handler):
    """Counts librdkafka's "disconnected during the first request" lines of one check."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "Disconnected" in text and "APIVERSION_QUERY" in text:
            self.count += 1


def check_kafka(
    settings: Settings,
    *,
    topics: Iterable[str] = (),
    groups: Mapping[str, str] | None = None,
    timeout: float = REACH_TIMEOUT,
) -> Failure | None:
    """None when the brokers answer and allow ``topics`` and ``groups`` (group -> the setting
    or flag naming it); else the failure. A missing topic is no failure here."""
    errors = ClientErrors()
    hangups = _HangUps()
    logger = LIBRDKAFKA_LOGGER.getChild("preflight")
    # The hang-up lines are librdkafka's INFO; its lines stay here (the check's failure
    # line says what they would), whatever level the process logs at.
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(hangups)
    try:
        admin = AdminClient(admin_config(settings, errors) | {"logger": logger})
        reached = _reach(admin, errors, hangups, settings, timeout)
    finally:
        logger.removeHandler(hangups)
    if isinstance(reached, Failure):
        return reached
    for topic in topics:
        found = _topic(admin, settings, topic)
        if found is not None:
            return found
    return _groups(admin, settings, groups or {})


def service_groups(settings: Settings, roles: Iterable[str]) -> dict[str, str]:
    """The consumer groups the service's roles join, with the setting naming each."""
    chosen = set(roles)
    groups = {}
    if "ingest" in chosen:
        groups[settings.group_id] = env_name("group_id")
    if "delivery" in chosen:
        groups[settings.delivery_group_id] = env_name("delivery_group_id")
    return groups


def _reach(
    admin: AdminClient, errors: ClientErrors, hangups: _HangUps, settings: Settings, timeout: float
) -> ClusterMetadata | Failure:
    deadline = time.monotonic() + timeout
    last: KafkaError | None = None
    while True:
        try:
            return admin.list_topics(timeout=STEP)
        except KafkaException as exc:
            last = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else last
        admin.poll(0)  # serves error_cb (and the log): the cause librdkafka saw
        reported = errors.latest() or last
        if hangups.count >= HANGUPS and _plaintext(settings):
            reported = KafkaError(KafkaError._TRANSPORT, TLS_HANGUP)
        found = explain_kafka(reported, settings) if reported is not None else None
        if found is not None and found.fatal:
            return found
        if time.monotonic() >= deadline:
            return found or Failure(
                "unreachable",
                f"Kafka at {settings.kafka_bootstrap_servers} did not answer within "
                f"{timeout:.0f}s: check {env_name('kafka_bootstrap_servers')} and the network",
            )


def _plaintext(settings: Settings) -> bool:
    protocol = str(settings.kafka_config.get("security.protocol", "plaintext")).lower()
    return protocol in ("plaintext", "sasl_plaintext")


def _topic(admin: AdminClient, settings: Settings, topic: str) -> Failure | None:
    try:
        metadata = admin.list_topics(topic, timeout=LOOKUP_TIMEOUT).topics.get(topic)
    except KafkaException as exc:
        return explain_kafka(exc.args[0], settings, KafkaScope(topic=topic))
    if metadata is None or metadata.error is None:
        return None
    if metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return None  # the service waits for it; `topics create` makes it
    found = explain_kafka(metadata.error, settings, KafkaScope(topic=topic))
    return found if found is not None and found.fatal else None


def _groups(admin: AdminClient, settings: Settings, groups: Mapping[str, str]) -> Failure | None:
    if not groups:
        return None
    futures = admin.describe_consumer_groups(list(groups), request_timeout=LOOKUP_TIMEOUT)
    for group, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            scope = KafkaScope(group=group, group_setting=groups[group])
            found = explain_kafka(exc.args[0], settings, scope)
            if found is not None and found.fatal:
                return found
    return None
