"""The Kafka Streams peer of scenario 7 (bench/peers/kafka-streams, built by
`make bench-peer-kstreams`): the Java application in a process of its own, stopped by pid.

The peer consumes a topic of plain Avro events into session windows with
`suppress(untilWindowCloses)` on RocksDB and writes one digest per session to an output topic.
Its windows close when stream time (the events' own timestamps) passes them, so the bench ends
its backlog with one later event per partition (`closers`), which the rates leave out; the peer
asks for a commit when it reads one, so at-least-once keeps Kafka's default commit interval.

It runs as a user would deploy it, not handicapped: Kafka's default commit interval for each
guarantee (30 s at-least-once, 100 ms exactly-once), a record cache sized to the working set, a
fixed heap with G1, one copy of the aggregate per update, event time from the Avro timestamp.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from bench.common import Stack, create_topics, delete_topics, unique
from digest_stream.wire import codec
from digest_stream.wire.models import Event

ROOT = Path(__file__).resolve().parents[1]
JAR = ROOT / "bench" / "peers" / "kafka-streams" / "target" / "kstreams-peer.jar"
SCHEMA = ROOT / "digest_stream" / "wire" / "schemas" / "event.avsc"
GUARANTEES = ("at-least-once", "exactly-once")
# A service's JVM: a fixed heap (no resizing pauses) and G1. 2 GiB holds the unbounded suppress
# buffer of the longest run (1.5 million events, every session open until the closers).
JVM = ["-Xms2g", "-Xmx2g", "-XX:+UseG1GC"]
GAP_MS = 10_000
# The record cache sized to the working set (Kafka's default is 10 MB): 100,000 events of
# 200 B in digests are about 25 MB, and a flush per commit or eviction is what it saves.
CACHE_BYTES = 128 << 20
# The long runs' cache: 1.5 million events of 200 B are about 350 MB of digests (75,000
# sessions of 20 at 20 per timeline): with 128 MB the peer ran at 18,185/s there, with 512 MB
# at 48,931/s (issue 37's long run).
# One size for every long run, so that their shapes compare; the heap above holds it too.
LONG_CACHE_BYTES = 512 << 20
# The event time of the closers: far enough past the backlog to close every session (end + gap).
CLOSER_AHEAD_MS = 10 * 60_000
CLOSER = b"closer"  # the peer asks for a commit when it reads this key (KafkaStreamsPeer.CLOSER)
# What the peer prints when its client first reaches RUNNING (every task restored), with the
# records its earlier-ready tasks processed before: its steady rate starts there.
RUNNING = re.compile(rb"running after (\d+) records")
# Warnings and errors only; "info" (and showDateTime) shows the client's state transitions.
LOG = ["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]
STOP_TIMEOUT = 30.0  # the peer closes its streams client within 10 s of SIGTERM
OUTPUT_TIMEOUT = 60.0
# digest-stream / Kafka Streams (issue 27): twice at-least-once at 1 and 20 events per timeline
# (consecutive or interleaved: "20i"), five times at 1,000, ahead (above 1) of exactly-once
# everywhere.
TARGETS = {
    "at-least-once": {"1": 2.0, "20": 2.0, "20i": 2.0, "1000": 5.0},
    "exactly-once": {"1": 1.0, "20": 1.0, "20i": 1.0, "1000": 1.0},
}
# CPU-seconds per event of digest-stream (service + Redis) / Kafka Streams at-least-once's JVM
# (issue 27): at most half at 1 and 20 events per timeline, a fifth at 1,000.
CPU_TARGETS = {"1": 0.5, "20": 0.5, "20i": 0.5, "1000": 0.2}


def target(least: float) -> tuple[str, float]:
    """A digest-stream / Kafka Streams target as text, and the least ratio that meets it
    ("ahead" is strictly above 1)."""
    return (f">= {least:g}", least) if least > 1 else ("> 1", 1.0 + 1e-9)


def available() -> str | None:
    """None when the peer can run; otherwise what is missing and how to get it."""
    if not JAR.exists():
        return f"{JAR.relative_to(ROOT)} not built: run `make bench-peer-kstreams` (Maven, JDK 17)"
    if shutil.which("java") is None:
        return "no `java` on PATH: the Kafka Streams peer needs a JDK 17"
    return None


def closers(bootstrap: str, topic: str, partitions: int) -> None:
    """One event per partition, its event time CLOSER_AHEAD_MS ahead: stream time passes every
    session of the backlog, so suppress emits them (the closer's own session stays open), and
    the peer commits when it reads it."""
    producer = Producer({"bootstrap.servers": bootstrap})
    ahead = int(time.time() * 1000) + CLOSER_AHEAD_MS
    value = codec.encode_event(Event(id="closer", timestamp=ahead, payload=b""))
    for partition in range(partitions):
        producer.produce(topic, key=CLOSER, value=value, partition=partition)
    if producer.flush(30):
        raise RuntimeError(f"the closers of {topic} were not acknowledged")


class Peer:
    """One run of the peer: its output topic, application.id (the consumer group whose
    committed offsets the bench watches) and RocksDB state dir are its own, and are removed,
    with the internal changelog topics Kafka Streams created, when the with block ends."""

    def __init__(
        self,
        env: Stack,
        input_topic: str,
        guarantee: str,
        *,
        threads: int = 1,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        if guarantee not in GUARANTEES:
            raise ValueError(f"guarantee {guarantee!r}: one of {GUARANTEES}")
        self.env = env
        self.input = input_topic
        self.guarantee = guarantee
        self.threads = threads  # num.stream.threads: the input's partitions shared among them
        self.cache_bytes = cache_bytes  # the whole client's record cache, over its threads
        self.output = unique("ks-out")
        self.group = unique("ks-app")  # the application.id is the group id
        self.state_dir = tempfile.mkdtemp(prefix="bench-kstreams-")
        self.log = tempfile.NamedTemporaryFile(prefix="bench-kstreams-", suffix=".log")  # noqa: SIM115
        self.process: subprocess.Popen[bytes] | None = None
        self.processed: int | None = None

    def __enter__(self) -> Peer:
        create_topics(self.env.bootstrap, [self.output], 4)
        return self

    def launch(self) -> float:
        """Start the JVM; returns the perf_counter time just before."""
        command = [
            "java", *JVM, *LOG, "-jar", str(JAR),
            f"--bootstrap={self.env.bootstrap}", f"--input={self.input}",
            f"--output={self.output}", f"--application-id={self.group}",
            f"--state-dir={self.state_dir}", f"--schema={SCHEMA}",
            f"--guarantee={self.guarantee}", f"--gap-ms={GAP_MS}",
            f"--cache-bytes={self.cache_bytes}", f"--threads={self.threads}",
        ]  # fmt: skip
        started = time.perf_counter()
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        return started

    def check(self) -> None:
        """Raise if the JVM exited."""
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"the Kafka Streams peer exited ({self.process.returncode}):\n{self.tail()}"
            )

    def tail(self) -> str:
        """The end of the JVM's output."""
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    def running(self) -> int | None:
        """None until the peer's client is RUNNING, then the records processed before (its
        steady rate starts there: at at-least-once's 30 s interval, a short run's first commit
        is its last, and tasks restore one after another, processing as each is ready)."""
        if self.processed is None:
            found = RUNNING.search(Path(self.log.name).read_bytes())
            self.processed = int(found[1]) if found else None
        return self.processed

    def pids(self) -> list[int]:
        """The JVM's pid, while it runs (for its CPU time)."""
        return [] if self.process is None else [self.process.pid]

    def stop(self) -> None:
        """SIGTERM by pid (the peer closes its client), SIGKILL past STOP_TIMEOUT."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def digests(self, expected: int, timeout: float = OUTPUT_TIMEOUT) -> tuple[int, int]:
        """Read the output topic until `expected` digests arrived or `timeout` passed
        (read_committed: an exactly-once run shows only committed ones): (digests, records
        counted in them)."""
        consumer = Consumer(
            {"bootstrap.servers": self.env.bootstrap, "group.id": unique("ks-read")}
            | {"enable.auto.commit": False, "isolation.level": "read_committed"}
        )
        consumer.assign([TopicPartition(self.output, p, 0) for p in range(4)])
        seen = records = 0
        deadline = time.monotonic() + timeout
        try:
            while seen < expected and time.monotonic() < deadline:
                for message in consumer.consume(10_000, 0.2):
                    value = message.value()
                    if message.error() is None and value is not None:
                        seen += 1
                        records += struct.unpack_from(">i", value)[0]  # the digest's count
        finally:
            consumer.close()
        return seen, records

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.log.close()
            shutil.rmtree(self.state_dir, ignore_errors=True)
            admin = AdminClient({"bootstrap.servers": self.env.bootstrap})
            names = admin.list_topics(timeout=10).topics
            internal = [name for name in names if name.startswith(f"{self.group}-")]
            delete_topics(self.env.bootstrap, [self.output, *internal])
