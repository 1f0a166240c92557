"""Scheduler role: per owned input partition, move due timelines to READY and announce them."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import Producer

from digest_stream.clock import Clock
from digest_stream.ops.hooks import NO_HOOKS, Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.retry import REDIS_DOWN
from digest_stream.settings import Settings
from digest_stream.store.base import DigestStore
from digest_stream.wire import codec
from digest_stream.wire.models import ScheduleEntry, ScheduleReason

log = logging.getLogger(__name__)


class ScheduleEmitter:
    """Publishes ScheduleEntries (keyed by timeline) to the schedule topic."""

    def __init__(
        self, producer: Producer, topic: str, metrics: Metrics, *, hooks: Hooks = NO_HOOKS
    ) -> None:
        self._producer = producer
        self._topic = topic
        self._metrics = metrics
        self._hooks = hooks

    def emit(
        self, partition: int, timelines: Iterable[tuple[str, float]], reason: ScheduleReason
    ) -> int:
        """Announce (timeline, due-or-ready time) pairs of one input partition."""
        count = 0
        announced: list[str] | None = [] if self._hooks.wants_ready else None
        for timeline, at in timelines:
            entry = ScheduleEntry(
                timeline=timeline,
                partition=partition,
                scheduled_at=int(at * 1000),
                reason=reason,
            )
            self._producer.produce(
                self._topic, key=timeline.encode(), value=codec.encode_schedule_entry(entry)
            )
            count += 1
            if announced is not None:
                announced.append(timeline)
        if count:
            self._metrics.schedule_entries.labels(reason=reason.value).inc(count)
            if announced:
                self._hooks.on_ready(partition, announced, reason.value)
            self._producer.poll(0)  # serve delivery reports without blocking
        return count


class Scheduler:
    """Runs schedule ticks (and, less often, maintenance) for the partitions this instance owns."""

    def __init__(
        self,
        settings: Settings,
        store: DigestStore,
        emitter: ScheduleEmitter,
        clock: Clock,
        metrics: Metrics,
    ) -> None:
        self._settings = settings
        self._store = store
        self._emitter = emitter
        self._clock = clock
        self._metrics = metrics
        self._next_tick = 0.0
        self._next_maintenance = clock.now() + settings.maintenance_interval
        self._store_down = False

    def due(self) -> bool:
        """Whether a tick is due now."""
        return self._clock.now() >= self._next_tick

    def tick(self, partitions: Iterable[int]) -> int:
        """One schedule pass over the given partitions; returns entries emitted."""
        now = self._clock.now()
        self._next_tick = now + self._settings.scheduler_interval
        maintain = now >= self._next_maintenance
        if maintain:
            self._next_maintenance = now + self._settings.maintenance_interval
        emitted = 0
        try:
            for partition in sorted(partitions):
                emitted += self._tick_partition(partition, now, maintain)
        except REDIS_DOWN as exc:
            # The ingest side pauses and retries; a scheduler tick simply waits for the next one.
            self._metrics.redis_errors.inc()
            if not self._store_down:
                log.error("scheduler: Redis unreachable (%s); ticks resume when it is back", exc)
            self._store_down = True
            return emitted
        if self._store_down:
            log.info("scheduler: Redis reachable again")
            self._store_down = False
        return emitted

    def _tick_partition(self, partition: int, now: float, maintain: bool) -> int:
        recovered: set[str] = set()
        if maintain:
            deadline = now - self._settings.maintenance_timeout
            with self._metrics.store_latency.labels(operation="maintenance").time():
                back = self._store.maintenance(partition, deadline, now)
            recovered = {item.timeline for item in back}
            if recovered:
                log.warning(
                    "partition %d: %d READY timelines not delivered within %.0fs; rescheduling: %s",
                    partition,
                    len(recovered),
                    self._settings.maintenance_timeout,
                    ", ".join(sorted(recovered)[:10]),
                )
        with self._metrics.store_latency.labels(operation="schedule").time():
            due = self._store.schedule(partition, now)
        if not due:
            return 0
        scheduled = [(d.timeline, d.due) for d in due if d.timeline not in recovered]
        again = [(d.timeline, d.due) for d in due if d.timeline in recovered]
        emitted = self._emitter.emit(partition, scheduled, ScheduleReason.SCHEDULED)
        return emitted + self._emitter.emit(partition, again, ScheduleReason.RECOVERED)
