"""Operator actions: delete a timeline, and replay a partition from an offset (recovery drills)."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from digest_stream.kafka import admin_config
from digest_stream.settings import Settings
from digest_stream.store.base import DigestStore, TimelineInfo
from digest_stream.vocabulary import State

# Admin requests are small; past this the broker is not answering.
ADMIN_TIMEOUT = 30.0


class AdminError(Exception):
    """An admin action refused, with a message for the operator."""


def find_timeline(
    store: DigestStore, partitions: list[int], timeline: str
) -> dict[int, TimelineInfo]:
    """The timeline's state in each input partition holding any (normally at most one)."""
    found = {}
    for partition in partitions:
        info = store.inspect(partition, timeline)
        if (
            info.state != State.ABSENT
            or info.pending
            or info.open_digest is not None
            or info.snoozed_until is not None
        ):
            found[partition] = info
    return found


@dataclass(frozen=True)
class ReplayPlan:
    """What `replay` will change, for the confirmation prompt."""

    group: str
    topic: str
    partition: int
    offset: int
    fence: int | None  # current
    committed: int | None  # current
    low: int
    high: int

    def describe(self) -> str:
        """One paragraph for the operator."""
        new_fence = "none" if self.offset == 0 else str(self.offset - 1)
        fence = "none" if self.fence is None else str(self.fence)
        committed = "none" if self.committed is None else str(self.committed)
        return (
            f"replay {self.topic}[{self.partition}] from offset {self.offset} "
            f"(retained {self.low}..{self.high}):\n"
            f"  store fence      {fence} -> {new_fence}\n"
            f"  committed offset {committed} -> {self.offset} (group {self.group})\n"
            "  records from that offset are applied again; digests already delivered for them "
            "go out again under new ids"
        )


def plan_replay(settings: Settings, partition: int, offset: int, store: DigestStore) -> ReplayPlan:
    """Check that the replay is possible (group inactive, offset retained) and describe it."""
    topic, group = settings.events_topic, settings.group_id
    admin = AdminClient(admin_config(settings))
    meta = admin.list_topics(topic, timeout=ADMIN_TIMEOUT).topics.get(topic)
    if meta is None or meta.error is not None or partition not in meta.partitions:
        raise AdminError(f"{topic} has no partition {partition}")
    ensure_group_inactive(admin, group)
    probe = Consumer(admin_config(settings) | {"group.id": group, "enable.auto.commit": False})
    try:
        low, high = probe.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=ADMIN_TIMEOUT
        )
        committed = probe.committed([TopicPartition(topic, partition)], timeout=ADMIN_TIMEOUT)
    finally:
        probe.close()
    if not low <= offset <= high:
        raise AdminError(
            f"offset {offset} is outside what {topic}[{partition}] retains ({low}..{high})"
        )
    found = committed[0].offset if committed and committed[0].offset >= 0 else None
    return ReplayPlan(
        group, topic, partition, offset, store.applied_offset(partition), found, low, high
    )


def ensure_group_inactive(admin: AdminClient, group: str) -> None:
    """Raise AdminError unless the consumer group has no members."""
    try:
        description = admin.describe_consumer_groups([group])[group].result(timeout=ADMIN_TIMEOUT)
    except KafkaException as exc:
        raise AdminError(f"cannot describe consumer group {group}: {exc}") from exc
    if description.members or description.state not in (
        ConsumerGroupState.EMPTY,
        ConsumerGroupState.DEAD,
        ConsumerGroupState.UNKNOWN,
    ):
        raise AdminError(
            f"consumer group {group} is active ({len(description.members)} members, state "
            f"{description.state.name}): stop every ingest instance first, then replay"
        )


def apply_replay(settings: Settings, plan: ReplayPlan, store: DigestStore) -> None:
    """Reset the store's fence, then the group's committed offset (the group must be idle)."""
    admin = AdminClient(admin_config(settings))
    ensure_group_inactive(admin, plan.group)  # again: it may have started since the prompt
    # Fence first: were the commit to fail, the next start still replays (fence < committed).
    store.set_applied_offset(plan.partition, plan.offset - 1 if plan.offset > 0 else None)
    request = ConsumerGroupTopicPartitions(
        plan.group, [TopicPartition(plan.topic, plan.partition, plan.offset)]
    )
    try:
        result = admin.alter_consumer_group_offsets([request])[plan.group].result(
            timeout=ADMIN_TIMEOUT
        )
    except KafkaException as exc:
        raise AdminError(f"the fence was reset but the group offset was not: {exc}") from exc
    for tp in result.topic_partitions or []:
        if tp.error is not None:
            raise AdminError(f"the fence was reset but the group offset was not: {tp.error}")
