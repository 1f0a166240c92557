"""A real local stack without Docker: Apache Kafka (KRaft) from Maven Central, Redis from apt,
and (with --registry) Apicurio Registry from Maven Central as the Schema Registry.

`digest-stream dev up|down|env|status` is the one entry point. Everything it starts is
recorded in pid files under the stack directory, so `down` stops exactly those processes.
The parts live next to this module: `kafka` (the broker), `redis` (single node and cluster),
`registry` (the schema registry), `process` (pid files, waits, ports).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from digest_stream.dev.kafka import KAFKA_PORT, kafka_answers, kafka_down, kafka_launch, kafka_wait
from digest_stream.dev.process import HOST, StackError, say
from digest_stream.dev.redis import (
    CLUSTER_NODES,
    REDIS_PORT,
    cluster_running,
    cluster_up,
    redis_down,
    redis_ping,
    redis_up,
)
from digest_stream.dev.registry import (
    REGISTRY_URL,
    registry_down,
    registry_running,
    registry_up,
)
from digest_stream.dev.secure import (
    SECURE_ENV,
    secure_down,
    secure_exports,
    secure_kafka_launch,
    secure_kafka_ready,
    secure_redis_up,
    secure_running,
    secure_up_finish,
    stack_file,
)


@dataclass(frozen=True)
class Endpoints:
    """Addresses of the local stack, as exported by `dev env`."""

    kafka: str = f"{HOST}:{KAFKA_PORT}"
    redis_url: str = f"redis://{HOST}:{REDIS_PORT}/0"
    cluster_nodes: tuple[str, ...] = CLUSTER_NODES
    registry_url: str = REGISTRY_URL

    def exports(self, cluster: bool, registry: bool = False, secure: bool = False) -> list[str]:
        """Shell export lines for the settings (and the test harness)."""
        lines = [
            f"export DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS={self.kafka}",
            f"export DIGEST_STREAM_REDIS_URL={self.redis_url}",
        ]
        if cluster:
            lines.append(f"export DIGEST_STREAM_REDIS_CLUSTER_NODES={','.join(self.cluster_nodes)}")
        if registry:
            # Not DIGEST_STREAM_SCHEMA_REGISTRY_URL: that would switch every command of the
            # shell (and every test) to schema registry mode. Opt in with
            # DIGEST_STREAM_SCHEMA_REGISTRY_URL=$DIGEST_STREAM_DEV_SCHEMA_REGISTRY_URL.
            lines.append(f"export {REGISTRY_ENV}={self.registry_url}")
        if secure:
            # The secured stack's addresses and passwords stay in its stack.json (mode 600):
            # the tests read it; `dev env --secure` prints the settings for a shell.
            lines.append(f"export {SECURE_ENV}={stack_file()}")
        return lines


#: The local registry's URL, for the test harness and for opting in by hand.
REGISTRY_ENV = "DIGEST_STREAM_DEV_SCHEMA_REGISTRY_URL"


def up(
    cluster: bool = False, kafka: bool = True, registry: bool = False, secure: bool = False
) -> Endpoints:
    """Bring the stack up (idempotent) and return its endpoints.

    secure: also the secured broker and TLS Redis (dev/secure.py); the two brokers start side
    by side.
    """
    started = time.monotonic()
    redis_up()
    if cluster:
        cluster_up()
    # Both brokers format and start in the background; the rest is done while they do.
    if secure:
        secure_kafka_launch()
    if kafka:
        kafka_launch()
    if secure:
        secure_redis_up()
    if kafka:
        kafka_wait()
    if secure:
        secure_kafka_ready()
        secure_up_finish()
    if registry:
        registry_up()
    say(f"stack up in {time.monotonic() - started:.1f}s")
    return Endpoints()


def down() -> None:
    """Stop exactly what `up` started."""
    registry_down()
    secure_down()
    kafka_down()
    redis_down()
    say("stack down")


def status() -> dict[str, bool]:
    """Which parts of the stack answer right now."""
    return {
        "kafka": kafka_answers(),
        "redis": redis_ping(REDIS_PORT),
        "redis-cluster": cluster_running(),
        "schema-registry": registry_running(),
        "secured": secure_running(),
    }


__all__ = [
    "REGISTRY_ENV",
    "SECURE_ENV",
    "Endpoints",
    "StackError",
    "cluster_running",
    "down",
    "registry_running",
    "secure_exports",
    "secure_running",
    "status",
    "up",
]
