"""Issue 28's failures on the secured stack, each with the ONE line the user gets and exit 1.

Every command runs as a child process (black-box: its real stderr, its exit code), configured
by the environment only, as the README's Redis ACL user and the stack's SCRAM users (or one of
the test's own with fewer ACLs).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from subprocess import CompletedProcess
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from digest_stream.cli.acls import names_of
from digest_stream.ops.acls import RUN_ROLES, acls
from digest_stream.settings import Settings
from tests.support import free_port, unique, wait_until
from tests.support.http import probe
from tests.support.pipeline import ServiceProcess, settings_env
from tests.support.secure import (
    SecureNames,
    SecureStack,
    drop_scram_user,
    scram_user,
    wait_ready,
)

#: A refused login or ACL is named within seconds (it was 33 s of timeouts, or never).
NAMED_WITHIN = 10.0


def cli(settings: Settings, *args: str, **env: str) -> CompletedProcess[str]:
    """`digest-stream ARGS` as a child process with these settings (and no others) in its env."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_STREAM_")}
    return subprocess.run(
        [sys.executable, "-m", "digest_stream.cli", *args],
        env={**clean, **settings_env(settings), **env},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def one_line(done: CompletedProcess[str]) -> str:
    """The one line a failed command printed (nothing else, no traceback)."""
    assert done.returncode == 1, done
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return lines[0]


def _timed(settings: Settings, *args: str) -> tuple[CompletedProcess[str], float]:
    started = time.monotonic()
    done = cli(settings, *args)
    return done, time.monotonic() - started


def _wrong_password(names: SecureNames, **changes: object) -> Settings:
    user = names.stack.info["service_user"]
    return names.settings(kafka_config=names.stack.kafka_config(user, "not-the-password"),
                          **changes)  # fmt: skip


def _sasl_line(stack: SecureStack) -> str:
    return (
        f"Kafka SASL authentication failed for user '{stack.info['service_user']}' "
        f"(SCRAM-SHA-512) at {stack.bootstrap}: check sasl.username, sasl.password and "
        "sasl.mechanism in DIGEST_STREAM_KAFKA_CONFIG (SASL authentication error: Authentication "
        "failed during authentication due to invalid credentials with SASL mechanism "
        "SCRAM-SHA-512)"
    )


def test_topics_create_names_a_wrong_sasl_password_at_once(secure_names: SecureNames) -> None:
    # Failure 2: 33 s, then four times "Failed while waiting for controller: Local: Timed out".
    done, took = _timed(_wrong_password(secure_names), "topics", "create")
    assert one_line(done) == f"digest-stream topics create: {_sasl_line(secure_names.stack)}"
    assert took < NAMED_WITHIN, took
    assert "not-the-password" not in done.stderr


def test_run_with_a_wrong_sasl_password_stops_at_start(secure_names: SecureNames) -> None:
    # Failure 3: ~9 ERROR lines a second forever, /healthz 200. Now a crash loop that says so.
    secure_names.create_topics(partitions=1)
    done, took = _timed(_wrong_password(secure_names), "run")
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"digest-stream run: cannot start: {_sasl_line(secure_names.stack)}"
    )
    assert took < NAMED_WITHIN + 5, took
    assert len(done.stderr.splitlines()) <= 3, done.stderr  # no flood before it
    assert "not-the-password" not in done.stderr


def test_redis_url_at_the_tls_port_names_tls(secure_names: SecureNames) -> None:
    # Failures 1 and 4, as the README's ACL user on the TLS-only Redis (rediss:// without and
    # with the CA, mTLS, a wrong password and the library a user may not load:
    # tests/e2e/test_failures.py, on Redis servers of its own).
    settings = secure_names.settings()
    parts = urlsplit(settings.redis_url)
    address = parts.netloc.rsplit("@", 1)[1]
    url = urlunsplit(parts._replace(scheme="redis", query=""))  # the CA parameter is TLS's
    plain = settings.model_copy(update={"redis_url": url})
    assert one_line(cli(plain, "stats")) == (
        f"digest-stream stats: Redis at {address} reset a plaintext connection: is this a TLS "
        "port? use rediss:// in DIGEST_STREAM_REDIS_URL (and DIGEST_STREAM_REDIS_SSL_CA_CERTS "
        "for its CA)"
    )


@pytest.fixture
def tail_user(secure_names: SecureNames) -> Iterator[tuple[str, str]]:
    """A SCRAM user that may read the output topic but holds no tail group."""
    name, password = unique("ds-tail"), uuid.uuid4().hex
    settings = secure_names.settings()
    granted = [a for a in acls(names_of(settings), ("delivery",)) if a.resource == "topic"]
    scram_user(secure_names.stack, name, password, granted)
    yield name, password
    drop_scram_user(secure_names.stack, name)


def test_tail_treats_refused_groups_and_topics_as_fatal(
    secure_names: SecureNames, tail_user: tuple[str, str]
) -> None:
    # Failure 5: GROUP_AUTHORIZATION_FAILED twice, then a hang; without ACLs, exit 0.
    secure_names.create_topics(partitions=1)
    settings = secure_names.settings(kafka_config=secure_names.stack.kafka_config(*tail_user))
    done, took = _timed(settings, "tail", "--duration", "15")
    line = one_line(done)
    assert re.fullmatch(
        rf"digest-stream tail: Kafka refused user '{tail_user[0]}' consumer group "
        r"digest-stream-tail-[0-9a-f]{8} \(GROUP_AUTHORIZATION_FAILED\): grant READ on it "
        r"\(docs/operations.md, Secured clusters\) or choose a group the ACLs allow with "
        r"--group \(tail's default is digest-stream-tail-<hex>\)",
        line,
    ), line
    assert took < NAMED_WITHIN, took
    named = cli(settings, "tail", "--group", "other-group", "--duration", "15")
    assert one_line(named) == (
        f"digest-stream tail: Kafka refused user '{tail_user[0]}' consumer group other-group "
        "(GROUP_AUTHORIZATION_FAILED): grant READ on it (docs/operations.md, Secured clusters) "
        "or choose a group the ACLs allow with --group"
    )
    # A user without any ACL on the topic: the topic is named.
    elsewhere = settings.model_copy(update={"output_topic": "elsewhere.output"})
    assert one_line(cli(elsewhere, "tail", "--duration", "15")) == (
        f"digest-stream tail: Kafka refused user '{tail_user[0]}' access to topic "
        "elsewhere.output (TOPIC_AUTHORIZATION_FAILED): grant it the ACLs listed in "
        "docs/operations.md, Secured clusters, or check the topic settings"
    )


def test_run_names_a_group_outside_its_acls(secure_names: SecureNames) -> None:
    secure_names.create_topics(partitions=1)
    settings = secure_names.settings(group_id="outside-the-prefix")
    done, took = _timed(settings, "run")
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"digest-stream run: cannot start: Kafka refused user "
        f"'{secure_names.stack.info['service_user']}' consumer group outside-the-prefix "
        "(GROUP_AUTHORIZATION_FAILED): grant READ on it (docs/operations.md, Secured clusters) "
        "or choose a group the ACLs allow with DIGEST_STREAM_GROUP_ID"
    )
    assert took < NAMED_WITHIN + 5, took


def _revoke_group(stack: SecureStack, user: str, group: str) -> None:
    """Delete the user's ACLs on one consumer group (as the super user)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    anything: Any = None  # a filter's None matches any host
    on_group = AclBindingFilter(
        ResourceType.GROUP, group, ResourcePatternType.ANY, f"User:{user}", anything,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    admin = stack.admin()  # held: the futures fail once the client is destroyed
    for future in admin.delete_acls([on_group]).values():
        assert future.result(timeout=30), f"no ACL on group {group} to revoke"


def test_a_group_acl_revoked_while_running_is_named_by_readiness(
    secure_names: SecureNames,
) -> None:
    # Failure 3, while running: /readyz said only "no input partitions assigned"; now it names
    # the refusal, and the log says which group and which setting, without flooding.
    name, password = unique("ds-run"), uuid.uuid4().hex
    # The consumer learns of the refusal when its session ends (heartbeats are refused without
    # a word): the broker's shortest session (6 s) keeps the test short.
    config = {**secure_names.stack.kafka_config(name, password), "session.timeout.ms": 6000}
    settings = secure_names.settings(kafka_config=config, metrics_port=free_port())
    secure_names.create_topics(partitions=1)
    scram_user(secure_names.stack, name, password, acls(names_of(settings), RUN_ROLES))
    service = ServiceProcess(settings, "ingest,scheduler,delivery", {})
    url = f"http://127.0.0.1:{settings.metrics_port}/readyz"
    try:
        wait_ready(settings.metrics_port or 0, 60)
        _revoke_group(secure_names.stack, name, settings.delivery_group_id)
        expected = "Kafka authorization failure (GROUP_AUTHORIZATION_FAILED): see the log"

        def named() -> bool:
            status, body = probe(url)
            return status == 503 and expected in body.get("problems", [])

        wait_until(named, 30, f"readiness naming the refusal: {service.log()[-2000:]}")
        log = service.log()
        assert (
            f"Kafka refused user '{name}' consumer group {settings.delivery_group_id} "
            "(GROUP_AUTHORIZATION_FAILED): grant READ on it (docs/operations.md, Secured "
            "clusters) or choose a group the ACLs allow with DIGEST_STREAM_DELIVERY_GROUP_ID"
        ) in log
        refusals = [line for line in log.splitlines() if "GROUP_AUTHORIZATION_FAILED" in line]
        assert len(refusals) <= 6, "\n".join(refusals)  # thinned: once per line kind per 30 s
        assert password not in log
    finally:
        service.stop()
        drop_scram_user(secure_names.stack, name)
