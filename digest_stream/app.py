"""Process wiring: which roles run, their threads, and a graceful, bounded stop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Producer

from digest_stream.clock import Clock, SystemClock
from digest_stream.kafka import ClientErrors, producer_config
from digest_stream.ops import preflight
from digest_stream.ops.failures import FailureError, one_line
from digest_stream.ops.health import Health, Heartbeats, PartitionGauges
from digest_stream.ops.hooks import Hook, Hooks, load_hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.ops.server import OpsServer
from digest_stream.ops.threads import name_os_thread
from digest_stream.ops.topics import TopicWatch
from digest_stream.roles.delivery import Delivery
from digest_stream.roles.ingest import Ingest, ingest_role
from digest_stream.roles.publish import DigestPublisher
from digest_stream.roles.runner import Role, Runner
from digest_stream.settings import Settings, env_name
from digest_stream.store import connect
from digest_stream.store.base import DigestStore
from digest_stream.store.errors import BackendError, StoreUnavailable
from digest_stream.wire import codec, registry

log = logging.getLogger(__name__)
#: Seconds between tries of a store that refused a grant at start (App._connect).
GRANT_WAIT = 5.0

ROLES = ("ingest", "scheduler", "delivery")

# A stop must finish in-flight batches (bounded by PUBLISH_TIMEOUT and commit timeouts) and
# leave the groups; past this, the threads are abandoned and the process exits anyway.
STOP_TIMEOUT = 60.0
# Past this (seconds) a disagreement between this host's clock and the store's is worth a warning.
CLOCK_SKEW_WARNING = 1.0
# Consumer lag is refreshed this often by each role loop (cheap local calls, but not per batch).
LAG_REFRESH = 1.0


def parse_roles(text: str | Iterable[str]) -> frozenset[str]:
    """Validate a role list such as "ingest,scheduler"."""
    items = text.split(",") if isinstance(text, str) else list(text)
    roles = frozenset(r.strip() for r in items if r.strip())
    unknown = roles - set(ROLES)
    if unknown or not roles:
        raise ValueError(f"roles must be a non-empty subset of {','.join(ROLES)}, got {text!r}")
    # The scheduler follows the ingest consumer's partition assignment: each needs the other,
    # or the owned partitions are never ticked (ingest alone) or there are none (scheduler alone).
    if "scheduler" in roles and "ingest" not in roles:
        raise ValueError("the scheduler role runs inside the ingest role: add 'ingest'")
    if "ingest" in roles and "scheduler" not in roles:
        raise ValueError(
            "the ingest role needs the scheduler role (it ticks the partitions ingest owns; "
            "without it no timeline is ever announced): use 'ingest,scheduler'"
        )
    return roles


def schedule_frame(settings: Settings) -> Callable[[bytes], bytes]:
    """How ScheduleEntries go on the wire: plain, or framed under their registered schema."""
    return registry.output_frame(
        settings.schema_registry_url,
        settings.schema_registry_config,
        settings.schedule_topic,
        codec.SCHEDULE_ENTRY_SCHEMA,
    )


def check_clock(store: DigestStore, clock: Clock, metrics: Metrics) -> float:
    """Compare this host's clock with the store's; warn when they disagree by over a second.

    Due times are wall-clock and written by every host through the store, so a host whose clock is
    S seconds off shifts the cool-downs it computes by S. NTP keeps this in milliseconds.
    A store without a clock of its own (the model) has nothing to compare: 0.
    """
    try:
        server = store.server_time()
    except BackendError as exc:
        # An ACL without +time, say: the skew goes unmeasured, the service runs.
        log.warning("cannot read %s's clock (%s); clock skew not measured", exc.backend, exc)
        return 0.0
    if server is None:
        return 0.0
    skew = clock.now() - server
    metrics.clock_skew.set(skew)
    if abs(skew) > CLOCK_SKEW_WARNING:
        log.warning(
            "this host's clock is %.1fs %s Redis's: cool-downs computed here shift by that much; "
            "synchronise the clocks (NTP)",
            abs(skew),
            "ahead of" if skew > 0 else "behind",
        )
    return skew


@dataclass
class App:
    """One service process: any subset of the roles, each on its own thread and consumer."""

    settings: Settings
    roles: frozenset[str] = frozenset(ROLES)
    clock: Clock = field(default_factory=SystemClock)
    store: DigestStore | None = None
    metrics: Metrics = field(default_factory=Metrics)
    hooks: Sequence[Hook] = ()

    def __post_init__(self) -> None:
        self.roles = parse_roles(self.roles)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self.ingest: Ingest | None = None
        self.delivery: Delivery | None = None
        self.heartbeats = Heartbeats()
        self._runners: list[Runner] = []  # one per role thread, for readiness
        self.health = Health(self)
        self.server: OpsServer | None = None
        #: librdkafka's error callback of every client of this process: readiness names it.
        self.kafka_errors = ClientErrors()
        self._topic_watch: TopicWatch | None = None  # from start()
        self._hooks: Hooks | None = None  # until start(), and again once on_stop was called
        self.started = False

    def _connect(self) -> DigestStore:
        """connect(), waiting while the store refuses a grant the library needs, as a role
        waits for one mid-run (no exit, and nothing is called until it is granted); a stop
        meanwhile raises the refusal."""
        while True:
            try:
                return connect(self.settings)
            except StoreUnavailable as exc:
                if exc.kind != "authorization" or self._stop.is_set():
                    raise
                log.warning("%s; waiting for it (%s)", one_line(exc, self.settings), exc)
                self._stop.wait(GRANT_WAIT)

    def start(self) -> None:
        """Connect, join the groups and start the role threads (and the metrics server)."""
        store = self.store if self.store is not None else self._connect()
        self.store = store
        check_clock(store, self.clock, self.metrics)
        self.check_kafka()
        hooks = Hooks([*self.hooks, *load_hooks(self.settings.hooks, self.settings)])
        self._hooks = hooks
        if "ingest" in self.roles:  # with the scheduler (parse_roles)
            producer = Producer(producer_config(self.settings, self.kafka_errors))
            # The leading edge publishes with the one publisher delivery uses too, on the
            # ingest's producer (built only when on: in registry mode it registers Digest).
            leading = None
            if self.settings.direct_leading_edge:
                leading = self._publisher(producer, "ingest", hooks)
            runner, self.ingest = ingest_role(
                self.settings, store, self.clock, self.metrics, producer, hooks=hooks,
                frame=schedule_frame(self.settings),
                publisher=leading,
                kafka_errors=self.kafka_errors,
            )  # fmt: skip
            self._spawn(runner, self.ingest)
        if "delivery" in self.roles:
            producer = Producer(producer_config(self.settings, self.kafka_errors))
            runner = Runner(
                self.settings, "delivery", rebalances=self.metrics.rebalances,
                errors=self.kafka_errors,
            )  # fmt: skip
            self.delivery = Delivery(
                self.settings, store, self.clock, self.metrics, producer, runner, hooks=hooks,
                publisher=self._publisher(producer, "delivery", hooks),
            )  # fmt: skip
            self._spawn(runner, self.delivery)
        self.metrics.registry.register(PartitionGauges(self, self.health.ready))
        if self.settings.metrics_port is not None:
            self.server = OpsServer(
                self.settings.metrics_host,
                self.settings.metrics_port,
                self.metrics.registry,
                self.health.live,
                self.health.ready,
            )
            self.server.start()
        # Its first lookup at once: a missing topic is named as the roles begin to wait for it.
        self._topic_watch = TopicWatch(self.settings, self.topics(), self._stop)
        self._topic_watch.start()
        self.started = True
        log.info("started roles %s", ",".join(r for r in ROLES if r in self.roles))

    def _publisher(self, producer: Producer, role: str, hooks: Hooks) -> DigestPublisher:
        return DigestPublisher(self.settings, producer, self.metrics, hooks, self.clock, role)

    def check_kafka(self) -> None:
        """Stop the start on credentials, TLS or ACLs that Kafka refuses (a crash loop that
        names the cause, not a process that logs refusals forever); an unreachable Kafka is
        waited out like an outage later on."""
        settings = self.settings
        failure = preflight.check_kafka(
            settings, topics=self.topics(), groups=preflight.service_groups(settings, self.roles)
        )
        if failure is None:
            return
        if failure.fatal:
            raise FailureError(failure)
        log.warning("%s; starting anyway, the roles wait for Kafka", failure.line)

    def topics(self) -> dict[str, str]:
        """The topics this process's roles use, each with the setting naming it."""
        names = ["schedule_topic", "dlq_topic"]
        if "ingest" in self.roles:
            names.insert(0, "events_topic")
        if "delivery" in self.roles or self.settings.direct_leading_edge:
            names.append("output_topic")
        return {getattr(self.settings, name): env_name(name) for name in names}

    @property
    def missing_topics(self) -> dict[str, str]:
        """The topics the watch last found missing, with the setting naming each."""
        return {} if self._topic_watch is None else self._topic_watch.missing.missing

    def loop_roles(self) -> list[str]:
        """The role threads this process runs (the scheduler runs inside ingest)."""
        return [r for r in ("ingest", "delivery") if r in self.roles]

    @property
    def scheduler_runs(self) -> bool:
        """Whether this process schedules its input partitions (and so owns their gauges)."""
        return "scheduler" in self.roles

    @property
    def owned_partitions(self) -> frozenset[int] | None:
        """Input partitions the ingest role owns; None without an ingest role."""
        return None if self.ingest is None else self.ingest.owned

    @property
    def paused_roles(self) -> list[str]:
        """Roles whose fetching is paused while an outage is waited out."""
        return [runner.role for runner in self._runners if runner.paused]

    @property
    def stopping(self) -> bool:
        """stop() was asked for (or a role failed)."""
        return self._stop.is_set()

    def _spawn(self, runner: Runner, role: Role) -> None:
        """The role's thread: its runner joins the group, the role steps until a stop."""
        name = runner.role
        self._runners.append(runner)

        def loop() -> None:
            name_os_thread()
            try:
                runner.start(role, self._stop.is_set)
                next_lag = 0.0
                while not self._stop.is_set():
                    role.step()
                    now = self.heartbeats.beat(name)
                    if now >= next_lag:
                        # On the role's own thread: a consumer blocks calls from other threads
                        # while it is inside consume(), so a scrape only reads this cache.
                        next_lag = now + LAG_REFRESH
                        self.heartbeats.refresh_lag(name, runner.lag)
            except BaseException as exc:
                log.exception("%s role failed; stopping the process", name)
                self._errors.append(exc)
                self._stop.set()
            finally:
                try:
                    runner.close(role)
                except Exception:
                    log.exception("%s role did not close cleanly", name)

        thread = threading.Thread(target=loop, name=f"digest-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Ask every role to finish its batch, commit and leave its group."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stop() (or a role failure); True when every thread finished."""
        self._stop.wait(timeout)
        if not self._stop.is_set():
            return False
        # One deadline for all roles, not STOP_TIMEOUT each.
        deadline = time.monotonic() + STOP_TIMEOUT
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            log.error("roles did not stop within %.0fs: %s", STOP_TIMEOUT, ", ".join(alive))
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._hooks is not None:
            hooks, self._hooks = self._hooks, None  # once, however often wait() is called
            hooks.on_stop(self.metrics)
        return not alive

    @property
    def failed(self) -> BaseException | None:
        """The first error that stopped a role, if any."""
        return self._errors[0] if self._errors else None

    def __enter__(self) -> App:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.wait()
