"""The leading edge, published by the ingest: a quiet timeline's first digest in one store
call and one produce.

The add that finds a timeline with nothing stored (and makes it READY) gives it its digest in
the same call (``open_nonce``), writes the timeline as that digest's close would leave it
(cooling down since the add: ``next_delivery_at`` names that time) and keeps the digest in
the partition's leading hash (store/lua/leading.lua). This piece builds its messages with
delivery's pure ``build``, produces them to the output topic under that stable id, and
settles the digests the broker acknowledged with one ``settle`` per partition at the next
step. Every failure hands the digest back to the delivery path with ``reclaim``: it becomes
the timeline's open digest under the same id, the timeline READY, and delivery publishes it:

- a crash or a SIGKILL before the settle: the next owner's take-over reclaims every leading
  digest kept for the partition and re-announces the READY timelines (``RECOVERED``);
- a publish the broker refuses or times out, or a part refused at once: reclaimed and
  announced here (``IMMEDIATE``), so delivery publishes it with its retries and dead letters;
- a partition revoked or lost meanwhile: an acknowledged digest is still settled (settling
  by id is idempotent: after a reclaim it is a no-op, and delivery publishes the same id
  again), and a failed one is left to the new owner's take-over.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
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
from digest_stream.store.base import DigestStore, OpenDigest
from digest_stream.store.errors import unavailable
from digest_stream.wire.models import ScheduleReason
from digest_stream.wire.schedule_fields import ScheduleFields

log = logging.getLogger(__name__)


@dataclass
class _Flight:
    """One leading digest on its way out: its parts not acknowledged yet, and its close time."""

    item: Pending  # item.message is None: no schedule entry stands behind it
    waiting: int


class LeadingEdge:
    """Publishes the digests an add gave to new timelines and settles them once acknowledged
    (role thread)."""

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
        recovered: Callable[[], None] | None = None,
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
        # After an outage waited out here: Redis may be back with older state (as in the
        # applier's retries), so the owned partitions' READY timelines are announced again.
        self._recovered = recovered
        self._policy = settings.resolver()
        self._report = Report(metrics, hooks, clock)  # delivery's metrics, logs and hooks
        self._flying: list[_Flight] = []
        self._settler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leading-settle")
        self._settling: list[tuple[Future[list[bool]], int, list[_Flight]]] = []
        self._unsettled: list[_Flight] = []  # acknowledged; their settle found Redis down
        self._queued: list[tuple[int, list[OpenDigest], float]] = []

    @staticmethod
    def nonce() -> str:
        """A fresh nonce for one add call: its opened digests' ids start with it."""
        return os.urandom(12).hex()

    @property
    def in_flight(self) -> int:
        """Digests queued or produced, and not settled yet."""
        queued = sum(len(opened) for _, opened, _ in self._queued)
        settling = sum(len(group) for _, _, group in self._settling)
        return len(self._flying) + queued + settling + len(self._unsettled)

    def queue(self, partition: int, opened: list[OpenDigest], added_at: float) -> None:
        """Keep the digests one add gave (``added_at``: the add's time, when their timelines'
        cool-down started) for ``publish``: the ingest hands its next batch to the store
        worker first, so Redis runs that add while these are built and produced."""
        self._queued.append((partition, opened, added_at))

    def publish(self) -> None:
        """Build and produce the queued digests."""
        queued, self._queued = self._queued, []
        for partition, opened, added_at in queued:
            self._publish(partition, opened, added_at)
        if queued:
            self._producer.poll(0)

    def _publish(self, partition: int, opened: list[OpenDigest], added_at: float) -> None:
        # A led digest is of a timeline with nothing stored before: never expired.
        whole = bool(self._hooks)
        scheduled_at = int(added_at * 1000)
        for digest in opened:
            entry = ScheduleFields(
                digest.timeline, partition, scheduled_at, ScheduleReason.IMMEDIATE
            )
            built = build(
                entry,
                digest,
                self._policy(digest.timeline),
                now=added_at,
                max_bytes=self._settings.max_message_bytes,
                whole=whole,
                checked=True,
            )
            if built.unreadable:
                self._report.unreadable(digest.timeline, built.unreadable)
            item = Pending(None, entry, digest, built.values, built.whole, headers=built.headers)
            flight = _Flight(item, len(built.values))
            if not built.values:
                self._report.empty(entry, digest)  # nothing to publish: settled next
            else:
                self._produce(flight)
            self._flying.append(flight)

    def settle(self, *, wait: float = 0.0, retry: bool = True) -> None:
        """Settle what the broker acknowledged, hand what it refused to delivery.

        ``wait``: how long to wait for acknowledgements (0: take what came), and then for
        the settles too. ``retry``: a refused digest's reclaim waits out a Redis outage
        (serving the group); a rebalance handler may not poll, so there (``retry`` False)
        a failed store call is left and the settles are waited for: the take-over reclaims
        what is kept.
        """
        self.publish()
        blocking = wait > 0 or not retry
        self._harvest(wait=blocking)
        if wait > 0:
            self._producer.flush(wait)
        else:
            self._producer.poll(0)
        done = [f for f in self._flying if f.item.errors or f.waiting == 0]
        self._flying = [f for f in self._flying if not (f.item.errors or f.waiting == 0)]
        failed = [f for f in done if f.item.errors]
        if failed:
            self._fall_back(failed, retry=retry)
        acked = [f for f in done if not f.item.errors]
        self._report.published([f.item for f in acked if f.item.parts])
        again, self._unsettled = self._unsettled, []
        if acked or again:
            self._settle(acked + again, wait=blocking)

    def close(self) -> None:
        """Wait for the settles in flight and stop the settle thread."""
        self._harvest(wait=True)
        self._settler.shutdown(wait=True)

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

    def _fall_back(self, failed: list[_Flight], *, retry: bool) -> None:
        """Reclaim refused digests and announce them: delivery reopens the same id and
        publishes it with its retries (and dead letters). Partitions gone are left to their
        new owner's take-over, which reclaims them."""
        self._metrics.publish_retries.inc(len(failed))
        now = self._clock.now()
        for flight in failed:
            log.warning(
                "digest %s of %s: publish failed (%s); handed to delivery",
                flight.item.digest.id, flight.item.entry.timeline, flight.item.errors[0],
            )  # fmt: skip
        for partition, group in _by_partition(failed).items():
            if not self._owns(partition):
                continue
            back = self._reclaim(partition, now, [f.item.digest.id for f in group], retry)
            if back:
                self._emitter.emit(
                    partition, [(name, now) for name in back], ScheduleReason.IMMEDIATE
                )

    def _settle(self, flights: list[_Flight], *, wait: bool) -> None:
        """Forget acknowledged (and empty) digests: one settle per partition, on the settle
        thread (Redis answers it only after the add it is running, which this thread would
        otherwise wait out); ``wait``: until they are done (a handler, the close)."""
        for partition, group in _by_partition(flights).items():
            ids = [f.item.digest.id for f in group]
            future = self._settler.submit(self._timed_settle, partition, ids)
            self._settling.append((future, partition, group))
        self._harvest(wait=wait)

    def _timed_settle(self, partition: int, ids: list[str]) -> list[bool]:
        with self._metrics.store_latency.labels(operation="settle").time():
            return self._store.settle(partition, ids)

    def _harvest(self, *, wait: bool) -> None:
        """Take the settles done (``wait``: all of them). One Redis could not answer is tried
        again at the next step; when waiting (a handler, the close), it is left to the
        take-over, which reclaims what is kept."""
        running = []
        for future, partition, group in self._settling:
            if not wait and not future.done():
                running.append((future, partition, group))
                continue
            try:
                kept = future.result()
            except redis.RedisError as exc:
                if not unavailable(exc):
                    raise
                self._metrics.redis_errors.inc()
                if wait:
                    log.warning("leading edge: settle failed (%s); left to the take-over", exc)
                else:
                    self._unsettled += group
                continue
            if self._hooks:
                for flight, done in zip(group, kept, strict=True):
                    digest = flight.item.digest
                    self._hooks.on_close(partition, digest.timeline, digest.id, done)
        self._settling = running

    def _reclaim(self, partition: int, now: float, ids: list[str], retry: bool) -> list[str]:
        """Reclaim these digests, timed; waits out a Redis outage when ``retry``, else leaves
        them kept (nothing to announce): the take-over reclaims them."""

        def timed() -> list[str]:
            with self._metrics.store_latency.labels(operation="reclaim").time():
                return self._store.reclaim(partition, now, ids)

        try:
            if not retry:
                return timed()
            return self._runner.while_redis_down(
                timed, errors=self._metrics.redis_errors, recovered=self._recovered
            )
        except redis.RedisError as exc:
            if not unavailable(exc):
                raise
            log.warning("leading edge: reclaim failed (%s); left to the take-over", exc)
            return []


def _by_partition(flights: list[_Flight]) -> dict[int, list[_Flight]]:
    groups: dict[int, list[_Flight]] = {}
    for flight in flights:
        groups.setdefault(flight.item.entry.partition, []).append(flight)
    return groups
