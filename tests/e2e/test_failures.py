"""Every failure gives ONE line naming its cause and the setting to check, and exit 1 (issue 28).

Black-box: each command runs in a child process as a user would run it, configured by flags,
against the real Kafka and Redis of the local stack, a Redis ACL user of the test's own and
a TLS-only Redis the test starts (tests/support/tls.py). The secured stack's failures (SASL
passwords, ACLs) are in tests/e2e/secure/test_failures.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis
from click.testing import CliRunner

from digest_stream.cli import main
from digest_stream.store import StoreUnavailable
from digest_stream.store.redis import RedisStore
from digest_stream.store.redis.library import VERSION
from tests.support.kafka import TopicFactory
from tests.support.tls import Certificates, make_certificates, tls_redis

#: A SASL login against the stack's PLAINTEXT listener: refused at the handshake.
SASL = (
    '{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", '
    '"sasl.username": "svc", "sasl.password": "not-this"}'
)


def cli(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """`digest-stream ARGS` in a child process; the environment's settings are dropped."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_STREAM_")}
    return subprocess.run(
        [sys.executable, "-m", "digest_stream.cli", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a failed command printed (and nothing else, no traceback)."""
    assert done.returncode == 1, done
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return lines[0]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_port(certs: Certificates, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with tls_redis(certs, tmp_path_factory.mktemp("tls"), client_certificates=False) as port:
        yield port


@pytest.fixture(scope="module")
def mtls_port(certs: Certificates, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with tls_redis(certs, tmp_path_factory.mktemp("mtls"), client_certificates=True) as port:
        yield port


@pytest.fixture
def events(topic_factory: TopicFactory) -> str:
    return topic_factory(partitions=1)


def test_stats_with_a_wrong_redis_password(
    redis_url: str, kafka_bootstrap: str, events: str
) -> None:
    host = urlsplit(redis_url).netloc
    url = f"redis://nobody-{uuid.uuid4().hex[:6]}:wrong@{host}/0"
    done = cli("stats", "--redis-url", url, "--kafka-bootstrap-servers", kafka_bootstrap,
               "--events-topic", events)  # fmt: skip
    assert one_line(done) == (
        f"digest-stream stats: Redis at {host} refused the credentials of user "
        f"'{urlsplit(url).username}' (wrong password, or the user is unknown or disabled): "
        "check the user and password in DIGEST_STREAM_REDIS_URL"
    )
    assert "wrong" not in done.stderr.replace("wrong password", "")


def test_stats_as_the_readme_user_when_the_library_is_not_loaded(
    redis_client: redis.Redis, redis_url: str, kafka_bootstrap: str, events: str, namespace: str
) -> None:
    host = urlsplit(redis_url).netloc
    name, password = f"ds-nolib-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    redis_client.execute_command(
        "ACL", "SETUSER", name, "on", f">{password}", "resetkeys", f"~{{{namespace}:*",
        "resetchannels", "-@all", "+fcall", "+fcall_ro", "+ping", "+time", "+function|list",
    )  # fmt: skip
    redis_client.execute_command("FUNCTION", "DELETE", "digest_stream")  # an empty server
    try:
        done = cli("stats", "--redis-url", f"redis://{name}:{password}@{host}/0",
                   "--namespace", namespace, "--kafka-bootstrap-servers", kafka_bootstrap,
                   "--events-topic", events)  # fmt: skip
    finally:
        RedisStore(redis_client)  # loaded again, as an admin would
        redis_client.acl_deluser(name)
    assert one_line(done) == (
        f"digest-stream stats: the Redis Functions library digest_stream {VERSION} is not "
        f"loaded (or differs) on {host} and user '{name}' may not load it (no +function|load): "
        "load it as an administrator (any digest-stream command run once with an admin "
        "DIGEST_STREAM_REDIS_URL), then run with DIGEST_STREAM_REDIS_LOAD_LIBRARY=false; or "
        "grant +function|load"
    )
    assert password not in done.stderr


def test_redis_url_pointed_at_a_tls_port(tls_port: int, kafka_bootstrap: str, events: str) -> None:
    # Issue 28, failures 1 and 4: "Error while reading from ... (104, 'Connection reset by
    # peer')" named neither Redis nor TLS; `run` says the same line as every command.
    url = f"redis://127.0.0.1:{tls_port}/0"
    line = (
        f"Redis at 127.0.0.1:{tls_port} reset a plaintext connection: is this a TLS port? use "
        "rediss:// in DIGEST_STREAM_REDIS_URL (and DIGEST_STREAM_REDIS_SSL_CA_CERTS for its CA)"
    )
    flags = ["--kafka-bootstrap-servers", kafka_bootstrap, "--events-topic", events]
    assert one_line(cli("stats", "--redis-url", url, *flags)) == f"digest-stream stats: {line}"
    done = cli("run", "--redis-url", url, *flags)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == f"digest-stream run: cannot start: {line}"
    assert "Traceback" not in done.stderr


def test_rediss_without_the_ca_then_with_it(
    certs: Certificates, tls_port: int, kafka_bootstrap: str, events: str
) -> None:
    url = f"rediss://127.0.0.1:{tls_port}/0"
    flags = ["--redis-url", url, "--kafka-bootstrap-servers", kafka_bootstrap,
             "--events-topic", events]  # fmt: skip
    assert one_line(cli("stats", *flags)) == (
        f"digest-stream stats: Redis at 127.0.0.1:{tls_port}: the server's TLS certificate is "
        "not trusted (self-signed certificate in certificate chain): set "
        "DIGEST_STREAM_REDIS_SSL_CA_CERTS to the CA that signed it"
    )
    done = cli("stats", *flags, "--redis-ssl-ca-certs", str(certs.ca))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].split()[0] == "total"


def test_mutual_tls_needs_the_client_certificate(
    certs: Certificates, mtls_port: int, kafka_bootstrap: str, events: str
) -> None:
    flags = ["--redis-url", f"rediss://127.0.0.1:{mtls_port}/0", "--redis-ssl-ca-certs",
             str(certs.ca), "--kafka-bootstrap-servers", kafka_bootstrap,
             "--events-topic", events]  # fmt: skip
    line = one_line(cli("stats", *flags))
    assert line.startswith(f"digest-stream stats: Redis TLS handshake with 127.0.0.1:{mtls_port}")
    assert line.endswith(
        "check DIGEST_STREAM_REDIS_SSL_CA_CERTS, and DIGEST_STREAM_REDIS_SSL_CERTFILE / "
        "DIGEST_STREAM_REDIS_SSL_KEYFILE when the server asks for a client certificate"
    )
    done = cli("stats", *flags, "--redis-ssl-certfile", str(certs.client),
               "--redis-ssl-keyfile", str(certs.client_key))  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_debug_flag_shows_the_traceback(redis_url: str, kafka_bootstrap: str) -> None:
    url = f"redis://nobody:wrong@{urlsplit(redis_url).netloc}/0"
    flags = ["--redis-url", url, "--kafka-bootstrap-servers", kafka_bootstrap]
    done = cli("--debug", "stats", *flags)
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert "AuthenticationError" in done.stderr
    # The environment variable does the same (in this process: the exception propagates): the
    # store's error, chained to redis-py's.
    result = CliRunner().invoke(main, ["stats", *flags], env={"DIGEST_STREAM_DEBUG": "1"})
    assert isinstance(result.exception, StoreUnavailable), result.output
    assert result.exception.kind == "authentication"
    assert isinstance(result.exception.__cause__, redis.AuthenticationError)


def test_a_sasl_login_the_listener_cannot_take_is_named_at_once(kafka_bootstrap: str) -> None:
    # Issue 28, failure 2: `topics create` said nothing for 33 s, then "Failed while waiting
    # for controller: Local: Timed out" four times.
    started = time.monotonic()
    done = cli("topics", "create", "--kafka-bootstrap-servers", kafka_bootstrap,
               "--kafka-config", SASL)  # fmt: skip
    took = time.monotonic() - started
    assert one_line(done) == (
        f"digest-stream topics create: Kafka SASL authentication failed: the listener at "
        f"{kafka_bootstrap} offers no SASL mechanism (a plaintext or TLS-only port?): check "
        "security.protocol in DIGEST_STREAM_KAFKA_CONFIG and the port in "
        "DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS"
    )
    assert took < 10, took
    assert "not-this" not in done.stderr
