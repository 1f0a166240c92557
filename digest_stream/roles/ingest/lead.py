"""Lead: the leading edge, a quiet timeline's first digest, opened by the add and published by
the ingest with the one publisher delivery uses too.

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

from confluent_kafka import KafkaError, Message, Producer

from digest_stream.clock import Clock
from digest_stream.ops.hooks import Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.ops.threads import name_os_thread
from digest_stream.roles.publish import DigestPublisher, Pending, close_targets
from digest_stream.roles.scheduler import ScheduleEmitter
from digest_stream.store.base import DigestStore, OpenDigest
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
        # Closes run on a thread of their own: the store (Redis: one call at a time) answers one
        # only after the add it is running, which the role thread would otherwise wait out.
        self._closer = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="leading-close", initializer=name_os_thread
        )
        self._closing: list[tuple[Future[list[bool]], list[Pending]]] = []
        # acknowledged, of one add each; their close found the store down
        self._unclosed: list[list[Pending]] = []
        self._queued: list[tuple[int, list[OpenDigest]]] = []
        # each add's digests on their way out, in the order they were produced: the broker's
        # answers counted per add, not per digest (closed together once all came)
        self._adds: list[_Add] = []

    @property
    def in_flight(self) -> int:
        """Digests queued, produced or closing, and not closed yet."""
        queued = sum(len(opened) for _, opened in self._queued)
        closing = sum(len(group) for _, group in self._closing)
        flying = sum(len(add.items) for add in self._adds)
        unclosed = sum(len(group) for group in self._unclosed)
        return flying + queued + closing + unclosed

    def queue(self, partition: int, opened: list[OpenDigest]) -> None:
        """Keep the digests one add opened for ``publish``: the ingest hands its next batch
        to the store worker first, so the store runs that add while these are built and
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
            add = _Add(publisher.prepare_leading_add(partition, opened, closing_at))
            add.expected = publisher.produce_counted(add.items, add.report)
            self._adds.append(add)

    def finish(self, *, wait: float = 0.0, retry: bool = True) -> None:
        """Publish what is queued, close what the broker acknowledged, hand what it refused
        to delivery.

        ``wait``: how long to wait for acknowledgements (0: take what came), and then for
        the closes too. ``retry`` False (a rebalance handler, which may not poll): the
        closes are waited for and one the store could not answer is left open, for an
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
        answered: list[list[Pending]] = []
        flying: list[_Add] = []
        for add in self._adds:  # per add: its digests are looked at once all are answered
            if add.answered < add.expected:
                if not retry:
                    # a handler closes what was acknowledged now, answered for in full or
                    # not: the rest of such an add stays open until its reports come
                    done = add.take_acknowledged()
                    acked += done
                    if done:
                        answered.append(done)
                if add.items:
                    flying.append(add)
                continue
            add_failed, add_acked = add.outcome()
            failed += add_failed
            acked += add_acked
            if add_acked:
                answered.append(add_acked)
        self._adds = flying
        if failed:
            self._hand_over(failed)
        self._publisher.published(acked)
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
        """Take the closes done (``wait``: all of them). One the store could not answer is tried
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
    """One add's digests on their way out, and the broker's answers for them: counted, one
    callable for all of its parts (``report``), instead of a closure and a count per digest.
    A failed part names its digest by its key (the timeline: one digest each per add)."""

    __slots__ = ("answered", "expected", "failures", "items", "successes")

    def __init__(self, items: list[Pending]) -> None:
        self.items = items
        self.expected = 0  # reports to come (set once produced: some may come before)
        self.answered = 0
        self.failures: list[tuple[bytes | None, KafkaError]] = []
        self.successes: list[Message] = []  # read only by a handler (take_acknowledged)

    def report(self, error: KafkaError | None, message: Message) -> None:
        """A part's delivery report."""
        self.answered += 1
        if error is None:
            self.successes.append(message)
        else:
            self.failures.append((message.key(), error))

    def _failed_by_key(self) -> None:
        """The failed reports' errors onto their digests."""
        if self.failures:
            by_key = {item.digest.timeline.encode(): item for item in self.items}
            for key, error in self.failures:
                item = by_key.get(key) if key is not None else None
                if item is not None:
                    item.failed(error, str(error))
            self.failures = []

    def outcome(self) -> tuple[list[Pending], list[Pending]]:
        """Once every report came: the digests that failed, and those acknowledged."""
        self._failed_by_key()
        items, self.items = self.items, []
        if not any(item.errors for item in items):
            return [], items
        return [i for i in items if i.errors], [i for i in items if not i.errors]

    def take_acknowledged(self) -> list[Pending]:
        """Before every report came (a handler): the digests acknowledged in full so far,
        taken out of the add (a part of each digest: one per digest but for the rare digest
        of several parts, which waits for its last one here)."""
        self._failed_by_key()
        acked: dict[bytes | None, int] = {}
        for message in self.successes:
            key = message.key()
            acked[key] = acked.get(key, 0) + 1
        done = [
            item
            for item in self.items
            if not item.errors and acked.get(item.digest.timeline.encode(), 0) == len(item.parts)
        ]
        if done:
            taken = {id(item) for item in done}
            self.items = [item for item in self.items if id(item) not in taken]
            # their reports are in: the rest of the add still counts its own
            self.expected -= sum(len(item.parts) for item in done)
            self.answered -= sum(len(item.parts) for item in done)
            keys = {item.digest.timeline.encode() for item in done}
            self.successes = [m for m in self.successes if m.key() not in keys]
        return done


def _nonce_of(digest: OpenDigest) -> str:
    """The nonce of the add that led ``digest``: its id starts with it."""
    return digest.id[:OPEN_NONCE_LENGTH]


def _by_partition(items: list[Pending]) -> dict[int, list[Pending]]:
    groups: dict[int, list[Pending]] = {}
    for item in items:
        groups.setdefault(item.partition, []).append(item)
    return groups
