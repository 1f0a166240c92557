"""The leading edge: a quiet timeline's first digest, opened by the add and published by the
ingest with the one publisher delivery uses too.

The add that finds a timeline with nothing stored opens its digest in the same call
(``open_nonce``): the timeline is READY and the digest open, exactly as delivery's open
leaves them. So the one rule of the digest path holds here as there: a timeline has at most
one digest in flight, and whatever comes next (records, a flush, ``flush_at``) waits behind
it until it is closed. This piece publishes it (``DigestPublisher``), and once the broker
acknowledged every part closes it at the time its ``next_delivery_at`` was computed from,
which starts the cool-down. The close is one per add (``close_leading``), once the broker
answered for every digest of it: a store may keep an add's digests together (Redis's batch
form) and close them in one write. Nothing else differs from delivery's path:

- a publish the broker refuses or times out, or a part refused at once, leaves the digest
  open and is announced (``IMMEDIATE``): delivery reopens that very digest (same id) and
  publishes it with its retries and dead letters;
- a crash or a SIGKILL before the close leaves it open: the next owner's take-over
  announces every READY timeline (``RECOVERED``), this one among them;
- an acknowledged digest of a partition revoked or lost meanwhile is still closed (by id:
  idempotent; a digest delivery closed already is a no-op), a failed one is left to the new
  owner's take-over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from confluent_kafka import Producer

from digest_stream.clock import Clock
from digest_stream.ops.hooks import Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.ops.threads import name_os_thread
from digest_stream.roles.publish import DigestPublisher, Pending, close_targets
from digest_stream.roles.scheduler import ScheduleEmitter
from digest_stream.store.base import DigestStore, OpenDigest, new_nonce
from digest_stream.store.errors import BackendError, unavailable
from digest_stream.store.limits import OPEN_NONCE_LENGTH
from digest_stream.wire.models import ScheduleReason

log = logging.getLogger(__name__)


class LeadingEdge:
    """Publishes the digests an add opened for new timelines, closes them once acknowledged,
    hands refused ones to delivery (role thread)."""

    def __init__(
        self,
        store: DigestStore,
        publisher: DigestPublisher,
        producer: Producer,
        emitter: ScheduleEmitter,
        metrics: Metrics,
        hooks: Hooks,
        clock: Clock,
        owns: Callable[[int], bool],
    ) -> None:
        self._store = store
        self._publisher = publisher
        self._producer = producer
        self._emitter = emitter
        self._metrics = metrics
        self._hooks = hooks
        self._clock = clock
        self._owns = owns
        self._flying: list[Pending] = []
        # Closes run on a thread of their own: Redis answers one only after the add it is
        # running, which the role thread would otherwise wait out.
        self._closer = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="leading-close", initializer=name_os_thread
        )
        self._closing: list[tuple[Future[list[bool]], list[Pending]]] = []
        # acknowledged, of one add each; their close found Redis down
        self._unclosed: list[list[Pending]] = []
        self._queued: list[tuple[int, list[OpenDigest]]] = []
        # each add's digests on their way out, by (partition, nonce): those the broker has
        # not answered for yet, and those it acknowledged (closed together once none is left)
        self._adds: dict[tuple[int, str], _Add] = {}

    @staticmethod
    def nonce() -> str:
        """A fresh nonce for one add call: its opened digests' ids start with it."""
        return new_nonce()

    @property
    def in_flight(self) -> int:
        """Digests queued, produced or closing, and not closed yet."""
        queued = sum(len(opened) for _, opened in self._queued)
        closing = sum(len(group) for _, group in self._closing)
        held = sum(len(add.acked) for add in self._adds.values())
        unclosed = sum(len(group) for group in self._unclosed)
        return len(self._flying) + queued + closing + held + unclosed

    def queue(self, partition: int, opened: list[OpenDigest]) -> None:
        """Keep the digests one add opened for ``publish``: the ingest hands its next batch
        to the store worker first, so Redis runs that add while these are built and
        produced."""
        self._queued.append((partition, opened))

    def publish(self) -> None:
        """Build and produce the queued digests (finish serves their delivery reports)."""
        queued, self._queued = self._queued, []
        if not queued:
            return
        # Their close's time, read now: the cool-down each one names (next_delivery_at)
        # starts when it is built, however long the add waited out an outage before.
        closing_at = self._clock.now()
        publisher = self._publisher
        for partition, opened in queued:
            self._adds[(partition, _nonce_of(opened[0]))] = _Add(len(opened))
        items = [
            publisher.prepare_leading(partition, digest, closing_at)
            for partition, opened in queued
            for digest in opened
        ]
        publisher.produce_many(items)
        self._flying += items

    def finish(self, *, wait: float = 0.0, retry: bool = True) -> None:
        """Publish what is queued, close what the broker acknowledged, hand what it refused
        to delivery.

        ``wait``: how long to wait for acknowledgements (0: take what came), and then for
        the closes too. ``retry`` False (a rebalance handler, which may not poll): the
        closes are waited for and one Redis could not answer is left open, for an
        announcement to reopen.
        """
        self.publish()
        blocking = wait > 0 or not retry
        self._harvest(wait=blocking)
        if wait > 0:
            self._producer.flush(wait)
        else:
            self._producer.poll(0)
        failed: list[Pending] = []
        acked: list[Pending] = []
        flying: list[Pending] = []
        for item in self._flying:  # one pass: a refused part fails the digest at once
            (failed if item.errors else acked if item.waiting == 0 else flying).append(item)
        self._flying = flying
        if failed:
            self._hand_over(failed)
        self._publisher.published(acked)
        answered = self._answered(failed, acked)
        if not retry:
            # a handler closes what was acknowledged now, answered for in full or not: the
            # rest of such an add stays open (the store keeps it open), for the take-over
            answered += [add.acked for add in self._adds.values() if add.acked]
            for add in self._adds.values():
                add.acked = []
        again, self._unclosed = self._unclosed, []
        if answered or again:
            self._close(again + answered, wait=blocking)

    def close(self) -> None:
        """Wait for the closes in flight and stop the close thread."""
        self._harvest(wait=True)
        self._closer.shutdown(wait=True)

    def _hand_over(self, failed: list[Pending]) -> None:
        """Announce refused digests: each is still its timeline's open digest, so delivery
        reopens the same id and publishes it with its retries (and dead letters). A
        partition gone is its new owner's: its take-over announces them."""
        self._metrics.publish_retries.inc(len(failed))
        now = self._clock.now()
        for item in failed:
            log.warning(
                "digest %s of %s: publish failed (%s); delivery publishes it (same id)",
                item.digest.id, item.digest.timeline, item.errors[0],
            )  # fmt: skip
        for partition, group in _by_partition(failed).items():
            if self._owns(partition):
                names = dict.fromkeys(item.digest.timeline for item in group)
                self._emitter.emit(
                    partition, [(name, now) for name in names], ScheduleReason.IMMEDIATE
                )

    def _answered(self, failed: list[Pending], acked: list[Pending]) -> list[list[Pending]]:
        """Count the broker's answers per add; the acknowledged digests of each add it has
        answered for in full, one group per add (one whose every publish failed: none)."""
        done: list[list[Pending]] = []
        for item, ok in [*((item, False) for item in failed), *((item, True) for item in acked)]:
            key = (item.partition, _nonce_of(item.digest))
            add = self._adds[key]
            add.left -= 1
            if ok:
                add.acked.append(item)
            if add.left == 0:
                del self._adds[key]
                if add.acked:
                    done.append(add.acked)
        return done

    def _close(self, groups: list[list[Pending]], *, wait: bool) -> None:
        """Close acknowledged digests, one call per add (its digests share one close time),
        on the close thread; ``wait``: until they are done (a handler, the close)."""
        for group in groups:
            future = self._closer.submit(self._timed_close, group)
            self._closing.append((future, group))
        self._harvest(wait=wait)

    def _timed_close(self, items: list[Pending]) -> list[bool]:
        with self._metrics.store_latency.labels(operation="close").time():
            return self._store.close_leading(
                _nonce_of(items[0].digest), close_targets(items), items[0].closing_at
            )

    def _harvest(self, *, wait: bool) -> None:
        """Take the closes done (``wait``: all of them). One Redis could not answer is tried
        again at the next step; when waiting (a handler, the close), it is left open: the
        timeline is READY, and an announcement (take-over, maintenance) reopens it."""
        running = []
        for future, group in self._closing:
            if not wait and not future.done():
                running.append((future, group))
                continue
            try:
                closed = future.result()
            except BackendError as exc:
                if not unavailable(exc):
                    raise
                self._metrics.store_errors.inc()
                if wait:
                    log.warning("leading edge: close failed (%s); left open", exc)
                else:
                    self._unclosed.append(group)
                continue
            if self._hooks:
                for item, done in zip(group, closed, strict=True):
                    digest = item.digest
                    self._hooks.on_close(item.partition, digest.timeline, digest.id, done)
        self._closing = running


class _Add:
    """One add's digests on their way out: how many the broker has not answered for, and
    those it acknowledged."""

    __slots__ = ("acked", "left")

    def __init__(self, count: int) -> None:
        self.left = count
        self.acked: list[Pending] = []


def _nonce_of(digest: OpenDigest) -> str:
    """The nonce of the add that led ``digest``: its id starts with it."""
    return digest.id[:OPEN_NONCE_LENGTH]


def _by_partition(items: list[Pending]) -> dict[int, list[Pending]]:
    groups: dict[int, list[Pending]] = {}
    for item in items:
        groups.setdefault(item.partition, []).append(item)
    return groups
