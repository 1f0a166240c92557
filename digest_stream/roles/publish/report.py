"""What the delivery tells its metrics, its log and the hooks about each digest."""

from __future__ import annotations

import logging

from digest_stream.clock import Clock
from digest_stream.ops.hooks import Hooks
from digest_stream.ops.metrics import Metrics, observe_many
from digest_stream.roles.publish.produce import Pending
from digest_stream.store.base import OpenDigest

log = logging.getLogger(__name__)


class Report:
    """Counts, logs and hook calls of one delivery (role thread only)."""

    def __init__(self, metrics: Metrics, hooks: Hooks, clock: Clock) -> None:
        self._metrics = metrics
        self._hooks = hooks
        self._clock = clock

    def stale(self) -> None:
        """An entry whose timeline was already delivered and closed (repeated, recovered)."""
        self._metrics.stale_entries.inc()

    def expired(self, timeline: str) -> None:
        """Its earlier records outlived the ttl (leak protection): lost, loudly."""
        self._metrics.timelines_expired.inc()
        log.error(
            "timeline %s: records expired (ttl) before delivery; an unknown number of them is lost",
            timeline,
        )

    def unreadable(self, timeline: str, unreadable: list[tuple[str, str]]) -> None:
        """Stored records that could not be read: counted lost by the digest, logged here."""
        for record_id, why in unreadable:
            log.error("timeline %s: unreadable stored record %s: %s", timeline, record_id, why)

    def empty(self, digest: OpenDigest) -> None:
        """A digest without records publishes nothing; closing it retires the timeline."""
        if digest.dropped:
            log.warning(
                "timeline %s: digest %s lost all %d records (capacity or missing payloads)",
                digest.timeline, digest.id, digest.dropped,
            )  # fmt: skip
            self._metrics.events_dropped.labels(reason="missing_payload").inc(digest.dropped)

    def published(self, published: list[Pending]) -> None:
        """Count and tell the hooks about digests the broker acknowledged."""
        if not published:
            return
        now = self._clock.now()
        self._metrics.digests_published.inc(len(published))
        self._metrics.digest_parts.inc(sum(len(item.parts) for item in published))
        # Observed per batch (one lock per bucket touched), lateness by reason.
        observe_many(self._metrics.records_per_digest, [len(i.digest.records) for i in published])
        lateness: dict[str, list[float]] = {}
        for item in published:
            late = max(0.0, now - item.scheduled_at / 1000)
            lateness.setdefault(item.reason.value, []).append(late)
            if self._hooks and item.whole is not None:  # with hooks, every digest is built
                self._hooks.on_publish(item.partition, item.whole, item.headers)
        for why, amounts in lateness.items():
            observe_many(self._metrics.delivery_lateness.labels(reason=why), amounts)
