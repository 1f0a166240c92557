"""Liveness, readiness and the per-partition gauges, computed on demand (never on the hot path).

- live: no role failed (the body names the failure's category and class, never its text)
  and every role loop came round within ``stall_timeout``, or it is inside a store-outage
  retry (the store error counter moved within that window): waiting for the store is not
  stuck (``waiting_for_store``; ``waiting_for_redis`` is its deprecated old name).
- ready: the roles started and are not stopping; ingest runs with its scheduler (alone, it
  owns partitions nobody ticks); the ingest role owns at least one input
  partition (a delivery-only process: at least one schedule partition); the store answers and
  runs the server-side code this code expects (Redis: the Functions library version, on
  every primary of a cluster).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from digest_stream.clock import Clock
from digest_stream.kafka import ClientErrors
from digest_stream.ops.failures import KafkaScope, explain_kafka
from digest_stream.ops.metrics import Metrics
from digest_stream.ops.topics import missing_problem
from digest_stream.settings import Settings
from digest_stream.store import backend_error, backend_of
from digest_stream.store.base import DigestStore
from digest_stream.store.errors import CONNECTION_KINDS, BackendError, StoreError

log = logging.getLogger(__name__)

# A readiness probe may come every second from several probers; one store round trip per
# second at most is plenty to notice an outage.
READY_CACHE_SECONDS = 1.0
# librdkafka reports a refused login or an unreachable broker at each reconnect (backoff up
# to 10 s): an error this recent still stands.
KAFKA_ERROR_WINDOW = 30.0

# Per-partition gauges, declared once (see docs/operations.md).
WAITING = "digest_partition_waiting_timelines"
READY = "digest_partition_ready_timelines"
OVERDUE = "digest_partition_oldest_overdue_seconds"
LAG = "digest_consumer_lag"
OWNED = "digest_owned_partitions"
LOOP_AGE = "digest_role_loop_age_seconds"
READY_G = "digest_ready"
LIBRARY_OK = "digest_library_ok"


@dataclass
class Heartbeats:
    """Last loop iteration time per role (monotonic), written by the role threads."""

    clock: Callable[[], float] = time.monotonic
    beats: dict[str, float] = field(default_factory=dict)
    lags: dict[str, dict[int, int]] = field(default_factory=dict)

    def beat(self, role: str) -> float:
        """The role finished one loop iteration; returns the time."""
        now = self.clock()
        self.beats[role] = now
        return now

    def refresh_lag(self, role: str, lag: Callable[[], dict[int, int]]) -> None:
        """Remember a role's consumer lag per partition (called on the role's thread)."""
        try:
            self.lags[role] = lag()
        except KafkaException as exc:
            log.debug("%s: consumer lag unavailable: %s", role, exc)

    def ages(self) -> dict[str, float]:
        """Seconds since each role's last iteration."""
        now = self.clock()
        return {role: now - at for role, at in dict(self.beats).items()}


class HealthView(Protocol):
    """What health and the gauges read of a running process (App satisfies it); read-only."""

    @property
    def settings(self) -> Settings:
        """The settings (stall_timeout)."""

    @property
    def clock(self) -> Clock:
        """The clock due times are measured with."""

    @property
    def metrics(self) -> Metrics:
        """The process's counters (the store error counter)."""

    @property
    def heartbeats(self) -> Heartbeats:
        """Loop times and consumer lag per role."""

    @property
    def store(self) -> DigestStore | None:
        """The store, once connected."""

    @property
    def roles(self) -> frozenset[str]:
        """The roles this process was asked to run."""

    @property
    def started(self) -> bool:
        """Every role was started."""

    @property
    def paused_roles(self) -> list[str]:
        """Roles whose fetching is paused while an outage (the store's, the registry's) is
        waited out."""

    @property
    def stopping(self) -> bool:
        """A stop was asked for (or a role failed)."""

    @property
    def failed(self) -> BaseException | None:
        """The error that stopped a role, if any."""

    @property
    def owned_partitions(self) -> frozenset[int] | None:
        """Input partitions the ingest role owns; None without an ingest role."""

    @property
    def kafka_errors(self) -> ClientErrors:
        """What librdkafka reported through its error callback."""

    @property
    def missing_topics(self) -> dict[str, str]:
        """The Kafka topics found missing (topic -> the setting naming it)."""

    @property
    def scheduler_runs(self) -> bool:
        """Whether this process schedules its input partitions."""

    def loop_roles(self) -> list[str]:
        """The role loops this process runs."""


def failure_category(error: BaseException) -> str:
    """What kind of failure stopped a role: the store's backend (redis), kafka, store or
    internal (for /healthz)."""
    backend = backend_error(error)
    if backend is not None:
        return backend.backend.lower()
    if isinstance(error, (KafkaException, KafkaError)):
        return "kafka"
    if isinstance(error, StoreError):
        return "store"
    return "internal"


class Health:
    """Answers /healthz and /readyz for one process."""

    def __init__(self, app: HealthView) -> None:
        self._app = app
        self._lock = threading.Lock()
        self._ready_at = -1.0
        self._ready: tuple[bool, dict[str, Any]] = (False, {})
        self._store_errors = -1.0
        self._store_errors_changed = time.monotonic()
        self._last_logged = ""

    def live(self) -> tuple[bool, dict[str, Any]]:
        """(alive, details): role loops not stuck."""
        app = self._app
        limit = app.settings.stall_timeout
        # A schema registry outage is waited out the same way: it counts as one.
        errors = app.metrics.value("digest_redis_errors_total") + app.metrics.value(
            "digest_schema_registry_errors_total"
        )
        now = time.monotonic()
        with self._lock:
            if errors != self._store_errors:
                self._store_errors, self._store_errors_changed = errors, now
            retrying = now - self._store_errors_changed < limit and errors > 0
        ages = app.heartbeats.ages()
        roles: dict[str, Any] = {}
        ok = app.failed is None
        for role in app.loop_roles():
            age = ages.get(role)
            stuck = age is not None and age > limit and not retrying
            roles[role] = {"loop_age_seconds": None if age is None else round(age, 3),
                           "stuck": stuck}  # fmt: skip
            ok = ok and not stuck
        # waiting_for_redis: the field's name before the store's own words (issue 38), kept for
        # the probes and scripts that read it (deprecated: docs/operations.md, Liveness).
        details = {"status": "ok" if ok else "stuck", "roles": roles,
                   "waiting_for_store": retrying, "waiting_for_redis": retrying}  # fmt: skip
        if app.failed is not None:
            # A category and a class, never the text: the probe answers anyone who can reach
            # the port, and the text may carry hosts, keys or payload. The role's failure was
            # logged with its traceback when it stopped.
            details["status"] = "failed"
            details["error"] = {"category": failure_category(app.failed),
                                "type": type(app.failed).__name__}  # fmt: skip
        return ok, details

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """(ready, details); cached for READY_CACHE_SECONDS."""
        now = time.monotonic()
        with self._lock:
            if now - self._ready_at < READY_CACHE_SECONDS:
                return self._ready
        result = self._check_ready()
        with self._lock:
            self._ready_at, self._ready = time.monotonic(), result
        return result

    def _check_ready(self) -> tuple[bool, dict[str, Any]]:
        app = self._app
        problems: list[str] = []
        details: dict[str, Any] = {}
        if not app.started:
            problems.append("not started")
        if app.stopping:
            problems.append("stopping")
        if "ingest" in app.roles and not app.scheduler_runs:
            problems.append("ingest runs without the scheduler: its partitions are never ticked")
        owned = app.owned_partitions
        if owned is not None:
            details["ingest_partitions"] = sorted(owned)
            if not owned:
                problems.append("no input partitions assigned")
        elif "delivery" in app.roles:
            assigned = sorted(app.heartbeats.lags.get("delivery", {}))
            details["delivery_partitions"] = assigned
            if not assigned:
                problems.append("no schedule partitions assigned")
        missing = app.missing_topics
        if missing:
            problems.append(missing_problem(missing))
        for role in app.paused_roles:
            # A store refusing writes (OOM, an ACL) still answers the version check below:
            # the role's own pause is what says it cannot do its work.
            problems.append(f"{role} paused, waiting out an outage (see the log)")
        self._kafka_cause(problems, details)
        if app.store is not None:
            self._store_cause(app.store, problems, details)
        details["status"] = "ready" if not problems else "not ready"
        details["problems"] = problems
        return not problems, details

    def _store_cause(
        self, store: DigestStore, problems: list[str], details: dict[str, Any]
    ) -> None:
        """The store answers and runs the server-side code this code expects (for Redis: the
        Functions library version, on every primary; the backend words the problem)."""
        try:
            readiness = store.readiness()
        except BackendError as exc:
            # The backend's name for the error, never its text (hosts, users).
            if exc.kind in CONNECTION_KINDS:
                problems.append(f"{exc.backend} unreachable ({exc.name})")
                self._log_once(f"readiness: {exc.backend} unreachable: %s", exc)
            else:  # e.g. ACL refusals
                problems.append(f"{exc.backend} refused the version check ({exc.name})")
                self._log_once(f"readiness: {exc.backend} refused the version check: %s", exc)
            return
        except Exception as exc:  # a reply it did not expect, say: the probe still answers
            problems.append(f"the store refused the version check ({type(exc).__name__})")
            self._log_once("readiness: the store refused the version check: %s", exc)
            return
        if not readiness.versions:
            return  # no server-side code to check (the model)
        details["library_versions"] = readiness.versions
        details["library_ok"] = not readiness.wrong
        if readiness.wrong:
            problems.append(backend_of(self._app.settings).unready(readiness))

    def _kafka_cause(self, problems: list[str], details: dict[str, Any]) -> None:
        """A recent Kafka error that explains (or by itself is) not being ready."""
        found = self._app.kafka_errors.latest_with_group(within=KAFKA_ERROR_WINDOW)
        if found is None:
            return
        error, group = found
        scope = None if group is None else KafkaScope(group=group[0], group_setting=group[1])
        failure = explain_kafka(error, self._app.settings, scope)
        if failure is None:
            return
        details["kafka_error"] = {"kind": failure.kind, "code": error.name()}
        if failure.fatal or problems:
            # The kind and librdkafka's code name, not the line: it names hosts and users.
            problems.append(f"Kafka {failure.kind} failure ({error.name()}): see the log")
        self._log_once("readiness: %s", failure.line)

    def _log_once(self, message: str, exc: BaseException | str) -> None:
        # The probe's body names only the error class; the text goes to the log, once per
        # change rather than once per probe (probes come every second during an outage).
        text = message % exc
        if text != self._last_logged:
            self._last_logged = text
            log.warning(text)


class PartitionGauges(Collector):
    """Per-owned-partition gauges, computed when scraped: one read-only FCALL per partition."""

    def __init__(
        self,
        app: HealthView,
        ready: Callable[[], tuple[bool, dict[str, Any]]] | None = None,
    ) -> None:
        self._app = app
        self._ready = ready  # Health.ready (cached): readiness and the library check as gauges

    def describe(self) -> list[GaugeMetricFamily]:
        # Declaring the families lets the registry refuse duplicates without calling collect().
        return list(self._families())

    def _families(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(WAITING, "WAITING timelines of an owned input partition.",
                                labels=["partition"])  # fmt: skip
        yield GaugeMetricFamily(READY, "READY timelines (due, not yet delivered).",
                                labels=["partition"])  # fmt: skip
        yield GaugeMetricFamily(
            OVERDUE, "Age of the oldest WAITING timeline past its due time (0 = none).",
            labels=["partition"],
        )  # fmt: skip
        yield GaugeMetricFamily(LAG, "Consumer lag (high watermark - position) by role.",
                                labels=["role", "partition"])  # fmt: skip
        yield GaugeMetricFamily(OWNED, "Input partitions this instance owns.")
        yield GaugeMetricFamily(LOOP_AGE, "Seconds since each role loop last came round.",
                                labels=["role"])  # fmt: skip
        yield GaugeMetricFamily(READY_G, "1 when /readyz says ready, else 0.")
        yield GaugeMetricFamily(
            LIBRARY_OK, "1 when every primary runs this code's Functions library, 0 when not."
        )

    def collect(self) -> Iterator[GaugeMetricFamily]:
        waiting, ready, overdue, lag, owned_g, loop_age, ready_g, library_ok = self._families()
        app = self._app
        now = app.clock.now()
        owned = app.owned_partitions or frozenset()
        for role, lags in sorted(dict(app.heartbeats.lags).items()):
            for partition, value in sorted(lags.items()):
                lag.add_metric([role, str(partition)], value)
        owned_g.add_metric([], len(owned))
        if app.store is not None and app.scheduler_runs:
            for partition in sorted(owned):
                try:
                    stats = app.store.stats(partition)
                except BackendError as exc:
                    if exc.kind not in CONNECTION_KINDS:
                        raise
                    continue  # the scrape still answers; digest_redis_errors tells the story
                label = [str(partition)]
                waiting.add_metric(label, stats.waiting)
                ready.add_metric(label, stats.ready)
                late = 0.0 if stats.oldest_due is None else max(0.0, now - stats.oldest_due)
                overdue.add_metric(label, late)
        for role, age in sorted(app.heartbeats.ages().items()):
            loop_age.add_metric([role], age)
        if self._ready is not None:
            is_ready, details = self._ready()
            ready_g.add_metric([], 1 if is_ready else 0)
            if "library_ok" in details:  # absent when the store could not be asked
                library_ok.add_metric([], 1 if details["library_ok"] else 0)
        yield from (waiting, ready, overdue, lag, owned_g, loop_age, ready_g, library_ok)
