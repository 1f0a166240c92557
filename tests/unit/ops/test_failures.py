"""The one mapping from Kafka and Redis failures to one line: each input and its line.

The inputs are the errors librdkafka and redis-py raise, with the texts they were seen to
carry against the secured stack (tests/e2e/secure/test_failures.py runs them for real).
"""

from __future__ import annotations

import ssl

import pytest
import redis
from confluent_kafka import KafkaError, KafkaException
from redis.exceptions import NoPermissionError, RedisClusterException

from digest_stream.ops.failures import (
    Failure,
    FailureError,
    KafkaScope,
    explain,
    explain_kafka,
    one_line,
    outage_line,
)
from digest_stream.settings import Settings
from digest_stream.store.errors import LibraryVersionMismatch
from digest_stream.store.redis.library import VERSION
from tests.support.store_errors import raised

SASL = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "svc",
    "sasl.password": "secret-pw",
}
KAFKA = Settings(kafka_bootstrap_servers="broker:9093", kafka_config=SASL)
REDIS = Settings(redis_url="redis://svc:secret-pw@cache:6380/0", namespace="n1")
REDISS = Settings(redis_url="rediss://svc:secret-pw@cache:6380/0")


def kafka(code: int, text: str) -> KafkaError:
    return KafkaError(code, text)


KAFKA_CASES = [
    (
        kafka(KafkaError._AUTHENTICATION, "sasl_ssl://broker:9093/bootstrap: SASL authentication "
              "error: Authentication failed during authentication due to invalid credentials with "
              "SASL mechanism SCRAM-SHA-512 (after 5ms in state AUTH_REQ)"),
        "authentication",
        "Kafka SASL authentication failed for user 'svc' (SCRAM-SHA-512) at broker:9093: check "
        "sasl.username, sasl.password and sasl.mechanism in DIGEST_STREAM_KAFKA_CONFIG (SASL "
        "authentication error: Authentication failed during authentication due to invalid "
        "credentials with SASL mechanism SCRAM-SHA-512)",
    ),
    (
        kafka(KafkaError._AUTHENTICATION, "sasl_plaintext://broker:9093/bootstrap: SASL "
              "SCRAM-SHA-512 mechanism handshake failed: Broker: Request not valid in current "
              "SASL state: broker's supported mechanisms:  (after 0ms in state AUTH_HANDSHAKE)"),
        "authentication",
        "Kafka SASL authentication failed: the listener at broker:9093 offers no SASL mechanism "
        "(a plaintext or TLS-only port?): check security.protocol in DIGEST_STREAM_KAFKA_CONFIG "
        "and the port in DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS",
    ),
    (
        kafka(KafkaError._AUTHENTICATION, "sasl_ssl://broker:9093/bootstrap: SASL SCRAM-SHA-512 "
              "mechanism handshake failed: Broker: Unsupported SASL mechanism: broker's supported "
              "mechanisms: PLAIN (after 1ms in state AUTH_HANDSHAKE)"),
        "authentication",
        "Kafka SASL authentication failed for user 'svc' at broker:9093: the broker offers "
        "PLAIN, not SCRAM-SHA-512: check sasl.mechanism in DIGEST_STREAM_KAFKA_CONFIG",
    ),
    (
        kafka(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Subscribed topic not available: "
              "digests.output: Broker: Topic authorization failed"),
        "authorization",
        "Kafka refused user 'svc' access to topic digests.output (TOPIC_AUTHORIZATION_FAILED): "
        "grant it the ACLs listed in docs/operations.md, Secured clusters, or check the topic "
        "settings",
    ),
    (
        kafka(KafkaError.GROUP_AUTHORIZATION_FAILED, "JoinGroup failed: Broker: Group "
              "authorization failed"),
        "authorization",
        "Kafka refused user 'svc' its consumer group (GROUP_AUTHORIZATION_FAILED): grant READ on "
        "it (docs/operations.md, Secured clusters) or choose a group the ACLs allow with "
        "DIGEST_STREAM_GROUP_ID / DIGEST_STREAM_DELIVERY_GROUP_ID",
    ),
    (
        kafka(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "Broker: Cluster authorization failed"),
        "authorization",
        "Kafka refused user 'svc' a cluster operation (CLUSTER_AUTHORIZATION_FAILED, Broker: "
        "Cluster authorization failed): grant it the ACLs listed in docs/operations.md, Secured "
        "clusters",
    ),
    (
        kafka(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Broker: Transactional Id "
              "authorization failed"),
        "authorization",
        "Kafka refused user 'svc' its transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): "
        "grant it the ACLs listed in docs/operations.md, Secured clusters",
    ),
    (
        kafka(KafkaError._SSL, "sasl_ssl://broker:9093/bootstrap: SSL handshake failed: "
              "error:0A000086:SSL routines::certificate verify failed: broker certificate could "
              "not be verified (after 12ms in state SSL_HANDSHAKE)"),
        "tls",
        "Kafka at broker:9093: the broker's TLS certificate is not trusted (SSL handshake "
        "failed: error:0A000086:SSL routines::certificate verify failed: broker certificate "
        "could not be verified): set ssl.ca.location in DIGEST_STREAM_KAFKA_CONFIG to the CA "
        "that signed it",
    ),
    (
        kafka(KafkaError._SSL, "ssl://broker:9093/bootstrap: SSL handshake failed: unexpected eof"),
        "tls",
        "Kafka TLS handshake failed at broker:9093 (SSL handshake failed: unexpected eof): check "
        "security.protocol and the ssl.* properties in DIGEST_STREAM_KAFKA_CONFIG",
    ),
    (
        kafka(KafkaError._TRANSPORT, "ssl://broker:9093/bootstrap: SSL handshake failed: "
              "Disconnected: SSL connection closed by peer: connecting to a PLAINTEXT broker "
              "listener? (after 32ms in state SSL_HANDSHAKE)"),
        "tls",
        "Kafka at broker:9093 is a plaintext listener, yet security.protocol asks for TLS: check "
        "security.protocol in DIGEST_STREAM_KAFKA_CONFIG and the port in "
        "DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS",
    ),
    (
        kafka(KafkaError._TRANSPORT, "Disconnected while requesting ApiVersion: might be caused "
              "by incorrect security.protocol configuration (connecting to a SSL listener?)"),
        "tls",
        "Kafka at broker:9093 closed a plaintext connection (a TLS listener?): set "
        "security.protocol to SSL or SASL_SSL in DIGEST_STREAM_KAFKA_CONFIG, or check the port "
        "in DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS",
    ),
    (
        kafka(KafkaError._TRANSPORT, "broker:9093/bootstrap: Connect to ipv4#10.0.0.1:9093 "
              "failed: Connection refused (after 0ms in state CONNECT)"),
        "unreachable",
        "Kafka unreachable at broker:9093 (Connect to ipv4#10.0.0.1:9093 failed: Connection "
        "refused): check DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS and the network",
    ),
    (
        kafka(KafkaError._RESOLVE, "broker:9093/bootstrap: Failed to resolve 'broker:9093': Name "
              "or service not known (after 1ms in state CONNECT)"),
        "unreachable",
        "Kafka unreachable at broker:9093 (Failed to resolve 'broker:9093': Name or service not "
        "known): check DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS and the network",
    ),
    (
        kafka(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"),
        "unreachable",
        "Kafka unreachable at broker:9093 (1/1 brokers are down): check "
        "DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS and the network",
    ),
    (
        kafka(KafkaError._TIMED_OUT, "Failed while waiting for controller: Local: Timed out"),
        "timeout",
        "Kafka at broker:9093 did not answer in time (Failed while waiting for controller: "
        "Local: Timed out): check DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS, the network and the "
        "brokers",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("error", "kind", "line"), KAFKA_CASES)
def test_each_kafka_error_has_its_line(error: KafkaError, kind: str, line: str) -> None:
    assert explain_kafka(error, KAFKA) == Failure(kind, line)  # type: ignore[arg-type]
    # Raised (admin futures, consumers) or reported (error_cb, a message's error): one line.
    assert one_line(KafkaException(error), KAFKA) == line
    assert "secret-pw" not in line


def test_a_refused_group_names_the_group_and_the_flag_that_sets_it() -> None:
    scope = KafkaScope(group="digest-stream-tail-1a2b3c4d", group_setting="--group")
    error = kafka(KafkaError.GROUP_AUTHORIZATION_FAILED, "Broker: Group authorization failed")
    assert one_line(KafkaException(error), KAFKA, scope) == (
        "Kafka refused user 'svc' consumer group digest-stream-tail-1a2b3c4d "
        "(GROUP_AUTHORIZATION_FAILED): grant READ on it (docs/operations.md, Secured clusters) "
        "or choose a group the ACLs allow with --group"
    )


def test_kinds_that_waiting_does_not_cure_are_fatal() -> None:
    fatal = {case[1] for case in KAFKA_CASES if Failure(case[1], "").fatal}  # type: ignore[arg-type]
    assert fatal == {"authentication", "authorization", "tls"}
    assert Failure("library", "").fatal
    assert not Failure("unreachable", "").fatal
    assert not Failure("timeout", "").fatal


def _connection_error(text: str, cause: BaseException) -> redis.ConnectionError:
    """A redis-py connection error as raised: the socket's error as its context."""
    try:
        try:
            raise cause
        except BaseException:
            raise redis.ConnectionError(text) from None
    except redis.ConnectionError as exc:
        exc.__context__ = cause
        return exc


def _verify_failed() -> ssl.SSLCertVerificationError:
    return ssl.SSLCertVerificationError(1, "certificate verify failed")


REDIS_CASES = [
    (
        REDIS,
        redis.AuthenticationError("invalid username-password pair or user is disabled."),
        "authentication",
        "Redis at cache:6380 refused the credentials of user 'svc' (wrong password, or the user "
        "is unknown or disabled): check the user and password in DIGEST_STREAM_REDIS_URL",
    ),
    (
        REDIS,
        NoPermissionError("this user has no permissions to run the 'function|load' command"),
        "authorization",
        f"the Redis Functions library digest_stream {VERSION} is not loaded (or differs) on "
        "cache:6380 "
        "and user 'svc' may not load it (no +function|load): load it as an administrator (any "
        "digest-stream command run once with an admin DIGEST_STREAM_REDIS_URL), then run with "
        "DIGEST_STREAM_REDIS_LOAD_LIBRARY=false; or grant +function|load",
    ),
    (
        REDIS,
        NoPermissionError("this user has no permissions to run the 'time' command"),
        "authorization",
        "Redis user 'svc' may not run TIME on cache:6380 (NOPERM): grant +time as the README's "
        "ACL line (section Security) does",
    ),
    (
        REDIS,
        NoPermissionError("this user has no permissions to access one of the keys used as "
                          "arguments"),
        "authorization",
        "Redis user 'svc' may not access the keys of namespace n1 on cache:6380 (NOPERM): its "
        "key pattern must include ~{n1:* (or check DIGEST_STREAM_NAMESPACE)",
    ),
    (
        REDIS,
        redis.ResponseError("ERR Error running script (call to f_1): @user_script:1: The user "
                            "executing the script can't run this command or subcommand"),
        "authorization",
        "Redis user 'svc' may not run a command the Functions library calls on cache:6380: "
        "grant the commands of the README's ACL line (section Security)",
    ),
    (
        REDIS,
        _connection_error("Error while reading from cache:6380 : (104, 'Connection reset by "
                          "peer')", ConnectionResetError(104, "Connection reset by peer")),
        "tls",
        "Redis at cache:6380 reset a plaintext connection: is this a TLS port? use rediss:// in "
        "DIGEST_STREAM_REDIS_URL (and DIGEST_STREAM_REDIS_SSL_CA_CERTS for its CA)",
    ),
    (
        REDISS,
        _connection_error("Error 1 connecting to cache:6380. [SSL: CERTIFICATE_VERIFY_FAILED] "
                          "certificate verify failed: self-signed certificate in certificate "
                          "chain (_ssl.c:1006).", _verify_failed()),
        "tls",
        "Redis at cache:6380: the server's TLS certificate is not trusted (self-signed "
        "certificate in certificate chain): set DIGEST_STREAM_REDIS_SSL_CA_CERTS to the CA that "
        "signed it",
    ),
    (
        REDISS,
        _connection_error("Error 8 while writing to socket. EOF occurred in violation of "
                          "protocol (_ssl.c:2427).", ssl.SSLEOFError(8, "EOF occurred")),
        "tls",
        "Redis TLS handshake with cache:6380 failed (EOF occurred in violation of protocol "
        "(_ssl.c:2427)): check DIGEST_STREAM_REDIS_SSL_CA_CERTS, and "
        "DIGEST_STREAM_REDIS_SSL_CERTFILE / DIGEST_STREAM_REDIS_SSL_KEYFILE when the server asks "
        "for a client certificate",
    ),
    (
        REDISS,
        _connection_error("Error 2 connecting to cache:6380. No such file or directory.",
                          FileNotFoundError(2, "No such file or directory")),
        "tls",
        "Redis TLS files unreadable (No such file or directory): check "
        "DIGEST_STREAM_REDIS_SSL_CA_CERTS, DIGEST_STREAM_REDIS_SSL_CERTFILE and "
        "DIGEST_STREAM_REDIS_SSL_KEYFILE",
    ),
    (
        REDISS,
        redis.TimeoutError("Timeout connecting to server"),
        "tls",
        "Redis at cache:6380 did not answer the TLS handshake: is it a plaintext port? use "
        "redis:// in DIGEST_STREAM_REDIS_URL, or check the address and the network",
    ),
    (
        REDIS,
        _connection_error("Error 111 connecting to cache:6380. Connection refused.",
                          ConnectionRefusedError(111, "Connection refused")),
        "unreachable",
        "Redis unreachable at cache:6380 (Connection refused): check DIGEST_STREAM_REDIS_URL "
        "and the network",
    ),
    (
        REDIS,
        redis.TimeoutError("Timeout reading from socket"),
        "timeout",
        "Redis at cache:6380 did not answer in time (Timeout reading from socket): check "
        "DIGEST_STREAM_REDIS_URL and the network",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("settings", "error", "kind", "line"), REDIS_CASES)
def test_each_redis_error_has_its_line(
    settings: Settings, error: BaseException, kind: str, line: str
) -> None:
    assert explain(error, settings) == Failure(kind, line)  # type: ignore[arg-type]
    assert "secret-pw" not in line


@pytest.mark.parametrize(("settings", "error", "kind", "line"), REDIS_CASES)
def test_the_stores_error_has_the_line_of_the_redis_error_it_translates(
    settings: Settings, error: redis.RedisError, kind: str, line: str
) -> None:
    # What the service meets: RedisStore raises the store's error, chained to redis-py's.
    translated = raised(error)
    assert not isinstance(translated, redis.RedisError)
    assert explain(translated, settings) == Failure(kind, line)  # type: ignore[arg-type]


REFUSING_CASES = [
    (
        redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
        "Redis at cache:6380 is out of memory and refuses writes (OOM: maxmemory under "
        "noeviction): free memory or raise maxmemory; the service waits meanwhile (command not "
        "allowed when used memory > 'maxmemory')",
    ),
    (
        redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
        "Redis at cache:6380 is a read-only replica (READONLY): check that "
        "DIGEST_STREAM_REDIS_URL names the primary, or wait for the failover to end (You can't "
        "write against a read only replica)",
    ),
    (
        redis.ResponseError("BUSY Redis is busy running a script. You can only call "
                            "SCRIPT KILL or SHUTDOWN NOSAVE."),
        "Redis at cache:6380 is busy running a script (BUSY): it answers once the script ends "
        "(BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN "
        "NOSAVE)",
    ),
    (
        redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
        "Redis at cache:6380 is loading its data set (LOADING): it answers once loaded (Redis "
        "is loading the dataset in memory)",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("error", "line"), REFUSING_CASES)
def test_a_redis_refusing_for_a_while_is_named_and_not_fatal(
    error: redis.RedisError, line: str
) -> None:
    for given in (error, raised(error)):  # as redis-py raises it, and as the store does
        failure = explain(given, REDIS)
        assert failure == Failure("refusing", line)
        assert not failure.fatal


@pytest.mark.parametrize(("error", "line"), REFUSING_CASES)
def test_a_running_role_names_a_refusing_redis_and_what_ends_it(
    error: redis.RedisError, line: str
) -> None:
    assert outage_line(raised(error), REDIS) == line


def test_a_running_role_keeps_a_lost_connections_own_text() -> None:
    # Mid-run a reset is an outage: the start's hint ("is this a TLS port?") would mislead.
    reset = raised(_connection_error("Connection reset by peer", ConnectionResetError(104)))
    assert outage_line(reset, REDIS).startswith("Redis unreachable or refusing (")
    assert "TLS" not in outage_line(reset, REDIS)
    assert outage_line(None, REDIS) == "Redis unreachable or refusing (?)"


def test_the_cluster_clients_wrapped_error_is_explained_by_its_cause() -> None:
    cause = redis.AuthenticationError("invalid username-password pair or user is disabled.")
    try:
        raise RedisClusterException("Redis Cluster cannot be connected.") from cause
    except RedisClusterException as exc:
        failure = explain(exc, REDIS)
    assert failure is not None
    assert failure.kind == "authentication"


def test_a_missing_library_names_the_setting_that_loads_it() -> None:
    error = LibraryVersionMismatch(
        "Redis Functions library 'digest_stream' is not loaded on redis; this code needs "
        f"version {VERSION} (construct RedisStore with load_library=True to load it)"
    )
    settings = REDIS.model_copy(update={"redis_load_library": False})
    assert one_line(error, settings) == (
        "Redis Functions library 'digest_stream' is not loaded on redis; this code needs version "
        f"{VERSION}: load it as an administrator (any digest-stream command run once with an admin "
        "DIGEST_STREAM_REDIS_URL), or set DIGEST_STREAM_REDIS_LOAD_LIBRARY=true with a user "
        "granted +function|load"
    )


def test_a_failure_error_carries_its_line_and_unknown_errors_their_own_text() -> None:
    failure = Failure("authorization", "the line")
    assert one_line(FailureError(failure)) == "the line"
    assert explain(ZeroDivisionError("division by zero")) is None
    assert one_line(ZeroDivisionError("division by zero")) == "division by zero"
    assert one_line(RuntimeError("")) == "RuntimeError"
