"""The Kafka ACLs each role, command and client needs, declared once.

`digest-stream acls` prints them for the configured names (as kafka-acls.sh command lines or a
Strimzi KafkaUser), the secured local stack grants them to its service user, and the secured
e2e tests run the service under exactly these and under one fewer.

Kafka's implications keep the list short: Read and Write each imply Describe (metadata, list
offsets, committed offsets), and since Kafka 3.0 (KIP-679) an idempotent producer needs no
IdempotentWrite on the cluster once it may Write to some topic. There are no transactional ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

ResourceType = Literal["topic", "group"]
PatternType = Literal["literal", "prefixed"]

#: `tail`'s default consumer group is this prefix and 8 random hex digits (a fresh group per
#: run); a prefixed ACL on it lets `tail` run without --group.
TAIL_GROUP_PREFIX = "digest-stream-tail-"


@dataclass(frozen=True)
class Names:
    """The topic and group names the ACLs are for (settings' names, or prefixes of them)."""

    events: str
    schedule: str
    output: str
    dlq: str
    group: str
    delivery_group: str
    tail_group: str = TAIL_GROUP_PREFIX
    pattern: PatternType = "literal"


@dataclass(frozen=True, order=True)
class Acl:
    """One allow rule for the principal: operations on a resource (by name or prefix)."""

    resource: ResourceType
    name: str
    pattern: PatternType
    operations: tuple[str, ...]


@dataclass(frozen=True)
class Need:
    """What one role, command or client does on one resource, and why."""

    resource: ResourceType
    name: str
    operation: str
    why: str
    #: None: the pattern of the names (Names.pattern); tail's default group is a prefix.
    pattern: PatternType | None = None


def needs(names: Names) -> dict[str, list[Need]]:
    """Per role, command and client (the keys `acls --for` takes): the ACLs it needs."""
    ev, sched, out, dlq = names.events, names.schedule, names.output, names.dlq
    produce = [Need("topic", ev, "Write", "produces events (controls too)")]
    look_up = Need("topic", ev, "Describe", "reads the events topic's partition count")
    return {
        "ingest": [
            Need("topic", ev, "Read", "consumes events; describes the topic (id, offsets)"),
            Need("group", names.group, "Read", "joins the ingest's group, commits offsets"),
            Need("topic", sched, "Write", "announces schedule entries"),
            Need("topic", out, "Write", "publishes leading-edge digests"),
            Need("topic", dlq, "Write", "dead-letters bad events"),
        ],
        "delivery": [
            Need("topic", sched, "Read", "consumes schedule entries"),
            Need("group", names.delivery_group, "Read", "joins delivery's group, commits"),
            Need("topic", out, "Write", "publishes digests"),
            Need("topic", dlq, "Write", "dead-letters entries it cannot deliver"),
        ],
        "topics-create": [
            Need("topic", name, "Create", "creates the topic") for name in (ev, sched, out, dlq)
        ],
        "produce": produce,
        "flush-cancel": [look_up, *produce],
        "inspect-delete-stats": [look_up],
        "replay": [
            Need("topic", ev, "Read", "reads and resets the ingest's committed offset"),
            Need("group", names.group, "Read", "describes the group, alters its offset"),
        ],
        "tail": [
            Need("topic", out, "Read", "consumes digests"),
            Need(
                "group",
                names.tail_group,
                "Read",
                "its default group, <prefix><8 hex>",
                pattern="prefixed",
            ),
        ],
        "event-producer": produce,
        "digest-reader": [
            Need("topic", out, "Read", "consumes digests"),
            Need("group", "<the reader's group>", "Read", "the group it is given"),
        ],
    }


#: The roles of `digest-stream run` (`--roles all`, the default, is both).
RUN_ROLES = ("ingest", "delivery")


def acls(names: Names, uses: Iterable[str]) -> list[Acl]:
    """The ACLs for these uses (keys of needs()), merged per resource, sorted."""
    table = needs(names)
    merged: dict[tuple[ResourceType, str, PatternType], set[str]] = {}
    for use in uses:
        for need in table[use]:
            if need.name.startswith("<"):
                continue  # a name only the caller knows
            key = (need.resource, need.name, need.pattern or names.pattern)
            merged.setdefault(key, set()).add(need.operation)
    return sorted(
        Acl(resource, name, pattern, without_implied(ops))
        for (resource, name, pattern), ops in merged.items()
    )


def without_implied(operations: Iterable[str]) -> tuple[str, ...]:
    """Drop Describe where Read or Write grants it already."""
    ops = set(operations)
    if ops & {"Read", "Write"}:
        ops.discard("Describe")
    return tuple(sorted(ops))


def kafka_acls_lines(acl_list: Iterable[Acl], principal: str) -> list[str]:
    """`kafka-acls.sh --add` command lines, one per resource."""
    lines = []
    for acl in acl_list:
        ops = " ".join(f"--operation {op}" for op in acl.operations)
        pattern = " --resource-pattern-type prefixed" if acl.pattern == "prefixed" else ""
        lines.append(
            'kafka-acls.sh --bootstrap-server "$BOOTSTRAP" --command-config admin.properties '
            f"--add --allow-principal {principal} {ops} --{acl.resource} {acl.name}{pattern}"
        )
    return lines


def strimzi_kafkauser(acl_list: Iterable[Acl], user: str, cluster: str) -> str:
    """A Strimzi KafkaUser (SCRAM-SHA-512, simple authorization) granting these ACLs."""
    lines = [
        "apiVersion: kafka.strimzi.io/v1beta2",
        "kind: KafkaUser",
        "metadata:",
        f"  name: {user}",
        "  labels:",
        f"    strimzi.io/cluster: {cluster}",
        "spec:",
        "  authentication:",
        "    type: scram-sha-512",
        "  authorization:",
        "    type: simple",
        "    acls:",
    ]
    for acl in acl_list:
        lines += [
            "      - resource:",
            f"          type: {acl.resource}",
            f"          name: {acl.name}",
            # Strimzi spells the prefixed pattern "prefix".
            f"          patternType: {'prefix' if acl.pattern == 'prefixed' else 'literal'}",
            f"        operations: [{', '.join(acl.operations)}]",
            '        host: "*"',
        ]
    return "\n".join(lines) + "\n"
