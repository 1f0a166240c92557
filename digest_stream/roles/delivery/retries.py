"""Delivery's publishing of a batch: every digest acknowledged, or retried, or dead-lettered.

The digests are published by the one publisher both paths share (roles.publish). What is
delivery's own is what happens when the broker does not take one: it is produced again with
capped backoff, and after ``max_attempts`` its schedule entry goes to the DLQ with the reason
while the digest stays open for maintenance to try again (its records are never dropped here).
A digest the broker refuses for good (too large for the topic: ``PERMANENT_ERRORS``) could
only ever be refused again, and would hold its timeline behind it for ever: once it is refused
so on its own too (a refusal fails the whole record batch it was in, whichever message was too
large), its entry goes to the DLQ at once (``publish-refused``, naming its records) and the
digest is closed unpublished, its records counted lost, so the timeline goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Producer

from digest_stream.ops.metrics import Metrics
from digest_stream.roles.dlq import DeadLetters
from digest_stream.roles.publish import DigestPublisher, Pending
from digest_stream.roles.retry import backoff_delay
from digest_stream.settings import Settings

log = logging.getLogger(__name__)

# How long one publish attempt may wait for broker acknowledgements.
PUBLISH_TIMEOUT = 30.0


class Retries:
    """Publishes a batch of digests and waits for acknowledgements, retrying with backoff."""

    def __init__(
        self,
        settings: Settings,
        publisher: DigestPublisher,
        producer: Producer,
        dlq: DeadLetters,
        metrics: Metrics,
        wait: Callable[[float], None],
        stopping: Callable[[], bool],
        now: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._now = now
        self._publisher = publisher
        self._producer = producer
        self._dlq = dlq
        self._metrics = metrics
        self._wait = wait  # the role's wait that keeps serving its group
        self._stopping = stopping

    def publish(self, pending: list[Pending]) -> tuple[list[Pending], list[Pending], bool]:
        """Publish every part and wait for acks, retrying failures with capped backoff.

        Returns what the broker acknowledged, what it refused for good (dead-lettered here, to
        be closed), and whether a stop request cut retries short (then the batch must not be
        committed: its entries are redelivered after restart).
        """
        settings = self._settings
        published: list[Pending] = []
        refused: list[Pending] = []
        todo = pending
        attempt = 0
        while todo:
            attempt += 1
            if attempt > 1:
                # Built again at this attempt's time: a digest retried through a long outage
                # would otherwise name a next delivery already past when it goes out.
                closing_at = self._now()
                todo = [self._rebuilt(item, closing_at) for item in todo]
            self._publisher.produce_many(todo)
            unacked = self._producer.flush(PUBLISH_TIMEOUT)
            if unacked:
                log.warning("%d messages unacknowledged after %.0fs", unacked, PUBLISH_TIMEOUT)
            # Each part's report says whether it was taken; one unanswered is tried again
            # (a repeat carries the same digest id).
            for item in todo:
                if item.refused and not item.alone:
                    # Refused with the record batch it was in, perhaps for another digest's
                    # size: tried once alone before it is taken for one that cannot go.
                    self._publisher.produce_alone(item, PUBLISH_TIMEOUT)
            published += [item for item in todo if item.acknowledged]
            for item in todo:
                if item.refused and not item.acknowledged:
                    self._refuse(item)
                    refused.append(item)
            todo = [item for item in todo if not item.acknowledged and not item.refused]
            if not todo:
                break
            if self._stopping():
                return published, refused, True
            if attempt >= settings.max_attempts:
                for item in todo:
                    self._give_up(item)
                break
            self._metrics.publish_retries.inc(len(todo))
            delay = backoff_delay(
                attempt, settings.retry_backoff_initial, settings.retry_backoff_max
            )
            log.warning(
                "publishing %d digests failed (%s); attempt %d of %d in %.2fs",
                len(todo), (todo[0].errors or ["no ack"])[0], attempt + 1,
                settings.max_attempts, delay,
            )  # fmt: skip
            self._wait(delay)
        return published, refused, False

    def _rebuilt(self, item: Pending, closing_at: float) -> Pending:
        again = self._publisher.again(item, closing_at)
        # the same digest, the same records: only the times it names have moved
        return again if again.parts else item

    def _give_up(self, item: Pending) -> None:
        # The digest stays open and its timeline READY: maintenance reschedules it later.
        assert item.message is not None, "delivery publishes what its entries opened"
        self._dlq.send(
            item.message,
            "publish-failed",
            f"digest {item.digest.id} of {item.digest.timeline}: "
            f"{self._settings.max_attempts} attempts failed: {'; '.join(item.errors[:3])}",
        )

    def _refuse(self, item: Pending) -> None:
        # Closed by delivery with the acknowledged ones; its records are named here, lost (in
        # a digest of several parts, those of parts already taken went out).
        assert item.message is not None, "delivery publishes what its entries opened"
        digest = item.digest
        ids = [record.id for record in digest.records]
        self._metrics.events_dropped.labels(reason="refused").inc(len(ids))
        what = (
            f"digest {digest.id} of {digest.timeline} refused for good "
            f"({'; '.join(item.errors[:3])}): closed unpublished, {len(item.parts)} part(s), "
            f"{len(ids)} record{'' if len(ids) == 1 else 's'} lost"
        )
        log.error("%s: %s", what, ", ".join(ids))
        self._dlq.send(item.message, "publish-refused", f"{what}: {', '.join(ids)}")
