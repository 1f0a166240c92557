"""The leading edge, published by the ingest: a quiet timeline's first digest in one store
call and one produce.

The add that finds a timeline quiet (absent) opens its digest in the same call (``open_nonce``)
and returns it; this piece builds its messages with delivery's pure ``build`` and produces
them to the output topic under that stable id, then closes the digests the broker
acknowledged with one ``close_many`` at the next step (at the time taken before encoding,
as delivery does: the cool-down starts there and ``next_delivery_at`` names it). Until that
close the timeline is READY with its digest open, exactly as during a delivery, so every
failure falls back on the delivery path, which reopens the same id:

- a crash or a SIGKILL before the close: the next owner's take-over re-announces every READY
  timeline (``RECOVERED``), and delivery republishes the same digest;
- a publish the broker refuses or times out, or a part refused at once: announced here
  (``IMMEDIATE``), so delivery publishes it with its retries and dead letters;
- a partition revoked or lost meanwhile: an acknowledged digest is still closed (closing by
  id is idempotent: the new owner's reopen of it, if any, finds it gone and is stale; its
  close of it is a no-op), and a failed one is left to the new owner's take-over.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

import redis
from confluent_kafka import KafkaError, Message, Producer

from digest_stream.clock import Clock
from digest_stream.ops.hooks import Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.delivery.build import build
from digest_stream.roles.delivery.publish import Pending, produce_parts
from digest_stream.roles.delivery.report import Report
from digest_stream.roles.runner import Runner
from digest_stream.roles.scheduler import ScheduleEmitter
from digest_stream.settings import Settings
from digest_stream.store.base import DigestStore, DigestTarget, OpenDigest
from digest_stream.store.errors import unavailable
from digest_stream.wire.models import ScheduleReason
from digest_stream.wire.schedule_fields import ScheduleFields

log = logging.getLogger(__name__)


@dataclass
class _Flight:
    """One leading digest on its way out: its parts not acknowledged yet, and its close time."""

    item: Pending  # item.message is None: no schedule entry stands behind it
    closing_at: float
    waiting: int


class LeadingEdge:
    """Publishes the digests an add opened and closes them once acknowledged (role thread)."""

    def __init__(
        self,
        settings: Settings,
        store: DigestStore,
        producer: Producer,
        emitter: ScheduleEmitter,
        metrics: Metrics,
        hooks: Hooks,
        clock: Clock,
        runner: Runner,
        owns: Callable[[int], bool],
        frame: Callable[[bytes], bytes] = bytes,
    ) -> None:
        self._settings = settings
        self._store = store
        self._producer = producer
        self._emitter = emitter
        self._metrics = metrics
        self._hooks = hooks
        self._clock = clock
        self._runner = runner
        self._owns = owns
        self._frame = frame  # schema registry mode: the Digest schema's prefix
        self._policy = settings.resolver()
        self._report = Report(metrics, hooks, clock)  # delivery's metrics, logs and hooks
        self._flying: list[_Flight] = []

    @staticmethod
    def nonce() -> str:
        """A fresh nonce for one add call: its opened digests' ids start with it."""
        return os.urandom(12).hex()

    @property
    def in_flight(self) -> int:
        """Digests produced and not closed yet."""
        return len(self._flying)

    def publish(self, partition: int, opened: list[OpenDigest], added_at: float) -> None:
        """Build and produce the digests one add opened (``added_at``: the add's time)."""
        closing_at = self._clock.now()  # before encoding: next_delivery_at names the close
        whole = bool(self._hooks)
        for digest in opened:
            entry = ScheduleFields(
                digest.timeline, partition, int(added_at * 1000), ScheduleReason.IMMEDIATE
            )
            if digest.expired:
                self._report.expired(digest.timeline)
            built = build(
                entry,
                digest,
                self._policy(digest.timeline),
                now=closing_at,
                max_bytes=self._settings.max_message_bytes,
                whole=whole,
            )
            if built.unreadable:
                self._report.unreadable(digest.timeline, built.unreadable)
            item = Pending(None, entry, digest, built.values, built.whole, headers=built.headers)
            flight = _Flight(item, closing_at, len(built.values))
            if not built.values:
                self._report.empty(entry, digest)  # closed at the next settle: retired
            else:
                self._produce(flight)
            self._flying.append(flight)
        self._producer.poll(0)

    def settle(self, *, wait: float = 0.0, retry: bool = True) -> None:
        """Close what the broker acknowledged, hand what it refused to delivery.

        ``wait``: how long to wait for acknowledgements (0: take what came). ``retry``: wait
        out a Redis outage (serving the group); a rebalance handler may not poll, so there a
        failed close is left: the timeline stays READY and is re-announced by the take-over.
        """
        if not self._flying:
            return
        if wait > 0:
            self._producer.flush(wait)
        else:
            self._producer.poll(0)
        done = [f for f in self._flying if f.item.errors or f.waiting == 0]
        if not done:
            return
        self._flying = [f for f in self._flying if not (f.item.errors or f.waiting == 0)]
        failed = [f for f in done if f.item.errors]
        if failed:
            self._fall_back(failed)
        acked = [f for f in done if not f.item.errors]
        self._report.published([f.item for f in acked if f.item.parts])
        self._close(acked, retry=retry)

    def _produce(self, flight: _Flight) -> None:
        item = flight.item

        def on_delivery(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                item.errors.append(str(error))
            else:
                flight.waiting -= 1

        # A part refused at once (too large, say) lands in item.errors: delivery takes over.
        topic = self._settings.output_topic
        if produce_parts(self._producer, topic, item, self._frame, on_delivery):
            self._metrics.producer_queue_full.labels(role="ingest").inc()

    def _fall_back(self, failed: list[_Flight]) -> None:
        """Announce refused digests: delivery reopens the same id and publishes it with its
        retries (and dead letters). Partitions gone are left to their new owner's take-over."""
        self._metrics.publish_retries.inc(len(failed))
        now = self._clock.now()
        for flight in failed:
            entry = flight.item.entry
            log.warning(
                "digest %s of %s: publish failed (%s); handed to delivery",
                flight.item.digest.id, entry.timeline, flight.item.errors[0],
            )  # fmt: skip
            if self._owns(entry.partition):
                self._emitter.emit(entry.partition, [(entry.timeline, now)], entry.reason)

    def _close(self, flights: list[_Flight], *, retry: bool) -> None:
        """Close acknowledged (and empty) digests, one close_many per close time."""
        by_time: dict[float, list[_Flight]] = {}
        for flight in flights:
            by_time.setdefault(flight.closing_at, []).append(flight)
        for closing_at, group in by_time.items():
            targets: list[DigestTarget] = [
                (f.item.entry.partition, f.item.digest.timeline, f.item.digest.id) for f in group
            ]
            closed = self._close_many(targets, closing_at, retry=retry)
            if closed is None:
                continue
            if self._hooks:
                for (partition, timeline, digest_id), done in zip(targets, closed, strict=True):
                    self._hooks.on_close(partition, timeline, digest_id, done)

    def _close_many(
        self, targets: list[DigestTarget], now: float, *, retry: bool
    ) -> list[bool] | None:
        def call() -> list[bool]:
            with self._metrics.store_latency.labels(operation="close").time():
                return self._store.close_many(targets, now)

        try:
            if not retry:
                return call()
            return self._runner.while_redis_down(call, errors=self._metrics.redis_errors)
        except redis.RedisError as exc:
            if not unavailable(exc):
                raise
            # Left open and READY: the take-over (or maintenance) has delivery reopen them.
            log.warning(
                "%d published digests not closed (%s); re-announced later", len(targets), exc
            )
            return None
