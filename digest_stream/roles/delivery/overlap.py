"""The delivery's store calls on one helper thread, overlapped with publishing.

While a batch is produced, acknowledged and closed, the next one is already taken and its
digests opened here (the store works while the broker does). An open is idempotent, so a crash or
a stop with the next batch opened only leaves digests that its redelivered entries reopen
under the same ids. A timeline of the batch in hand is not opened ahead: it is opened after
that batch closed it, as if the batches ran one after the other (a repeated entry stays stale,
not a second publication).

A published batch's closes run here too (after the next batch's opens, before anything opened
later), and its offsets are committed once they are done (``settle``). A call that failed on
the helper thread is retried on the role's thread, serving the group while the store is down.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from confluent_kafka import Message

from digest_stream.ops.hooks import Hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.ops.threads import name_os_thread
from digest_stream.roles.delivery.partitions import Stamp
from digest_stream.roles.runner import Runner
from digest_stream.store.base import DigestStore, DigestTarget, OpenDigest
from digest_stream.store.errors import InvalidState
from digest_stream.wire.schedule_fields import ScheduleFields

T = TypeVar("T")

Opened = list[OpenDigest | InvalidState]
#: A schedule entry as taken, with the entry decoded.
Picked = tuple[Message, ScheduleFields]


@dataclass
class Batch:
    """Schedule entries taken together, one digest per timeline, and their opens."""

    messages: list[Message]  # everything taken (dead-lettered entries included): the commit
    picked: list[Picked]  # one entry per (partition, timeline)
    targets: list[DigestTarget]  # picked's digests to open, in the same order
    now: float  # the time the opens were asked for
    stamp: Stamp  # each partition's epoch when taken
    opening: Future[Opened] | None = None  # the opens in flight on the helper thread
    ahead: list[int] = field(default_factory=list)  # indexes of targets opened there

    @classmethod
    def of(cls, messages: list[Message], entries: list[Picked], now: float, stamp: Stamp) -> Batch:
        """A batch of these messages (``entries``: the readable ones, decoded), one new digest
        id per (partition, timeline): a repeat in the batch would only reopen it."""
        picked: list[Picked] = []
        seen: set[tuple[int, str]] = set()
        for message, entry in entries:
            target = (entry.partition, entry.timeline)
            if target not in seen:
                seen.add(target)
                picked.append((message, entry))
        ids = _digest_ids(len(picked))
        targets = [(e.partition, e.timeline, i) for (_, e), i in zip(picked, ids, strict=True)]
        return cls(messages, picked, targets, now, stamp)

    def without(self, gone: set[int], opened: Opened) -> tuple[list[Picked], Opened, list[Message]]:
        """The batch (picked, opened, messages) without the entries of these partitions."""
        if not gone:
            return self.picked, opened, self.messages
        kept = [
            (item, digest)
            for item, digest in zip(self.picked, opened, strict=True)
            if item[0].partition() not in gone
        ]
        messages = [m for m in self.messages if m.partition() not in gone]
        return [item for item, _ in kept], [digest for _, digest in kept], messages


@dataclass
class Closing:
    """A published batch's digests closing on the helper thread, and its offsets to commit
    once they are closed."""

    targets: list[DigestTarget]  # (partition, timeline, digest id) each
    positions: dict[int, int]  # nothing when the batch must not be committed (cut short)
    done: Future[list[bool]] | None
    #: Each digest's close time: the one its next_delivery_at was computed from.
    times: list[float]


def _digest_ids(count: int) -> list[str]:
    """Fresh random digest ids (32 lowercase hex characters each), one urandom call."""
    raw = os.urandom(16 * count).hex()
    return [raw[at : at + 32] for at in range(0, len(raw), 32)]


class Overlap:
    """The helper thread's opens and closes, and their retries on the role's thread."""

    def __init__(
        self,
        store: DigestStore,
        metrics: Metrics,
        runner: Runner,
        hooks: Hooks,
        commit: Callable[[dict[int, int]], object],
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._runner = runner
        self._hooks = hooks
        self._commit = commit  # a settled batch's offsets (asynchronously)
        self._closing: Closing | None = None  # the last batch, its closes under way
        # One thread, one store call at a time in the order asked: a later open never passes
        # an earlier close of the same timeline.
        self._helper = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="delivery-store", initializer=name_os_thread
        )

    def open_ahead(self, batch: Batch, busy: Batch) -> None:
        """Start the batch's opens on the helper thread, but for the timelines ``busy`` (the
        batch in hand) delivers: those open once it closed them."""
        mine = {(target[0], target[1]) for target in busy.targets}
        batch.ahead = [i for i, t in enumerate(batch.targets) if (t[0], t[1]) not in mine]
        early = [batch.targets[i] for i in batch.ahead]
        if early:
            batch.opening = self._helper.submit(self._timed_open, early, batch.now)

    def opened(self, batch: Batch) -> Opened:
        """The batch's opened digests, in target order: what the helper thread opened, and the
        rest opened here (all of it again if the helper's call failed: opens are idempotent)."""
        found: dict[int, OpenDigest | InvalidState] = {}
        if batch.opening is not None:
            try:
                found = dict(zip(batch.ahead, batch.opening.result(), strict=True))
            except Exception:  # retried here, serving the group (an outage, say)
                found = {}
            batch.opening = None
        rest = [i for i in range(len(batch.targets)) if i not in found]
        if rest:
            self.settle()  # the last batch's closes first: some of these may be its timelines
            targets = [batch.targets[i] for i in rest]
            # Retried whole while the store is down: opens are idempotent (a reopen keeps its id).
            opened = self._with_store(lambda: self._store.open_many(targets, batch.now), "open")
            found.update(zip(rest, opened, strict=True))
        return [found[i] for i in range(len(batch.targets))]

    def drop(self, batch: Batch) -> None:
        """A batch taken ahead and not delivered: let its opens finish (nothing runs on after
        close; its entries come back and reopen the same ids)."""
        if batch.opening is not None:
            batch.opening.exception()

    def close(
        self,
        targets: list[DigestTarget],
        positions: dict[int, int],
        times: list[float],
    ) -> None:
        """Start closing a published batch's digests, each at its time in ``times`` (behind
        the opens already asked for, so a later open of these timelines finds them closed);
        settle() commits ``positions``."""
        done = None
        if targets:
            done = self._helper.submit(self._timed_close, targets, times)
        self._closing = Closing(targets, positions, done, times)

    def settle(self, *, retry: bool = True) -> None:
        """Wait for the last batch's closes (retrying a failed call here, serving the group,
        unless ``retry`` is off: then a failure stays pending), then commit its offsets."""
        closing, self._closing = self._closing, None
        if closing is None:
            return
        closed: list[bool] = []  # none asked for: the batch had no digests (done is None)
        if closing.done is not None:
            try:
                closed = closing.done.result()
            except Exception:  # retried here (closes are idempotent: a closed id says False)
                if not retry:
                    self._closing = closing
                    return
                closed = self._with_store(
                    lambda: _close_at(self._store, closing.targets, closing.times), "close"
                )
        if self._hooks:
            for (partition, timeline, digest_id), done in zip(closing.targets, closed, strict=True):
                self._hooks.on_close(partition, timeline, digest_id, done)
        if closing.positions:
            self._commit(closing.positions)

    def shutdown(self) -> None:
        """Stop the helper thread once its calls are done."""
        self._helper.shutdown(wait=True)

    def _timed_open(self, targets: list[DigestTarget], now: float) -> Opened:
        """open_many on the helper thread: one attempt; opened() retries a failure."""
        with self._metrics.store_latency.labels(operation="open").time():
            return self._store.open_many(targets, now)

    def _timed_close(self, targets: list[DigestTarget], times: list[float]) -> list[bool]:
        """The closes on the helper thread: one attempt; settle() retries a failure."""
        with self._metrics.store_latency.labels(operation="close").time():
            return _close_at(self._store, targets, times)

    def _with_store(self, call: Callable[[], T], operation: str) -> T:
        """A store call, retried through a store outage (paused, serving the group)."""

        def timed() -> T:
            with self._metrics.store_latency.labels(operation=operation).time():
                return call()

        return self._runner.while_store_down(timed, errors=self._metrics.store_errors)


def _close_at(store: DigestStore, targets: list[DigestTarget], times: list[float]) -> list[bool]:
    """close_many of each target at its time (one call per distinct time, almost always
    one: a digest built again for a publish retry closes at its later time); the replies in
    the targets' order."""
    if len(set(times)) == 1:
        return store.close_many(targets, times[0])
    closed = [False] * len(targets)
    for at in sorted(set(times)):
        indexes = [i for i, time in enumerate(times) if time == at]
        replies = store.close_many([targets[i] for i in indexes], at)
        for index, reply in zip(indexes, replies, strict=True):
            closed[index] = reply
    return closed
