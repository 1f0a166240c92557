"""The secured local stack (SASL_SSL Kafka with ACLs, TLS Redis with ACL users) for tests.

`digest-stream dev up --secure` writes stack.json (addresses, users, passwords, the CA) and
`dev env` exports its path; these helpers turn it into settings, per-test Kafka and Redis
users, and real CLI runs as a user would make them.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import redis
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from digest_stream.dev.secure import SECURE_ENV
from digest_stream.ops.acls import Acl
from digest_stream.settings import Settings
from digest_stream.store.redis.acl import acl_rules
from tests.support import unique, wait_until
from tests.support.pipeline import FAST, settings_env

#: Why a secured test is skipped: only when the stack is absent (make test starts it).
ABSENT = (
    f"the secured stack is not running ({SECURE_ENV} unset): `make test` starts it, or "
    '`digest-stream dev up --secure && eval "$(digest-stream dev env)"`'
)


@dataclass(frozen=True)
class SecureStack:
    """stack.json of a running secured stack."""

    info: dict[str, Any]

    @classmethod
    def load(cls, path: str) -> SecureStack:
        """Read stack.json."""
        return cls(json.loads(Path(path).read_text()))

    @property
    def bootstrap(self) -> str:
        """The SASL_SSL listener."""
        return str(self.info["kafka_bootstrap_servers"])

    def kafka_config(self, user: str | None = None, password: str | None = None) -> dict[str, Any]:
        """librdkafka properties as the service's user (or another SCRAM user)."""
        config = dict(self.info["kafka_config"])
        if user is not None:
            config |= {"sasl.username": user, "sasl.password": password}
        return config

    def admin(self) -> AdminClient:
        """An admin client as the super user."""
        return AdminClient({"bootstrap.servers": self.bootstrap, **self.info["kafka_admin_config"]})

    def redis_admin(self) -> redis.Redis:
        """A Redis client as the admin user (over TLS)."""
        return redis.Redis.from_url(self.info["redis_admin_url"])

    def redis_url(self, user: str, password: str) -> str:
        """The rediss:// URL (CA as a URL parameter) as this user."""
        parts = urlsplit(self.info["redis_url"])
        netloc = f"{quote(user)}:{quote(password)}@{parts.hostname}:{parts.port}"
        return str(urlunsplit(parts._replace(netloc=netloc)))

    def passwords(self) -> list[str]:
        """Every secret of the stack (none may appear in output or logs)."""
        return [
            self.info["kafka_config"]["sasl.password"],
            self.info["kafka_admin_config"]["sasl.password"],
            *(urlsplit(self.info[k]).password or "" for k in ("redis_url", "redis_admin_url")),
        ]


def secure_stack_path() -> str | None:
    """The path of stack.json from the environment, or None (then the tests skip)."""
    return os.environ.get(SECURE_ENV) or None


@dataclass
class SecureNames:
    """One test's topics, groups, namespace and Redis user on the secured stack."""

    stack: SecureStack
    base: str = field(default_factory=lambda: unique("digests.sec"))
    namespace: str = field(default_factory=lambda: unique("s"))
    redis_user: str = field(default_factory=lambda: unique("ds-sec"))
    redis_password: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def topics(self) -> dict[str, str]:
        """events/schedule/output/dlq topic names (under the service user's topic prefix)."""
        return {kind: f"{self.base}.{kind}" for kind in ("events", "schedule", "output", "dlq")}

    def settings(self, **changes: Any) -> Settings:
        """The service's settings on these names, as the service's users, short delays."""
        topics = self.topics
        # Groups under the service user's group prefix ("digest-stream").
        suffix = self.base.rsplit("-", 1)[-1]
        values: dict[str, Any] = {
            **FAST,
            "kafka_bootstrap_servers": self.stack.bootstrap,
            "kafka_config": self.stack.kafka_config(),
            "redis_url": self.stack.redis_url(self.redis_user, self.redis_password),
            "redis_load_library": False,
            "namespace": self.namespace,
            "events_topic": topics["events"],
            "schedule_topic": topics["schedule"],
            "output_topic": topics["output"],
            "dlq_topic": topics["dlq"],
            "group_id": f"digest-stream-{suffix}",
            "delivery_group_id": f"digest-stream-{suffix}-delivery",
            **changes,
        }
        return Settings.model_validate(values)

    def create_redis_user(self) -> None:
        """The README's ACL user for this namespace, without FUNCTION LOAD (admin loads it)."""
        rules = acl_rules(self.namespace, load_library=False)
        with self.stack.redis_admin() as admin:
            admin.execute_command(
                "ACL", "SETUSER", self.redis_user, "on", f">{self.redis_password}", "resetkeys",
                *rules,
            )  # fmt: skip

    def create_topics(self, partitions: int = 2) -> None:
        """The four topics, as admin (tests of `topics create` make their own)."""
        admin = self.stack.admin()
        wanted = [NewTopic(t, num_partitions=partitions, replication_factor=1)
                  for t in self.topics.values()]  # fmt: skip
        for future in admin.create_topics(wanted, request_timeout=30).values():
            future.result(timeout=30)

    def cleanup(self) -> None:
        """Delete the topics, the namespace's keys and the Redis user."""
        admin = self.stack.admin()
        existing = admin.list_topics(timeout=10).topics
        mine = [t for t in self.topics.values() if t in existing]
        if mine:
            for future in admin.delete_topics(mine, request_timeout=30).values():
                with contextlib.suppress(Exception):
                    future.result(timeout=30)
        with self.stack.redis_admin() as client:
            for key in client.scan_iter(match=f"{{{self.namespace}:*", count=1000):
                client.delete(key)
            client.execute_command("ACL", "DELUSER", self.redis_user)


def scram_user(stack: SecureStack, name: str, password: str, acl_list: Sequence[Acl]) -> None:
    """A SCRAM-SHA-512 user with exactly these ACLs (made by the super user)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = stack.admin()
    upsert = UserScramCredentialUpsertion(
        name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    bindings = [
        AclBinding(
            ResourceType[acl.resource.upper()], acl.name,
            ResourcePatternType[acl.pattern.upper()], f"User:{name}", "*",
            AclOperation[op.upper()], AclPermissionType.ALLOW,
        )
        for acl in acl_list
        for op in acl.operations
    ]  # fmt: skip
    if bindings:
        for future in admin.create_acls(bindings).values():
            future.result(timeout=30)


def drop_scram_user(stack: SecureStack, name: str) -> None:
    """Remove the user's ACLs and credentials."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
        ScramMechanism,
        UserScramCredentialDeletion,
    )

    admin = stack.admin()
    anything: Any = None  # a filter's None matches any name or host (the stubs say str)
    every = AclBindingFilter(
        ResourceType.ANY, anything, ResourcePatternType.ANY, f"User:{name}", anything,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    for future in admin.delete_acls([every]).values():
        with contextlib.suppress(Exception):
            future.result(timeout=30)
    deletion = UserScramCredentialDeletion(name, ScramMechanism.SCRAM_SHA_512)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        with contextlib.suppress(Exception):
            future.result(timeout=30)


@dataclass(frozen=True)
class Ran:
    """What one command printed and its exit code."""

    returncode: int
    stdout: str
    stderr: str


def cli(settings: Settings, *args: str, **env: str) -> Ran:
    """One `digest-stream` command, configured by the environment only (as a user sets it).

    In this process through click's runner (a child process would add a second of start-up
    per command); the service itself runs as a child process (tests.support.pipeline).
    """
    from click.testing import CliRunner

    from digest_stream.cli import main

    result = CliRunner().invoke(main, list(args), env={**settings_env(settings), **env})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Ran(result.exit_code, result.stdout, result.stderr)


def wait_ready(port: int, timeout: float) -> None:
    """Until the service's /readyz answers 200."""
    from tests.support.http import probe

    def ready() -> bool:
        try:
            return probe(f"http://127.0.0.1:{port}/readyz")[0] == 200
        except OSError:
            return False

    wait_until(ready, timeout, f"/readyz 200 on port {port}", interval=0.2)
