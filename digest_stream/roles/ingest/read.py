"""Read: the ingest role takes batches from Kafka and hands each on, check -> apply -> lead ->
commit (one store call per partition batch).

Offsets are committed only after the store call that applied them succeeded. The store's fence
(last applied offset per partition) makes replays harmless, and lets this process notice when
the store lost writes (see fence.py). Two batches overlap: while the store worker runs one batch's
store calls, this thread takes and checks the next. Everything else (booking, rewinds, commits,
scheduler ticks, rebalance handlers) stays on the role's thread and waits for the batch in flight
first, so the commit discipline is exactly that of one batch at a time.

- ``Ingest``: the role; it builds each room's objects and runs them;
- ``Starts``: where each partition is read from: at assignment (its commit and its fence), and
  when the consumer went back by itself (a batch not to store).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from confluent_kafka import OFFSET_INVALID, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from digest_stream.clock import Clock
from digest_stream.kafka import ClientErrors, admin_config
from digest_stream.ops.hooks import NO_HOOKS, Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.ingest import fence
from digest_stream.roles.ingest.apply import Applier, Batch
from digest_stream.roles.ingest.check import (
    Checker,
    PlacementCheck,
    Rules,
    SchemaFetcher,
    output_room,
)
from digest_stream.roles.ingest.commit import FLUSH_TIMEOUT, Commits, DeadLetterLane, Ledger
from digest_stream.roles.ingest.fence import FenceActions
from digest_stream.roles.ingest.lead import LeadingEdge
from digest_stream.roles.ingest.topic import BrokerTopic, MovedTimelines, TopicProbe
from digest_stream.roles.ingest.urgent import urgent_rules
from digest_stream.roles.publish import DigestPublisher
from digest_stream.roles.runner import Runner
from digest_stream.roles.scheduler import ScheduleEmitter, Scheduler
from digest_stream.settings import Settings
from digest_stream.store.base import DigestStore
from digest_stream.store.errors import BackendError, unavailable
from digest_stream.wire import codec, registry
from digest_stream.wire.partitioner import partition_for

log = logging.getLogger(__name__)


class Ingest:
    """The ingest role (run by a Runner); also drives the scheduler for the partitions it owns."""

    def __init__(
        self,
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
    ) -> None:
        self._settings = settings
        self._scheduler = scheduler
        self._runner = runner
        # Read: which incarnation of the events topic the offsets belong to, and its growth.
        self._topics = topics or BrokerTopic(
            AdminClient(admin_config(settings)), settings.events_topic
        )
        self._moved = MovedTimelines(
            store, metrics, settings.events_topic, _longest_maximum_delay(settings),
            functools.partial(partition_for, settings.partitioner),
        )  # fmt: skip
        # Commit: the ledger every room books into, the dead letters a commit waits for.
        self._ledger = ledger = Ledger()
        self._dead_letters = DeadLetterLane(producer, settings.dlq_topic, metrics, hooks)
        self._commits = Commits(runner, ledger, self._dead_letters)
        # Apply: after a rollback or loss of the store's state, re-announce the partition's
        # READY timelines.
        actions = FenceActions(
            store, metrics, runner, ledger, self._commits, self._topics, scheduler.take_over
        )
        self._starts = Starts(store, settings.on_state_loss, runner, ledger, actions, self._topics)
        # Lead: App hands in the one publisher when the leading edge is on.
        self._lead = None
        if publisher is not None:
            self._lead = LeadingEdge(
                store, publisher, producer, scheduler.emitter, metrics, hooks, clock, ledger.owns
            )
        self._apply = Applier(
            store, settings.on_state_loss, metrics, runner, ledger, actions, self._topics,
            scheduler.emitter, hooks, clock.now, self._starts.went_back,
            None if self._lead is None else self._lead.queue,
        )  # fmt: skip
        # Check: registry mode fetches the writer schemas a batch names first.
        writer_schemas = registry.writer_schemas(
            settings.schema_registry_url, settings.schema_registry_config, codec.EVENT_SCHEMA
        )
        schemas = None
        if writer_schemas is not None:
            schemas = SchemaFetcher(
                writer_schemas, runner, metrics.schema_registry_errors, self._commits.seek
            )
        rules = Rules(
            settings.max_event_bytes, settings.max_event_age, frozenset(settings.carry_headers),
            writer_schemas, output_room(settings), urgent_rules(settings),
        )  # fmt: skip
        placement = PlacementCheck(
            settings.partitioner, self._topics, metrics.events_mispartitioned, settings.events_topic
        )
        self._check = Checker(
            rules, placement, self._dead_letters, metrics.events_dropped, ledger, schemas,
            clock.now,
        )  # fmt: skip
        self._done: list[Batch] = []  # stored, not booked yet (kept by a rebalance handler)

    # ------------------------------------------------------------------ lifecycle

    @property
    def owned(self) -> frozenset[int]:
        """Input partitions this instance owns right now."""
        return self._ledger.owned

    @property
    def leading_in_flight(self) -> int:
        """Leading-edge digests produced and not closed yet (0 when that path is off)."""
        return 0 if self._lead is None else self._lead.in_flight

    def step(self) -> int:
        """Take and check a batch while the previous one is stored; book, commit, tick."""
        # With a batch in flight, take only what is already fetched: waiting here would
        # delay booking (and the immediate digests) of the batch in flight.
        timeout = 0.0 if self._apply.busy else self._settings.batch_timeout
        messages = self._runner.take(timeout)
        # From here on, a partition whose read position moves (a seek, an assignment) makes
        # its part of this batch stale. Handlers inside take never seek, and an assignment
        # there comes before the messages it returned.
        self._ledger.new_batch()
        batches = self._check.batches(messages) if messages else []
        applied = self._finish()
        if self._scheduler.due():
            if self._lead is not None and self._scheduler.taking_over:
                # The take-over announces every READY timeline, those of this process's
                # open leading digests too: publish and close those first (the worker is
                # idle), or delivery would publish them again (after an outage, a fence
                # decision, an assignment).
                self._lead.finish(wait=FLUSH_TIMEOUT)
            self._scheduler.tick(self._ledger.owned)
        for batch in batches:  # the worker is idle here: its store calls and these don't mix
            self._moved.check(batch.partition, batch.records)
        self._apply.submit(batches)
        if self._lead is not None:
            # While the store runs that add: build and produce what the last one opened, and
            # close what the broker acknowledged.
            self._lead.finish()
        return applied

    def close(self) -> None:
        """Graceful stop: finish the batch in flight, commit, flush (the runner then leaves)."""
        self._finish(sync=True)
        self._apply.shutdown()
        self._dead_letters.flush()
        if self._lead is not None:
            self._lead.finish(wait=FLUSH_TIMEOUT)
            self._lead.close()

    # ------------------------------------------------------------------ batches

    def _finish(self, *, in_handler: bool = False, sync: bool = False) -> int:
        """Wait for the batch in flight, book its results and commit; returns records added.

        Inside a rebalance handler nothing may poll or seek, so a partition whose call failed
        or found its fence behind is kept for the role thread's next _finish.
        """
        batches, self._done = self._done + self._apply.collect(), []
        applied = 0
        for batch in batches:
            if not self._ledger.owns(batch.partition):
                continue  # revoked or lost: whoever owns it reads the batch again
            if in_handler and not self._apply.bookable(batch):
                self._done.append(batch)
                continue
            added = self._apply.apply(batch)
            if added is not None:
                applied += added
        if not in_handler:
            self._commits.commit(None, sync=sync)
        return applied

    # ------------------------------------------------------------------ rebalancing

    def on_assign(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Assignment handler: each partition starts where its fence and commit say."""
        starts = self._starts.assigned(partitions)
        # A growth of the events topic triggers this rebalance; the probe just read the count.
        self._moved.counted(self._topics.partitions)
        self._scheduler.take_over(tp.partition for tp in starts)
        log.info("assigned %s", ", ".join(f"{tp.partition}@{tp.offset}" for tp in starts))
        return starts

    def on_revoke(self, partitions: list[int]) -> None:
        """Revocation handler: book the batch in flight, commit these partitions, let go."""
        revoked = set(partitions)
        self._finish(in_handler=True)
        if self._lead is not None:
            # What was acknowledged is closed by id (safe whoever owns it next); no retries
            # in a handler, and the rest is closed, or handed over, when its report comes.
            self._lead.finish(retry=False)
        self._commits.commit(revoked, sync=True, in_handler=True)
        self._release(revoked)
        log.info("revoked %s", ", ".join(str(p) for p in sorted(revoked)))

    def on_lost(self, partitions: list[int]) -> None:
        """Loss handler: another member may already own them, so commit nothing."""
        lost = set(partitions)
        self._release(lost)
        self._finish(in_handler=True)  # no store call of ours may still be running for them
        log.warning("lost %s", ", ".join(str(p) for p in sorted(lost)))

    def _release(self, partitions: set[int]) -> None:
        self._ledger.release(partitions)
        self._scheduler.release(partitions)
        # A batch kept for the role's thread is read again by whoever owns it next (us too,
        # if it comes back in the same rebalance: from the fence and committed offset).
        self._done = [batch for batch in self._done if batch.partition not in partitions]


class Starts:
    """Start positions of assigned partitions, and the check when the consumer went back."""

    def __init__(
        self,
        store: DigestStore,
        on_state_loss: fence.StateLoss,
        runner: Runner,
        ledger: Ledger,
        actions: fence.FenceActions,
        topics: TopicProbe,
    ) -> None:
        self._store = store
        self._on_state_loss = on_state_loss
        self._runner = runner
        self._ledger = ledger
        self._actions = actions
        self._topics = topics

    def assigned(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Own these partitions; returns where each starts."""
        starts = []
        # One bounded round trip for the topic id and every partition's end (topic.py).
        ends = self._topics.refresh([tp.partition for tp in partitions])
        for tp in self._runner.committed(partitions):
            decision = self._starting(tp.partition, tp.offset, ends.get(tp.partition))
            offset = self._act_at_start(tp.partition, decision)
            if offset == OFFSET_INVALID and tp.error is None:
                # No commit (just read): where auto.offset.reset would start, said at once.
                offset = self._runner.reset_start
            starts.append(TopicPartition(tp.topic, tp.partition, offset))
        return starts

    def _starting(self, partition: int, committed: int, end: int | None) -> fence.Decision:
        try:
            found = self._store.fence(partition)
        except BackendError as exc:  # the first add checks the fence instead
            if not unavailable(exc):
                raise
            log.error(
                "partition %d: %s unreachable at assignment (%s)", partition, exc.backend, exc
            )
            return fence.start_without_store(committed)
        return fence.start(
            partition,
            committed,
            found.offset,
            self._on_state_loss,
            store=self._store.label,
            fence_topic=found.topic_id,
            topic=self._topics.topic,
            end=end,
        )

    def _act_at_start(self, partition: int, decision: fence.Decision) -> int:
        """Own the partition as decided; returns where to start reading it."""
        assert decision.offset is not None  # a start always names where to read
        self._ledger.assign(partition, decision.offset, decision.expected)
        self._actions.note(decision)
        if decision.reset:
            self._actions.reset_fence(partition, decision.expected, retry=False)
        return decision.offset

    def went_back(self, batch: Batch) -> bool:
        """The consumer reset its position by itself: is this still the topic of the fence?

        librdkafka resets a position past the partition's end (the topic was recreated, the
        log truncated) to auto.offset.reset, silently. Ask the broker for the topic id (a new
        one: the fence left is the old topic's; the store compares it too) and the partition's
        end (a fence past it is an offset reset). False when the batch is dropped (the
        decision seeks).
        """
        partition = batch.partition
        log.warning(
            "partition %d: the consumer went back to offset %d by itself (offset reset); "
            "checking the topic",
            partition,
            batch.first,
        )
        end = self._topics.refresh([partition]).get(partition)
        decision = fence.foreign(
            partition,
            self._on_state_loss,
            fence=self._ledger.expected(partition),
            fence_topic=self._ledger.topic(partition),
            topic=self._topics.topic,
            end=end,
            resume_at=None,
        )
        if decision is None:
            return True
        if decision.wait:
            # The batch goes to the store under the id last seen: a fence naming another is
            # refused there, and the applier waits for the broker (nothing reset on a guess).
            self._actions.note(decision)
            return True
        self._actions.act(partition, decision)
        return decision.apply_now


def ingest_role(
    settings: Settings,
    store: DigestStore,
    clock: Clock,
    metrics: Metrics,
    producer: Producer,
    *,
    hooks: Hooks = NO_HOOKS,
    frame: Callable[[bytes], bytes] | None = None,
    consumer: Consumer | None = None,
    topics: TopicProbe | None = None,
    publisher: DigestPublisher | None = None,
    kafka_errors: ClientErrors | None = None,
) -> tuple[Runner, Ingest]:
    """The ingest role with its scheduler (announcing through ``frame``), and its runner;
    ``publisher``: the leading edge is on and publishes through it."""
    emitter = ScheduleEmitter(producer, settings.schedule_topic, metrics, hooks=hooks, frame=frame)
    scheduler = Scheduler(settings, store, emitter, clock, metrics)
    runner = Runner(
        settings, "ingest", consumer=consumer, rebalances=metrics.rebalances, errors=kafka_errors
    )
    ingest = Ingest(
        settings, store, clock, metrics, producer, scheduler, runner,
        hooks=hooks, topics=topics, publisher=publisher,
    )  # fmt: skip
    return runner, ingest


def _longest_maximum_delay(settings: Settings) -> float:
    """The longest maximum_delay of any timeline: the default's or an override's."""
    overrides = (settings.policy_for(pattern) for pattern in settings.overrides)
    return max(policy.maximum_delay for policy in (settings.policy(), *overrides))
