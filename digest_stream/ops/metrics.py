"""Every metric the service exports, declared once, on a registry owned by one app."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from digest_stream.wire.codec import DECODE_REASONS
from digest_stream.wire.models import ScheduleReason

# Store calls are sub-millisecond to tens of milliseconds on a healthy Redis.
_STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# Delivery lateness is dominated by the scheduler interval (0.25 s by default).
_LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0, 300.0)
_SIZE_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 1000, 10_000)


#: Known label values. Each starts at 0, so its series exists before the first event and
#: Prometheus' increase()/rate() count that first event (a series born at 1 shows no increase).
DROP_REASONS = ("capacity", "max_age", "missing_payload", "cancelled", "refused")
REPLAY_CAUSES = ("fence_behind", "state_loss", "topic_changed", "offset_reset")
DEAD_LETTER_REASONS = (
    "missing-key",
    "invalid-key",
    "missing-value",
    "oversize",
    "invalid-id",
    "publish-failed",
    "publish-refused",
    *DECODE_REASONS,
)
SCHEDULE_REASONS = tuple(reason.value for reason in ScheduleReason)
PRODUCING_ROLES = ("scheduler", "delivery")
CONSUMING_ROLES = ("ingest", "delivery")
REBALANCE_KINDS = ("assigned", "revoked", "lost")


class Metrics:
    """The closed set of metrics; one instance per app (its own registry)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.events_ingested = Counter(
            "digest_events_ingested", "Events written to the store.", registry=r
        )
        self.events_skipped = Counter(
            "digest_events_skipped", "Events at or below the partition fence (replays).", registry=r
        )
        self.events_dropped = Counter(
            "digest_events_dropped",
            "Events dropped, by reason (capacity, max_age, missing_payload, cancelled, refused).",
            ["reason"],
            registry=r,
        )
        self.dead_letters = Counter(
            "digest_dead_letters", "Messages sent to the DLQ, by reason.", ["reason"], registry=r
        )
        self.dead_letters_truncated = Counter(
            "digest_dead_letters_truncated",
            "Dead letters too large for the DLQ topic, sent with coordinates but no value.",
            registry=r,
        )
        self.timelines_expired = Counter(
            "digest_timelines_expired",
            "Timelines whose records expired (ttl, leak protection) before delivery.",
            registry=r,
        )
        self.replays = Counter(
            "digest_replays",
            "Seeks back to rebuild lost store state, by cause (fence_behind, state_loss, "
            "topic_changed, offset_reset).",
            ["cause"],
            registry=r,
        )
        self.events_mispartitioned = Counter(
            "digest_events_mispartitioned",
            "Sampled events (one per partition batch) that arrived on another partition than "
            "the partitioner setting picks for their key: a producer partitions otherwise.",
            registry=r,
        )
        self.timelines_moved = Counter(
            "digest_timelines_moved",
            "Timelines seen on a partition their key did not go to before the events topic "
            "grew, while their old partition still held state (their digests split).",
            registry=r,
        )
        # The metric keeps its name (alerts and dashboards read it) whatever the backend.
        self.store_errors = Counter(
            "digest_redis_errors", "Store calls that failed on connectivity.", registry=r
        )
        self.schema_registry_errors = Counter(
            "digest_schema_registry_errors",
            "Writer-schema fetches that failed because the schema registry could not answer.",
            registry=r,
        )
        self.schedule_entries = Counter(
            "digest_schedule_entries",
            "Schedule entries emitted, by reason.",
            ["reason"],
            registry=r,
        )
        self.digests_published = Counter(
            "digest_digests_published", "Digests published (all parts acknowledged).", registry=r
        )
        self.digest_parts = Counter(
            "digest_digest_parts", "Digest messages published (parts).", registry=r
        )
        self.stale_entries = Counter(
            "digest_stale_entries",
            "Schedule entries whose timeline was no longer READY (already delivered).",
            registry=r,
        )
        self.schedule_retries = Counter(
            "digest_schedule_retries",
            "Schedule entries the broker refused or timed out, produced again.",
            registry=r,
        )
        self.producer_queue_full = Counter(
            "digest_producer_queue_full",
            "Times a role waited for room in a full producer queue, by role.",
            ["role"],
            registry=r,
        )
        self.publish_retries = Counter(
            "digest_publish_retries", "Publish attempts that failed and were retried.", registry=r
        )
        self.records_per_digest = Histogram(
            "digest_records_per_digest", "Records in a digest.", buckets=_SIZE_BUCKETS, registry=r
        )
        self.delivery_lateness = Histogram(
            "digest_delivery_lateness_seconds",
            "Digest publish time minus the time its timeline became due, by schedule reason.",
            ["reason"],
            buckets=_LATENESS_BUCKETS,
            registry=r,
        )
        self.rebalances = Counter(
            "digest_rebalances",
            "Partitions assigned, revoked or lost, by role and kind.",
            ["role", "kind"],
            registry=r,
        )
        self.clock_skew = Gauge(
            "digest_clock_skew_seconds",
            "This host's clock minus Redis's (TIME), measured at start.",
            registry=r,
        )
        self.store_latency = Histogram(
            "digest_store_call_seconds",
            "Store call latency, by operation.",
            ["operation"],
            buckets=_STORE_BUCKETS,
            registry=r,
        )
        self._declare_known_labels()

    def _declare_known_labels(self) -> None:
        for reason in DROP_REASONS:
            self.events_dropped.labels(reason=reason)
        for cause in REPLAY_CAUSES:
            self.replays.labels(cause=cause)
        for reason in DEAD_LETTER_REASONS:
            self.dead_letters.labels(reason=reason)
        for reason in SCHEDULE_REASONS:
            self.schedule_entries.labels(reason=reason)
        for role in PRODUCING_ROLES:
            self.producer_queue_full.labels(role=role)
        for role in CONSUMING_ROLES:
            for kind in REBALANCE_KINDS:
                self.rebalances.labels(role=role, kind=kind)

    def value(self, name: str, **labels: str) -> float:
        """Current value of a sample (0 when absent): for tests and the liveness check."""
        return self.registry.get_sample_value(name, labels) or 0.0


def observe_many(histogram: Histogram, amounts: Iterable[float]) -> None:
    """Observe each amount: the same series as ``observe`` once per amount, with one locked
    increment per bucket touched and one for the sum, per call instead of per amount.

    prometheus_client has no bulk observe; a batch of digests would otherwise take two locks
    per digest. Its bucket and sum values are what ``Histogram.observe`` itself increments
    (pinned by tests/unit/ops/test_metrics.py against ``observe``)."""
    bounds = histogram._upper_bounds  # ascending, the last +Inf
    counts = [0] * len(bounds)
    total = 0.0
    for amount in amounts:
        total += amount
        counts[bisect_left(bounds, amount)] += 1  # the first bucket with amount <= bound
    histogram._sum.inc(total)
    for index, count in enumerate(counts):
        if count:
            histogram._buckets[index].inc(count)
