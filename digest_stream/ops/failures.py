"""Kafka and Redis failures as ONE line that names the cause and the setting to check.

Every command and ``run`` print these lines instead of a traceback (``--debug`` or
``DIGEST_STREAM_DEBUG=1`` shows it). One table for both backends: authentication,
authorization (with the resource), TLS (an untrusted certificate, plaintext against TLS and
TLS against plaintext), unreachable, timed out, the Functions library a user may not load, and
a Redis that refuses calls for a while (OOM, READONLY, BUSY, LOADING, a failover, a cluster
moving slots), from the store's errors and their kind.
A failure of kind ``authentication``, ``authorization``, ``tls`` or ``library`` is a setting
to fix, not an outage to wait out: commands and the service's start stop on it.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from confluent_kafka import KafkaError, KafkaException

from digest_stream.settings import Settings, env_name
from digest_stream.store import SERVER_CODE, backend_error
from digest_stream.store.errors import BackendError, LibraryVersionMismatch

Kind = Literal[
    "authentication", "authorization", "tls", "unreachable", "timeout", "library", "refusing"
]

#: Kinds that waiting does not cure: a command exits on them, the service refuses to start.
FATAL_KINDS: frozenset[Kind] = frozenset({"authentication", "authorization", "tls", "library"})

#: Where the Kafka ACLs each role and command needs are listed.
ACL_DOCS = "docs/operations.md, Secured clusters"


@dataclass(frozen=True)
class Failure:
    """What went wrong, as one line naming the cause and the setting to check."""

    kind: Kind
    line: str

    @property
    def fatal(self) -> bool:
        """A setting to fix, not an outage: stop instead of retrying."""
        return self.kind in FATAL_KINDS


class FailureError(Exception):
    """A failure found by a check (preflight, a consumer's error): its line is the message."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.line)
        self.failure = failure


@dataclass(frozen=True)
class KafkaScope:
    """What a Kafka call was about, to name the resource a refusal concerns."""

    topic: str | None = None
    group: str | None = None
    #: The setting or flag that names the group (the service's, or `tail --group`).
    group_setting: str | None = None


def explain(
    exc: BaseException, settings: Settings | None = None, scope: KafkaScope | None = None
) -> Failure | None:
    """The failure behind an exception (its causes included), or None when it is none of ours."""
    for error in _chain(exc):
        found: Failure | None = None
        if isinstance(error, FailureError):
            found = error.failure
        elif isinstance(error, KafkaException) and error.args:
            if isinstance(error.args[0], KafkaError):
                found = explain_kafka(error.args[0], settings, scope)
        elif isinstance(error, KafkaError):
            found = explain_kafka(error, settings, scope)
        elif isinstance(error, LibraryVersionMismatch):
            found = _library_mismatch(error, settings)
        else:
            backend = backend_error(error)  # the store's, or its client's raw error
            if backend is not None:
                found = _store(backend, exc, settings)
        if found is not None:
            return found
    return None


def one_line(
    exc: BaseException, settings: Settings | None = None, scope: KafkaScope | None = None
) -> str:
    """The failure's line, or the exception's own first line when no mapping knows it."""
    found = explain(exc, settings, scope)
    if found is not None:
        return found.line
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, then what caused it (the store's error chains its client's, and a
    cluster client's error the node's)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


# ---------------------------------------------------------------------------- Kafka

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


# ---------------------------------------------------------------------------- Redis

_REDIS_URL = env_name("redis_url")
_CA = env_name("redis_ssl_ca_certs")
_CERT = env_name("redis_ssl_certfile")
_KEY = env_name("redis_ssl_keyfile")
_LOAD = env_name("redis_load_library")


@dataclass(frozen=True)
class _Where:
    """The Redis the settings point at, for the lines (never the password)."""

    address: str
    user: str
    tls: bool

    @classmethod
    def of(cls, settings: Settings | None, error: BackendError) -> _Where:
        if settings is None:
            return cls(error.address or error.backend, "default", False)
        try:
            parts = urlsplit(settings.redis_url)
            address = f"{parts.hostname}:{parts.port or 6379}"
            user = parts.username or "default"
        except ValueError:
            address, user = "Redis", "default"
        return cls(address, user, settings.redis_url.startswith("rediss://"))


def _store(error: BackendError, top: BaseException, settings: Settings | None) -> Failure | None:
    where = _Where.of(settings, error)
    if error.kind == "authentication":
        return Failure(
            "authentication",
            f"Redis at {where.address} refused the credentials of user {where.user!r} (wrong "
            f"password, or the user is unknown or disabled): check the user and password in "
            f"{_REDIS_URL}",
        )
    if error.kind == "authorization":
        return Failure("authorization", _redis_permission(error, where, settings))
    if error.kind in ("tls", "unreachable", "timeout"):
        return _redis_connection(error, top, where)
    refusing = _REFUSING.get(error.kind)
    if refusing is not None:
        return Failure("refusing", f"Redis at {where.address} {refusing} ({error.detail})")
    return None


#: What a Redis that refuses calls for a while is doing, and what ends it (the service waits).
_REFUSING = {
    "oom": "is out of memory and refuses writes (OOM: maxmemory under noeviction): free "
    "memory or raise maxmemory; the service waits meanwhile",
    "readonly": f"is a read-only replica (READONLY): check that {_REDIS_URL} names the "
    "primary, or wait for the failover to end",
    "busy": "is busy running a script (BUSY): it answers once the script ends",
    "loading": "is loading its data set (LOADING): it answers once loaded",
    "failover": "has lost its primary or its replicas (MASTERDOWN, NOREPLICAS): it answers "
    "once the failover ends",
    "cluster": "says its cluster is down or moving slots (CLUSTERDOWN, TRYAGAIN): it answers "
    "once the cluster is OK",
}


def _redis_permission(error: BackendError, where: _Where, settings: Settings | None) -> str:
    command = error.command
    if command == "function|load":
        name, version = SERVER_CODE
        return (
            f"the Redis Functions library {name} {version} is not loaded (or "
            f"differs) on {where.address} and user {where.user!r} may not load it (no "
            f"+function|load): load it as an administrator (any digest-stream command run once "
            f"with an admin {_REDIS_URL}), then run with {_LOAD}=false; or grant +function|load"
        )
    if command is not None:
        return (
            f"Redis user {where.user!r} may not run {command.upper()} on "
            f"{where.address} (NOPERM): grant +{command} as the README's ACL line "
            "(section Security) does"
        )
    if error.in_library:
        return (
            f"Redis user {where.user!r} may not run a command the Functions library calls on "
            f"{where.address}: grant the commands of the README's ACL line (section Security)"
        )
    namespace = settings.namespace if settings else "d"
    return (
        f"Redis user {where.user!r} may not access the keys of namespace {namespace} on "
        f"{where.address} (NOPERM): its key pattern must include ~{{{namespace}:* (or check "
        f"{env_name('namespace')})"
    )


def _redis_connection(error: BackendError, top: BaseException, where: _Where) -> Failure:
    causes = list(_chain(top))
    text = str(error)
    if any(isinstance(c, ssl.SSLCertVerificationError) for c in causes) or (
        "CERTIFICATE_VERIFY_FAILED" in text
    ):
        reason = text.rsplit("verify failed: ", maxsplit=1)[-1].split(" (_ssl", maxsplit=1)[0]
        return Failure(
            "tls",
            f"Redis at {where.address}: the server's TLS certificate is not trusted ({reason}): "
            f"set {_CA} to the CA that signed it",
        )
    if any(isinstance(c, ssl.SSLError) for c in causes) or "[SSL" in text:
        return Failure(
            "tls",
            f"Redis TLS handshake with {where.address} failed ({error.detail}): check {_CA}, "
            f"and {_CERT} / {_KEY} when the server asks for a client certificate",
        )
    if where.tls and any(isinstance(c, FileNotFoundError | PermissionError) for c in causes):
        return Failure(
            "tls",
            f"Redis TLS files unreadable ({error.detail}): check {_CA}, {_CERT} and {_KEY}",
        )
    if not where.tls and "Connection reset by peer" in text:
        return Failure(
            "tls",
            f"Redis at {where.address} reset a plaintext connection: is this a TLS port? use "
            f"rediss:// in {_REDIS_URL} (and {_CA} for its CA)",
        )
    if where.tls and error.connecting:
        return Failure(
            "tls",
            f"Redis at {where.address} did not answer the TLS handshake: is it a plaintext "
            f"port? use redis:// in {_REDIS_URL}, or check the address and the network",
        )
    if error.kind == "timeout":
        return Failure(
            "timeout",
            f"Redis at {where.address} did not answer in time ({error.detail}): check "
            f"{_REDIS_URL} and the network",
        )
    return Failure(
        "unreachable",
        f"Redis unreachable at {where.address} ({error.detail}): check {_REDIS_URL} and the "
        "network",
    )


def _library_mismatch(error: LibraryVersionMismatch, settings: Settings | None) -> Failure:
    # The store's own text speaks the Python API (load_library=True); this speaks settings.
    text = str(error).split(" (construct ")[0]
    if "an administrator must reload it" in text:
        return Failure("library", text)
    if settings is not None and not settings.redis_load_library:
        fix = (
            f"load it as an administrator (any digest-stream command run once with an admin "
            f"{_REDIS_URL}), or set {_LOAD}=true with a user granted +function|load"
        )
    else:
        fix = f"check that the user in {_REDIS_URL} is granted +function|load"
    return Failure("library", f"{text}: {fix}")
