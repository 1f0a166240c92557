"""Scheduler role: per owned input partition, move due timelines to READY and announce them.

An announcement (a ScheduleEntry on the schedule topic) is the only thing that makes delivery
open a READY timeline, so none may be lost: one the broker refuses or times out is produced
again, a full producer queue is waited out, and a partition this instance takes over has every
READY timeline announced again at its first tick (the previous owner may have died between
making them READY and the broker acknowledging their entries). Delivery's same-id reopen makes
the repeats harmless.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, Message, Producer

from digest_stream.clock import Clock
from digest_stream.kafka import produce_waiting_for_room
from digest_stream.ops.hooks import NO_HOOKS, Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.settings import Settings
from digest_stream.store import backend_of
from digest_stream.store.base import DigestStore
from digest_stream.store.errors import BackendError, unavailable
from digest_stream.wire.models import ScheduleReason
from digest_stream.wire.schedule_fields import encode_schedule_fields

log = logging.getLogger(__name__)


class ScheduleEmitter:
    """Publishes ScheduleEntries (keyed by timeline) to the schedule topic, never dropping one."""

    def __init__(
        self,
        producer: Producer,
        topic: str,
        metrics: Metrics,
        *,
        hooks: Hooks = NO_HOOKS,
        frame: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self._producer = producer
        # Schema registry mode: the registered schema's prefix (wire.registry.output_frame).
        self._frame = frame
        self._topic = topic
        self._metrics = metrics
        self._hooks = hooks
        # (key, value) of entries the broker refused or timed out: produced again.
        self._refused: list[tuple[bytes, bytes]] = []

    def emit(
        self, partition: int, timelines: Iterable[tuple[str, float]], reason: ScheduleReason
    ) -> int:
        """Announce (timeline, due-or-ready time) pairs of one input partition."""
        self.retry_refused()
        count = 0
        announced: list[str] | None = [] if self._hooks.wants_ready else None
        for timeline, at in timelines:
            value = encode_schedule_fields(timeline, partition, int(at * 1000), reason)
            self._produce(timeline.encode(), self._frame(value) if self._frame else value)
            count += 1
            if announced is not None:
                announced.append(timeline)
        if count:
            self._metrics.schedule_entries.labels(reason=reason.value).inc(count)
            if announced:
                self._hooks.on_ready(partition, announced, reason.value)
            self._producer.poll(0)  # serve delivery reports without blocking
        return count

    def retry_refused(self) -> int:
        """Produce again every entry the broker refused since the last call."""
        refused, self._refused = self._refused, []
        for key, value in refused:
            self._produce(key, value)
        if refused:
            self._metrics.schedule_retries.inc(len(refused))
            log.warning("producing %d refused schedule entries again", len(refused))
        return len(refused)

    def _produce(self, key: bytes, value: bytes) -> None:
        waits = produce_waiting_for_room(
            self._producer, self._topic, key, value, on_delivery=self._on_delivery
        )
        if waits:
            self._metrics.producer_queue_full.labels(role="scheduler").inc()

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            return
        log.error("schedule entry for %r refused (%s); it is produced again", message.key(), error)
        self._refused.append((message.key() or b"", message.value() or b""))


class Scheduler:
    """Runs schedule ticks (and, less often, maintenance) for the partitions this instance owns."""

    def __init__(
        self,
        settings: Settings,
        store: DigestStore,
        emitter: ScheduleEmitter,
        clock: Clock,
        metrics: Metrics,
        *,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._store = store
        self.emitter = emitter
        self._clock = clock  # wall time: due times are shared with other hosts through the store
        # Intervals run on a monotonic timer: a wall-clock step backwards must not stop ticks
        # for its size, nor a step forwards fire a burst of them.
        self._timer = timer
        self._metrics = metrics
        self._next_tick = 0.0
        self._next_maintenance = timer() + settings.maintenance_interval
        self._store_down = False
        # Partitions taken over whose READY timelines are announced again at the next tick.
        self._taken_over: set[int] = set()

    def due(self) -> bool:
        """Whether a tick is due now."""
        return self._timer() >= self._next_tick

    @property
    def taking_over(self) -> bool:
        """Whether the next tick takes partitions over (reclaims their leading digests)."""
        return bool(self._taken_over)

    def take_over(self, partitions: Iterable[int]) -> None:
        """Newly owned partitions: announce all their READY timelines at the next tick (soon)."""
        self._taken_over.update(partitions)
        self._next_tick = 0.0

    def release(self, partitions: Iterable[int]) -> None:
        """Partitions no longer owned: forget a take-over not done yet."""
        self._taken_over.difference_update(partitions)

    def tick(self, partitions: Iterable[int]) -> int:
        """One schedule pass over the given partitions; returns entries emitted."""
        now = self._clock.now()
        started = self._timer()
        self._next_tick = started + self._settings.scheduler_interval
        maintain = started >= self._next_maintenance
        if maintain:
            self._next_maintenance = started + self._settings.maintenance_interval
        emitted = 0
        owned = sorted(partitions)
        try:
            self.emitter.retry_refused()
            for partition in owned:
                emitted += self._tick_partition(partition, now, maintain)
        except BackendError as exc:
            if not unavailable(exc):
                raise
            # The ingest side pauses and retries; a scheduler tick simply waits for the next one.
            self._metrics.store_errors.inc()
            if not self._store_down:
                log.error(
                    "scheduler: %s unavailable (%s); ticks resume when it answers", exc.backend, exc
                )
            self._store_down = True
            return emitted
        if self._store_down:
            # An outage may have been a restart from an older snapshot or a failover to a
            # lagging replica: READY timelines whose announcements were consumed since would
            # be stranded. Announce every READY timeline again (repeats are harmless).
            log.warning(
                "scheduler: %s reachable again; announcing READY timelines again",
                backend_of(self._settings).label,
            )
            self._store_down = False
            self.take_over(owned)
        return emitted

    def _tick_partition(self, partition: int, now: float, maintain: bool) -> int:
        """Maintenance (or a take-over), then the due timelines, each in bounded slices.

        Every store call moves at most one slice (DEFAULT_SLICE timelines), so none blocks
        the store for long; a backlog is drained slice by slice, each announced as it comes (the
        emitter waits for producer room). Maintenance is drained first: it only moves READY
        timelines, so each slice takes new ones, and schedule then makes them READY again.
        """
        recovered: set[str] = set()
        taken_over = partition in self._taken_over
        if maintain or taken_over:
            # Taken over: every READY timeline (the old owner's announcements may be lost);
            # otherwise those READY longer than maintenance_timeout (a delivery lost them).
            deadline = now + 1.0 if taken_over else now - self._settings.maintenance_timeout
            more = True
            while more:
                with self._metrics.store_latency.labels(operation="maintenance").time():
                    back = self._store.maintenance(partition, deadline, now)
                recovered.update(item.timeline for item in back)
                more = back.more
            self._taken_over.discard(partition)
            if recovered:
                log.log(
                    logging.INFO if taken_over else logging.WARNING,
                    "partition %d: %d READY timelines %s; announcing them again: %s",
                    partition,
                    len(recovered),
                    "taken over"
                    if taken_over
                    else f"not delivered within {self._settings.maintenance_timeout:.0f}s",
                    ", ".join(sorted(recovered)[:10]),
                )
        emitted = 0
        more = True
        while more:
            with self._metrics.store_latency.labels(operation="schedule").time():
                due = self._store.schedule(partition, now)
            more = due.more
            scheduled = [(d.timeline, d.due) for d in due if d.timeline not in recovered]
            again = [(d.timeline, d.due) for d in due if d.timeline in recovered]
            emitted += self.emitter.emit(partition, scheduled, ScheduleReason.SCHEDULED)
            emitted += self.emitter.emit(partition, again, ScheduleReason.RECOVERED)
        return emitted
