"""The ingest's collaborators, built and wired in one place (the Ingest role only runs them)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from digest_stream.clock import Clock
from digest_stream.kafka import admin_config
from digest_stream.ops.hooks import NO_HOOKS, Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.ingest.applier import Applier
from digest_stream.roles.ingest.check import OutputRoom, Rules
from digest_stream.roles.ingest.leading import LeadingEdge
from digest_stream.roles.ingest.ledger import Ledger
from digest_stream.roles.ingest.moved import MovedTimelines
from digest_stream.roles.ingest.outputs import Outputs
from digest_stream.roles.ingest.placement import PlacementCheck
from digest_stream.roles.ingest.schemas import SchemaFetcher
from digest_stream.roles.ingest.starts import Starts
from digest_stream.roles.ingest.topic import BrokerTopic, TopicProbe
from digest_stream.roles.ingest.worker import StoreWorker
from digest_stream.roles.publish import DigestPublisher
from digest_stream.roles.runner import Runner
from digest_stream.roles.scheduler import Scheduler
from digest_stream.settings import MESSAGE_OVERHEAD_BYTES, Settings
from digest_stream.store.base import DigestStore
from digest_stream.wire import codec, formats, registry
from digest_stream.wire.partitioner import partition_for


@dataclass(frozen=True, slots=True)
class IngestParts:
    """What one Ingest runs: each piece built once, sharing the ledger and the outputs."""

    clock: Clock
    rules: Rules
    outputs: Outputs
    ledger: Ledger
    topics: TopicProbe  # which incarnation of the events topic the offsets belong to
    placement: PlacementCheck
    applier: Applier
    schemas: SchemaFetcher | None  # registry mode only
    starts: Starts
    moved: MovedTimelines
    worker: StoreWorker
    leading: LeadingEdge | None  # the leading edge, when a publisher is handed in


def output_room(settings: Settings) -> OutputRoom:
    """What one event may take in a digest record of the output format (``check``'s rule)."""
    # Unframed: a registry's 5-byte prefix is the digest's own, in MESSAGE_OVERHEAD_BYTES.
    output = formats.choose(settings.output_format)
    room = settings.max_message_bytes - MESSAGE_OVERHEAD_BYTES
    return OutputRoom(output.name, room, output.surely_fits(room), output.event_size)


def ingest_parts(
    settings: Settings,
    store: DigestStore,
    clock: Clock,
    metrics: Metrics,
    producer: Producer,
    scheduler: Scheduler,
    runner: Runner,
    *,
    hooks: Hooks = NO_HOOKS,
    topics: TopicProbe | None = None,
    publisher: DigestPublisher | None = None,
) -> IngestParts:
    """Build the ingest's pieces for ``settings`` over one store, producer and runner."""
    writer_schemas = registry.writer_schemas(
        settings.schema_registry_url, settings.schema_registry_config, codec.EVENT_SCHEMA
    )
    rules = Rules(
        settings.max_event_bytes,
        settings.max_event_age,
        frozenset(settings.carry_headers),
        writer_schemas,
        output_room(settings),
    )
    # One emitter per process: the scheduler's.
    outputs = Outputs(producer, scheduler.emitter, settings.dlq_topic, metrics, hooks)
    ledger = Ledger()
    topics = topics or BrokerTopic(AdminClient(admin_config(settings)), settings.events_topic)
    applier = Applier(
        store,
        settings.on_state_loss,
        metrics,
        runner,
        ledger,
        outputs,
        topics,
        # After a rollback or loss of the store's state: re-announce the partition's READY ones.
        restored=scheduler.take_over,
        now=clock.now,
    )
    schemas = None
    if writer_schemas is not None:
        schemas = SchemaFetcher(
            writer_schemas, runner, metrics.schema_registry_errors, applier.seek
        )
    leading = None
    if publisher is not None:  # the leading edge: App hands in the one publisher
        leading = LeadingEdge(
            store, publisher, producer, scheduler.emitter, metrics, hooks, clock, ledger.owns
        )
        outputs.opened = leading.queue
    return IngestParts(
        clock=clock,
        rules=rules,
        outputs=outputs,
        ledger=ledger,
        topics=topics,
        placement=PlacementCheck(
            settings.partitioner, topics, metrics.events_mispartitioned, settings.events_topic
        ),
        applier=applier,
        schemas=schemas,
        starts=Starts(store, settings.on_state_loss, runner, ledger, applier, topics),
        moved=MovedTimelines(
            store,
            metrics,
            settings.events_topic,
            _longest_maximum_delay(settings),
            functools.partial(partition_for, settings.partitioner),
        ),
        worker=StoreWorker(applier.timed_add),
        leading=leading,
    )


def _longest_maximum_delay(settings: Settings) -> float:
    """The longest maximum_delay of any timeline: the default's or an override's."""
    overrides = (settings.policy_for(pattern) for pattern in settings.overrides)
    return max(policy.maximum_delay for policy in (settings.policy(), *overrides))
