"""A real local stack without Docker: Apache Kafka (KRaft) from Maven Central, the chosen
store backend's servers, and (with --registry) Apicurio Registry from Maven Central as the
Schema Registry.

`digest-stream dev up|down|env|status` is the one entry point. Everything it starts is
recorded in pid files under the stack directory, so `down` stops exactly those processes.
The parts live next to this module: `kafka` (the broker), the store's part (`parts`: the
backend the `store` setting chooses names its module, `redis` for Redis: single node and
cluster), `registry` (the schema registry), `process` (pid files, waits, ports).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from digest_stream.dev.kafka import KAFKA_PORT, kafka_answers, kafka_down, kafka_launch, kafka_wait
from digest_stream.dev.parts import DevPart, chosen_part, every_part
from digest_stream.dev.process import HOST, StackError, say
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
    secure_running,
    secure_store_up,
    secure_up_finish,
    stack_file,
)


@dataclass(frozen=True)
class Endpoints:
    """Addresses of the local stack, as exported by `dev env`."""

    kafka: str = f"{HOST}:{KAFKA_PORT}"
    #: The chosen store's part, which writes its own exports.
    store: DevPart = field(default_factory=chosen_part)
    registry_url: str = REGISTRY_URL

    def exports(self, cluster: bool, registry: bool = False, secure: bool = False) -> list[str]:
        """Shell export lines for the settings (and the test harness)."""
        lines = [
            f"export DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS={self.kafka}",
            *self.store.exports(cluster),
        ]
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

    secure: also the secured broker and store (dev/secure.py); the two brokers start side
    by side.
    """
    started = time.monotonic()
    store = chosen_part()
    store.up(cluster)
    # Both brokers format and start in the background; the rest is done while they do.
    if secure:
        secure_kafka_launch()
    if kafka:
        kafka_launch()
    if secure:
        secure_store_up()
    if kafka:
        kafka_wait()
    if secure:
        secure_kafka_ready()
        secure_up_finish()
    if registry:
        registry_up()
    say(f"stack up in {time.monotonic() - started:.1f}s")
    return Endpoints(store=store)


def down() -> None:
    """Stop exactly what `up` started (every backend's part: the setting may have changed)."""
    registry_down()
    secure_down()
    kafka_down()
    for part in every_part():
        part.down()
    say("stack down")


def status() -> dict[str, bool]:
    """Which parts of the stack answer right now."""
    return {
        "kafka": kafka_answers(),
        **chosen_part().status(),
        "schema-registry": registry_running(),
        "secured": secure_running(),
    }


def ready(states: Mapping[str, bool]) -> bool:
    """Whether the stack `status` found can serve: the broker and the chosen store."""
    return states["kafka"] and chosen_part().ready(states)


__all__ = [
    "REGISTRY_ENV",
    "SECURE_ENV",
    "Endpoints",
    "StackError",
    "down",
    "ready",
    "registry_running",
    "secure_exports",
    "secure_running",
    "status",
    "up",
]
