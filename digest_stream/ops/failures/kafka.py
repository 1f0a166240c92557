"""Kafka errors (librdkafka's codes and texts) as one line naming the cause and the setting."""

from __future__ import annotations

import re

from confluent_kafka import KafkaError

from digest_stream.ops.failures.types import ACL_DOCS, Failure, KafkaScope
from digest_stream.settings import Settings, env_name

_AUTHENTICATION = {
    KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError.ILLEGAL_SASL_STATE,
    KafkaError.UNSUPPORTED_SASL_MECHANISM,
}
_UNREACHABLE = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE}
_TIMEOUTS = {KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT_QUEUE}
#: librdkafka's "(after 3ms in state AUTH_REQ, 2 identical error(s) suppressed)" tail.
_AFTER = re.compile(r"\s*\(after \d+ms in state [^)]*\)")
#: librdkafka's "sasl_ssl://host:port/bootstrap: " (or "/1: ") head of a broker's error.
_BROKER_HEAD = re.compile(r"^[a-z_]+://\S+?/(?:bootstrap|\d+): |^\S+:\d+/(?:bootstrap|\d+): ")
_MECHANISMS = re.compile(r"supported mechanisms: ?([A-Z0-9_,\- ]*)")
_KAFKA_CONFIG = env_name("kafka_config")
_BOOTSTRAP = env_name("kafka_bootstrap_servers")


def kafka_detail(error: KafkaError) -> str:
    """librdkafka's text without its broker address head and timing tail."""
    return _AFTER.sub("", _BROKER_HEAD.sub("", error.str())).strip()


def explain_kafka(
    error: KafkaError, settings: Settings | None = None, scope: KafkaScope | None = None
) -> Failure | None:
    """One Kafka error (an exception's, a consumer message's, error_cb's) as a failure."""
    code, detail = error.code(), kafka_detail(error)
    bootstrap = settings.kafka_bootstrap_servers if settings else "the bootstrap servers"
    config: dict[str, object] = dict(settings.kafka_config) if settings else {}
    if code in _AUTHENTICATION:
        return Failure("authentication", _kafka_authentication(detail, bootstrap, config))
    authorization = _kafka_authorization(error, config, scope or KafkaScope())
    if authorization is not None:
        return Failure("authorization", authorization)
    if code == KafkaError._SSL:
        return Failure("tls", _kafka_tls(detail, bootstrap))
    if code in _UNREACHABLE:
        if "PLAINTEXT broker listener" in detail:
            return Failure(
                "tls",
                f"Kafka at {bootstrap} is a plaintext listener, yet security.protocol asks for "
                f"TLS: check security.protocol in {_KAFKA_CONFIG} and the port in {_BOOTSTRAP}",
            )
        if "SSL listener" in detail or "incorrect security.protocol" in detail:
            return Failure(
                "tls",
                f"Kafka at {bootstrap} closed a plaintext connection (a TLS listener?): set "
                f"security.protocol to SSL or SASL_SSL in {_KAFKA_CONFIG}, or check the port in "
                f"{_BOOTSTRAP}",
            )
        return Failure(
            "unreachable",
            f"Kafka unreachable at {bootstrap} ({detail}): check {_BOOTSTRAP} and the network",
        )
    if code in _TIMEOUTS:
        return Failure(
            "timeout",
            f"Kafka at {bootstrap} did not answer in time ({detail}): check {_BOOTSTRAP}, "
            "the network and the brokers",
        )
    return None


def _kafka_authentication(detail: str, bootstrap: str, config: dict[str, object]) -> str:
    protocol = str(config.get("security.protocol", "plaintext")).upper()
    mechanism = str(config.get("sasl.mechanism", config.get("sasl.mechanisms", "GSSAPI")))
    if not protocol.startswith("SASL"):
        return (
            f"Kafka authentication failed at {bootstrap} ({detail}): check the TLS client "
            f"certificate (ssl.certificate.location, ssl.key.location) in {_KAFKA_CONFIG}"
        )
    user = config.get("sasl.username")
    who = f"for user {user!r} " if user else ""
    offered = _MECHANISMS.search(detail)
    if offered is not None and not offered.group(1).strip():
        return (
            f"Kafka SASL authentication failed: the listener at {bootstrap} offers no SASL "
            f"mechanism (a plaintext or TLS-only port?): check security.protocol in "
            f"{_KAFKA_CONFIG} and the port in {_BOOTSTRAP}"
        )
    if offered is not None:
        return (
            f"Kafka SASL authentication failed {who}at {bootstrap}: the broker offers "
            f"{offered.group(1).strip()}, not {mechanism}: check sasl.mechanism in {_KAFKA_CONFIG}"
        )
    return (
        f"Kafka SASL authentication failed {who}({mechanism}) at {bootstrap}: check "
        f"sasl.username, sasl.password and sasl.mechanism in {_KAFKA_CONFIG} ({detail})"
    )


def _kafka_authorization(
    error: KafkaError, config: dict[str, object], scope: KafkaScope
) -> str | None:
    code = error.code()
    user = config.get("sasl.username")
    who = f"user {user!r}" if user else "this client's principal"
    if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        topic = scope.topic or _named_topic(error.str()) or "a topic"
        return (
            f"Kafka refused {who} access to topic {topic} (TOPIC_AUTHORIZATION_FAILED): grant "
            f"it the ACLs listed in {ACL_DOCS}, or check the topic settings"
        )
    if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
        group = f"consumer group {scope.group}" if scope.group else "its consumer group"
        setting = scope.group_setting or (
            f"{env_name('group_id')} / {env_name('delivery_group_id')}"
        )
        return (
            f"Kafka refused {who} {group} (GROUP_AUTHORIZATION_FAILED): grant READ on it "
            f"({ACL_DOCS}) or choose a group the ACLs allow with {setting}"
        )
    if code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
        return (
            f"Kafka refused {who} a cluster operation (CLUSTER_AUTHORIZATION_FAILED, "
            f"{kafka_detail(error)}): grant it the ACLs listed in {ACL_DOCS}"
        )
    if code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return (
            f"Kafka refused {who} its transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): "
            f"grant it the ACLs listed in {ACL_DOCS}"
        )
    return None


def _named_topic(text: str) -> str | None:
    """The topic a librdkafka text names ("Subscribed topic not available: NAME: ...")."""
    match = re.search(r"available: ([A-Za-z0-9._-]+):", text)
    return match.group(1) if match else None


def _kafka_tls(detail: str, bootstrap: str) -> str:
    if "certificate verify failed" in detail.lower():
        return (
            f"Kafka at {bootstrap}: the broker's TLS certificate is not trusted ({detail}): set "
            f"ssl.ca.location in {_KAFKA_CONFIG} to the CA that signed it"
        )
    return (
        f"Kafka TLS handshake failed at {bootstrap} ({detail}): check security.protocol and "
        f"the ssl.* properties in {_KAFKA_CONFIG}"
    )
