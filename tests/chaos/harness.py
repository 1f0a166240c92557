"""Fault-injection harness: a known load in, every id accounted for on the way out.

- `Load` sends events with unique ids (plus optional hostile messages) from a thread and keeps
  the broker's acknowledgement (partition, offset, wall time) of each.
- `Output` and `DeadLetterLog` read the output and DLQ topics incrementally.
- `Accounting` checks: every acknowledged event id is in >= 1 digest, or dead-lettered with a
  reason, or counted as dropped; it reports ids in two digests with different digest ids.
- `Services` starts the real CLI processes (tests.support.pipeline.ServiceProcess) and stops every
  one by pid at the end, also on failure.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from prometheus_client.parser import text_string_to_metric_families

from digest_stream.dev import stack as devstack
from digest_stream.settings import Settings
from digest_stream.wire import codec
from digest_stream.wire.models import Event
from tests.support import free_port, unique, wait_until
from tests.support.pipeline import FAST, ServiceProcess

#: Where each scenario's one-line summary is appended (make chaos sets it).
RESULTS_ENV = "DIGEST_STREAM_CHAOS_RESULTS"
CHAOS_ENV = "DIGEST_STREAM_CHAOS"
METRICS_DUMP_ENV = "DIGEST_STREAM_TEST_METRICS_FILE"

#: Short delays and a fast group failover, so a 50k-event run takes about a minute.
CHAOS_SETTINGS: dict[str, Any] = {
    **FAST,
    "minimum_delay": 1.0,
    "increment_delay": 0.2,
    "maximum_delay": 2.0,
    "maintenance_interval": 1.0,
    "maintenance_timeout": 8.0,
    "kafka_config": {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"},
}


def chaos_enabled() -> bool:
    """The long scenarios run only when asked (make chaos)."""
    return os.environ.get(CHAOS_ENV, "") not in {"", "0"}


# --------------------------------------------------------------------------- topics


def create_topics(bootstrap: str, names: dict[str, int]) -> None:
    """Create topics (name -> partitions) and wait until every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=p, replication_factor=1) for n, p in names.items()]
    )
    for future in futures.values():
        future.result(timeout=30)

    def ready() -> bool:
        meta = admin.list_topics(timeout=5).topics
        return all(
            n in meta
            and meta[n].error is None
            and len(meta[n].partitions) == p
            and all(x.leader >= 0 for x in meta[n].partitions.values())
            for n, p in names.items()
        )

    wait_until(ready, 30, f"topics {list(names)} have leaders")


def delete_topics(bootstrap: str, names: list[str]) -> None:
    """Best-effort removal of a test's topics."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(names).values():
        with contextlib.suppress(Exception):
            future.result(timeout=30)


SettingsFactory = Callable[..., Settings]
"""The `make_settings` fixture: `make(bootstrap=None, redis=None, **changes) -> Settings`."""


def chaos_settings(
    bootstrap: str, redis_url: str, namespace: str, partitions: int = 8, **changes: Any
) -> Settings:
    """Settings of one scenario on fresh topics (created here) and fresh groups."""
    base = unique("chaos")
    topics = {
        "events_topic": f"{base}.events",
        "schedule_topic": f"{base}.schedule",
        "output_topic": f"{base}.output",
        "dlq_topic": f"{base}.dlq",
    }
    create_topics(
        bootstrap,
        {name: (1 if key == "dlq_topic" else partitions) for key, name in topics.items()},
    )
    return Settings.model_validate(
        {
            "kafka_bootstrap_servers": bootstrap,
            "redis_url": redis_url,
            "namespace": namespace,
            **topics,
            "group_id": f"{base}-ingest",
            "delivery_group_id": f"{base}-delivery",
            **CHAOS_SETTINGS,
            **changes,
        }
    )


# --------------------------------------------------------------------------- load


@dataclass
class Sent:
    """The broker's acknowledgement of one produced message."""

    partition: int
    offset: int
    at: float  # wall clock of the acknowledgement


@dataclass
class Hostile:
    """One hostile message: what it is and what must become of it."""

    kind: str
    key: bytes | None
    value: bytes | None
    # DLQ reasons that are a correct outcome; empty = must be processed as an event.
    reasons: frozenset[str]
    event_id: str | None = None  # when it is a (valid) event: its id


class Load:
    """Sends `count` good events over `timelines` timelines at about `rate` per second."""

    def __init__(
        self,
        settings: Settings,
        count: int,
        timelines: int,
        rate: float,
        hostile: Callable[[int], Hostile | None] | None = None,
    ) -> None:
        self.settings = settings
        self.count = count
        self.timelines = timelines
        self.rate = rate
        self._hostile = hostile
        self.prefix = uuid.uuid4().hex[:6]
        self.acked: dict[str, Sent] = {}  # good event id -> ack
        self.timeline_of: dict[str, str] = {}
        self.hostile_acked: list[tuple[Hostile, Sent]] = []
        self.errors: list[str] = []
        self.produced = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="chaos-load", daemon=True)
        self._stop = threading.Event()
        self.finished = threading.Event()

    def start(self) -> Load:
        """Start sending in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sending early (the test failed)."""
        self._stop.set()
        self._thread.join(60)

    def acked_copy(self) -> dict[str, Sent]:
        """The acknowledgements so far (a copy: the load thread keeps adding)."""
        with self._lock:
            return dict(self.acked)

    def progress(self) -> float:
        """Fraction of the good events produced so far."""
        return self.produced / self.count

    def wait_progress(self, fraction: float, timeout: float = 300) -> None:
        """Block until that fraction of the events was produced."""
        wait_until(lambda: self.progress() >= fraction, timeout, f"load at {fraction:.0%}", 0.05)

    def wait_acked(self, timeout: float = 300) -> None:
        """Block until every message was produced and acknowledged (or failed)."""
        wait_until(self.finished.is_set, timeout, "the load to finish and be acknowledged")
        assert not self.errors, f"{len(self.errors)} events not acknowledged: {self.errors[:3]}"

    def _on_delivery(self, record_id: str | None, hostile: Hostile | None) -> Callable[..., None]:
        def report(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                with self._lock:
                    self.errors.append(f"{record_id or hostile}: {error}")
                return
            sent = Sent(message.partition() or 0, message.offset() or 0, time.time())
            with self._lock:
                if hostile is not None:
                    self.hostile_acked.append((hostile, sent))
                if record_id is not None:
                    self.acked[record_id] = sent

        return report

    def _run(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.settings.kafka_bootstrap_servers,
                "linger.ms": 5,
                "enable.idempotence": True,
                "acks": "all",
                "message.timeout.ms": 600_000,
                "message.max.bytes": 2_000_000,
                "queue.buffering.max.messages": 200_000,
            }
        )
        topic = self.settings.events_topic
        started = time.monotonic()
        try:
            for i in range(self.count):
                if self._stop.is_set():
                    return
                if self.rate > 0:
                    ahead = i / self.rate - (time.monotonic() - started)
                    if ahead > 0:
                        producer.poll(ahead)  # pacing the load; serves delivery reports
                timeline = f"c:{self.prefix}:{i % self.timelines}"
                record_id = f"{self.prefix}-{i}"
                self.timeline_of[record_id] = timeline
                value = codec.encode_event(
                    Event(id=record_id, timestamp=int(time.time() * 1000), payload=b"{}")
                )
                self._produce(producer, topic, timeline.encode(), value, record_id, None)
                self.produced = i + 1
                hostile = self._hostile(i) if self._hostile else None
                if hostile is not None:
                    if hostile.event_id is not None and hostile.key is not None:
                        self.timeline_of[hostile.event_id] = hostile.key.decode()
                    self._produce(producer, topic, hostile.key, hostile.value, None, hostile)
            while producer.flush(1.0) and not self._stop.is_set():
                pass
        finally:
            self.finished.set()

    def _produce(
        self,
        producer: Producer,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        record_id: str | None,
        hostile: Hostile | None,
    ) -> None:
        while True:
            try:
                producer.produce(
                    topic, key=key, value=value, on_delivery=self._on_delivery(record_id, hostile)
                )
                return
            except BufferError:
                producer.poll(0.1)  # queue full (a broker outage): wait for room


# --------------------------------------------------------------------------- output side


def _consumer(bootstrap: str, topic: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("chaos-reader"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50_000_000,
        }
    )
    consumer.subscribe([topic])
    return consumer


class Output:
    """Every digest on the output topic, indexed by record id as it arrives."""

    def __init__(self, settings: Settings) -> None:
        self._consumer = _consumer(settings.kafka_bootstrap_servers, settings.output_topic)
        self.digest_ids: dict[str, set[str]] = {}  # record id -> digest ids
        self.first_opened: dict[str, float] = {}  # record id -> earliest opened_at (s)
        self.dropped: dict[str, int] = {}  # digest id -> dropped
        self.copies: dict[str, int] = {}  # digest id -> messages (parts and repeats)
        self.messages = 0

    def poll(self, timeout: float = 0.2) -> None:
        """Read whatever arrived."""
        for message in self._consumer.consume(5000, timeout=timeout):
            if message.error() is not None:
                continue
            self.messages += 1
            digest = codec.decode_digest(message.value() or b"")
            self.dropped[digest.id] = digest.dropped
            self.copies[digest.id] = self.copies.get(digest.id, 0) + 1
            opened = digest.opened_at / 1000
            for record in digest.records:
                self.digest_ids.setdefault(record.id, set()).add(digest.id)
                if opened < self.first_opened.get(record.id, float("inf")):
                    self.first_opened[record.id] = opened

    def close(self) -> None:
        """Leave the group."""
        self._consumer.close()


@dataclass
class DeadLetter:
    """One DLQ message, decoded headers."""

    reason: str
    detail: str
    source_topic: str
    partition: int
    offset: int
    key: bytes | None


class DeadLetterLog:
    """Every dead letter, indexed by source coordinates."""

    def __init__(self, settings: Settings) -> None:
        self._consumer = _consumer(settings.kafka_bootstrap_servers, settings.dlq_topic)
        self.letters: list[DeadLetter] = []
        self.by_source: dict[tuple[int, int], DeadLetter] = {}
        self._events_topic = settings.events_topic

    def poll(self, timeout: float = 0.1) -> None:
        """Read whatever arrived."""
        for message in self._consumer.consume(5000, timeout=timeout):
            if message.error() is not None:
                continue
            headers: dict[str, str] = {}
            pairs = message.headers() or []
            for name, raw in pairs if isinstance(pairs, list) else pairs.items():
                headers[name] = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else ""
            key = message.key()
            letter = DeadLetter(
                reason=headers.get("dlq.reason", ""),
                detail=headers.get("dlq.detail", ""),
                source_topic=headers.get("dlq.source.topic", ""),
                partition=int(headers.get("dlq.source.partition", "-1")),
                offset=int(headers.get("dlq.source.offset", "-1")),
                key=key if isinstance(key, bytes) else None,
            )
            self.letters.append(letter)
            if letter.source_topic == self._events_topic:
                self.by_source[(letter.partition, letter.offset)] = letter

    def close(self) -> None:
        """Leave the group."""
        self._consumer.close()


# --------------------------------------------------------------------------- accounting


@dataclass
class Figures:
    """One scenario's line."""

    scenario: str
    sent: int
    delivered: int
    duplicated: int
    dead_lettered: int
    dropped: int
    lost: int
    note: str = ""
    forfeited: int = 0  # lost by contract (on_state_loss=continue), not counted in `lost`

    def line(self) -> str:
        """The one-line summary."""
        text = (
            f"chaos {self.scenario}: sent={self.sent} delivered={self.delivered} "
            f"duplicated={self.duplicated} dead-lettered={self.dead_lettered} "
            f"dropped={self.dropped} lost={self.lost}"
        )
        if self.forfeited:
            text += f" forfeited-by-contract={self.forfeited}"
        return f"{text} ({self.note})" if self.note else text


@dataclass
class Accounting:
    """Where every acknowledged event id ended up."""

    load: Load
    output: Output
    dlq: DeadLetterLog
    expected_drops: set[str] = field(default_factory=set)  # ids the contract drops (max age)
    extra: dict[str, Sent] = field(default_factory=dict)  # valid events among hostile input

    def tracked(self) -> dict[str, Sent]:
        """Every event id that must come out, with its acknowledgement."""
        return {**self.load.acked_copy(), **self.extra}

    def dead_lettered_ids(self) -> set[str]:
        """Tracked event ids whose source offset is in the DLQ (should be none)."""
        return {
            rid
            for rid, sent in self.tracked().items()
            if (sent.partition, sent.offset) in self.dlq.by_source
        }

    def missing(self) -> set[str]:
        """Acknowledged event ids not (yet) accounted for."""
        delivered = self.output.digest_ids
        return {
            rid for rid in self.tracked() if rid not in delivered and rid not in self.expected_drops
        } - self.dead_lettered_ids()

    def wait_quiet(self, quiet: float, timeout: float = 120.0) -> None:
        """Poll until the set of missing ids has not changed for `quiet` seconds."""
        deadline = time.monotonic() + timeout
        last = len(self.missing())
        since = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - since < quiet:
            self.output.poll()
            self.dlq.poll(0)
            now = len(self.missing())
            if now != last:
                last, since = now, time.monotonic()

    def wait_complete(self, timeout: float, allowed_missing: set[str] | None = None) -> None:
        """Poll the outputs until every event is accounted for (or the deadline passes)."""
        deadline = time.monotonic() + timeout
        allowed = allowed_missing or set()
        while time.monotonic() < deadline:
            self.output.poll()
            self.dlq.poll(0)
            if self.load.finished.is_set() and not (self.missing() - allowed):
                # Catch stragglers (repeats of the last digests) for a moment.
                settle = time.monotonic() + 2.0
                while time.monotonic() < settle:
                    self.output.poll()
                    self.dlq.poll(0)
                return
        # Timed out: the figures line (lost > 0) tells what is missing.

    def duplicated(self, exclude: set[str] | None = None) -> dict[str, set[str]]:
        """Record ids that appeared under two or more digest ids."""
        skip = exclude or set()
        return {
            rid: ids
            for rid, ids in self.output.digest_ids.items()
            if len(ids) > 1 and rid not in skip
        }

    def figures(
        self,
        scenario: str,
        *,
        dropped_counted: int | None = None,
        note: str = "",
        duplicates_exclude: set[str] | None = None,
        dead_lettered: int | None = None,
    ) -> Figures:
        """The scenario's figures; dropped defaults to the drops the digests reported."""
        missing = self.missing()
        dropped = (
            dropped_counted if dropped_counted is not None else sum(self.output.dropped.values())
        )
        ours = {rid for rid in self.tracked() if rid in self.output.digest_ids}
        return Figures(
            scenario=scenario,
            sent=len(self.load.acked) + len(self.load.hostile_acked),
            delivered=len(ours),
            duplicated=len(self.duplicated(duplicates_exclude)),
            dead_lettered=(
                dead_lettered if dead_lettered is not None else len(self.dead_lettered_ids())
            ),
            dropped=dropped + len(self.expected_drops),
            lost=len(missing),
            note=note,
        )


def report(figures: Figures) -> None:
    """Print the line (visible with -s) and append it to the results file when asked."""
    line = figures.line()
    print(f"\n{line}")
    path = os.environ.get(RESULTS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(line + "\n")


# --------------------------------------------------------------------------- processes


class Services:
    """The service processes of one scenario; every one is stopped by pid at the end."""

    def __init__(self, settings: Settings, **env: str) -> None:
        self.settings = settings
        self.env = env
        self.all: list[ServiceProcess] = []
        self._dumps: list[Path] = []

    def start(self, roles: str = "ingest,scheduler,delivery", **env: str) -> ServiceProcess:
        """Start one `digest-stream run`; it dumps its counters on a graceful stop."""
        dump = Path(tempfile.gettempdir()) / f"{unique('metrics')}.prom"
        self._dumps.append(dump)
        proc = ServiceProcess(
            self.settings, roles, {**self.env, **env, METRICS_DUMP_ENV: str(dump)}
        )
        self.all.append(proc)
        return proc

    def wait_started(self, proc: ServiceProcess, timeout: float = 60) -> None:
        """Until the process logged that its roles started."""

        def started() -> bool:
            assert proc.popen.poll() is None, f"service exited early:\n{proc.log()[-3000:]}"
            return "started roles" in proc.log()

        wait_until(started, timeout, "the service to start", 0.1)

    def kill(self, proc: ServiceProcess) -> None:
        """SIGKILL and reap."""
        proc.kill()
        assert proc.popen.returncode == -signal.SIGKILL
        proc.stop()  # closes its log file

    def alive(self) -> list[ServiceProcess]:
        """Processes still running."""
        return [p for p in self.all if p.popen.poll() is None]

    def stop_all(self) -> list[int]:
        """Graceful stop of every running process; their exit codes."""
        return [p.stop(timeout=90) for p in self.alive()]

    def counter(self, name: str, **labels: str) -> float:
        """Sum of a counter over every process that stopped gracefully (dumped its counters)."""
        total = 0.0
        for dump in self._dumps:
            if not dump.exists():
                continue
            for family in text_string_to_metric_families(dump.read_text()):
                for sample in family.samples:
                    if sample.name == name and all(
                        sample.labels.get(k) == v for k, v in labels.items()
                    ):
                        total += sample.value
        return total

    def logs(self) -> str:
        """Every process's log, concatenated."""
        return "\n".join(p.log() for p in self.all)

    def cleanup(self) -> None:
        """Stop everything still running; remove the dumps."""
        for proc in self.all:
            with contextlib.suppress(Exception):
                proc.stop(timeout=30)
        for dump in self._dumps:
            dump.unlink(missing_ok=True)


# --------------------------------------------------------------------------- own servers


class OwnRedis:
    """A redis-server of our own (RDB in a temp dir), for scenarios that kill or roll it back."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="chaos-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start (loading dump.rdb from the dir when there is one) and wait for PING."""
        server = shutil.which("redis-server")
        assert server, "redis-server is not installed (make stack-up installs it)"
        self.proc = subprocess.Popen(
            [
                server, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--dbfilename", "dump.rdb", "--save", "", "--appendonly", "no",
                "--daemonize", "no", "--logfile", str(self.dir / "redis.log"),
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(self._pings, 30, f"own redis on {self.port}", 0.05)

    def client(self) -> redis.Redis:
        """A client (short timeouts)."""
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def _pings(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, "own redis exited"
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def snapshot(self) -> float:
        """BGSAVE and wait until it is on disk; returns the wall time of the snapshot."""
        client = self.client()
        before = client.lastsave()
        at = time.time()
        client.bgsave()
        wait_until(lambda: client.lastsave() != before, 60, "BGSAVE to finish", 0.05)
        assert client.info("persistence")["rdb_last_bgsave_status"] == "ok"
        return at

    def shutdown_nosave(self) -> None:
        """SHUTDOWN NOSAVE: every write since the last snapshot is gone."""
        assert self.proc is not None
        with contextlib.suppress(redis.ConnectionError):
            self.client().shutdown(nosave=True)
        self.proc.wait(30)

    def wipe_snapshot(self) -> None:
        """Remove the RDB so the next start is empty."""
        (self.dir / "dump.rdb").unlink(missing_ok=True)

    def stop(self) -> None:
        """Kill by pid and remove the data."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


class OwnKafka:
    """A single KRaft broker of our own whose data survives a stop, for broker restarts."""

    def __init__(self) -> None:
        self.port = free_port()
        self.controller_port = free_port()
        self.home = Path(tempfile.mkdtemp(prefix="chaos-kafka-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._java = shutil.which("java") or "java"
        self._libs = devstack.kafka_libs()
        self._log4j = self.home / "log4j2.xml"
        self._log4j.write_text(devstack._LOG4J2_XML)
        self._props = self.home / "server.properties"
        self._props.write_text(self._properties())
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        formatted = subprocess.run(
            [self._java, *self._opts(), "-cp", f"{self._libs}/*", "kafka.tools.StorageTool",
             "format", "-t", cluster_id, "-c", str(self._props)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert formatted.returncode == 0, formatted.stderr or formatted.stdout

    def _opts(self) -> list[str]:
        return [f"-Dlog4j2.configurationFile={self._log4j}", "-Djava.awt.headless=true"]

    def _properties(self) -> str:
        stock = devstack._kafka_properties(self.home / "data")
        return (
            stock.replace(f":{devstack.CONTROLLER_PORT}", f":{self.controller_port}")
            .replace(f":{devstack.KAFKA_PORT}", f":{self.port}")
            .replace("num.partitions=4", "num.partitions=1")
        )

    def start(self) -> None:
        """Start the broker (same data as before) and wait for a metadata answer."""
        log = (self.home / "kafka.log").open("ab")
        self.proc = subprocess.Popen(
            [self._java, "-Xmx512m", "-Xms128m", "-XX:+UseG1GC", *self._opts(),
             "-cp", f"{self._libs}/*", "kafka.Kafka", str(self._props)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        log.close()
        wait_until(self._answers, 120, f"own kafka on {self.port}", 0.2)

    def _answers(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, "own kafka exited"
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        try:
            return bool(admin.list_topics(timeout=2).brokers)
        except Exception:
            return False

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM (a controlled broker shutdown) and wait; SIGKILL past the timeout."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def destroy(self) -> None:
        """Stop and remove its data."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.home, ignore_errors=True)


@contextlib.contextmanager
def scenario(
    settings: Settings, **service_env: str
) -> Iterator[tuple[Services, Output, DeadLetterLog]]:
    """Services and readers of one scenario, all stopped at the end whatever happens."""
    services = Services(settings, **service_env)
    output = Output(settings)
    dlq = DeadLetterLog(settings)
    try:
        yield services, output, dlq
    finally:
        services.cleanup()
        output.close()
        dlq.close()


def need_chaos() -> pytest.MarkDecorator:
    """Skip marker for the long runs unless DIGEST_STREAM_CHAOS=1 (make chaos)."""
    return pytest.mark.skipif(
        not chaos_enabled(), reason=f"long chaos run: set {CHAOS_ENV}=1 (make chaos)"
    )
