"""Before Kafka is used: does it answer, does it take our credentials, may we use our topics
and groups? librdkafka retries each of these by itself and tells only its error callback, so
a wrong SASL password looks like 33 s of "waiting for controller"; asked here in short steps,
the cause is named within a second.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._metadata import ClusterMetadata

from digest_stream.kafka import ClientErrors, admin_config
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
    admin = AdminClient(admin_config(settings, errors))
    reached = _reach(admin, errors, settings, timeout)
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
    admin: AdminClient, errors: ClientErrors, settings: Settings, timeout: float
) -> ClusterMetadata | Failure:
    deadline = time.monotonic() + timeout
    last: KafkaError | None = None
    while True:
        try:
            return admin.list_topics(timeout=STEP)
        except KafkaException as exc:
            last = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else last
        admin.poll(0)  # serves error_cb: the cause librdkafka saw
        reported = errors.latest() or last
        found = explain_kafka(reported, settings) if reported is not None else None
        if found is not None and found.fatal:
            return found
        if time.monotonic() >= deadline:
            return found or Failure(
                "unreachable",
                f"Kafka at {settings.kafka_bootstrap_servers} did not answer within "
                f"{timeout:.0f}s: check {env_name('kafka_bootstrap_servers')} and the network",
            )


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
