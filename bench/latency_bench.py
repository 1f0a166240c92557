"""Scenarios 2 and 3: immediate-path latency and scheduled-path lateness of the running service.

    python -m bench.latency_bench [--quick] [--only immediate,scheduled]

The service runs as `digest-stream run` (all roles, one process) on topics, groups and a Redis
namespace of its own, started and stopped (SIGTERM, by pid) by this module. Clocks: producer,
service and reader share this host's clock, so differences of wall times are meaningful.

- immediate: every 20 ms the first event of a new timeline is produced; its latency is the time
  from just before `produce()` to the moment a reader of the output topic holds the digest with
  that event. Meanwhile a background producer sends 1,000 events/s (the full run repeats it at
  10,000 events/s) over 5,000 other timelines,
  which were given their first event (and digest) beforehand: they are cooling down, so the
  background accumulates in Redis, the steady state of a busy service.
- scheduled: 10,000 timelines get a first event spread over one minute (an immediate digest,
  then a cool-down of `minimum_delay` = 10 s) and a second event 2 s later, so they come due over
  one minute. Lateness = the digest's publish time (its Kafka CreateTime, set by the service's
  producer) minus its due time (the ScheduleEntry's `scheduled_at`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition

from bench.common import (
    Stack,
    create_topics,
    delete_namespace,
    delete_topics,
    machine,
    percentile,
    run_args,
    run_part,
    stack,
    unique,
    write_result,
)
from digest_stream.kafka import take_batch
from digest_stream.wire import codec
from digest_stream.wire.models import Event, ScheduleReason

PARTITIONS = 4
BACKGROUND_TIMELINES = 5_000
SERVICE = Path(sys.executable).parent / "digest-stream"
STOP_TIMEOUT = 70.0


class Service:
    """`digest-stream run` on private topics and namespace; stopped by its pid.

    The topics are created on entry and the service started then, unless `start=False`: then
    `launch()` starts it (a bench fills the events topic first), and may start it again with
    other roles or more processes once the earlier ones are stopped (`stop()`).
    """

    def __init__(
        self, env: Stack, *, start: bool = True, settings: dict[str, str] | None = None
    ) -> None:
        self.env = env
        self.topics = {
            "events": unique("events"),
            "schedule": unique("sched"),
            "output": unique("out"),
            "dlq": unique("dlq"),
        }
        self.namespace = unique("ns")
        self.group = unique("g")
        self.delivery_group = unique("gd")
        self.settings = settings or {}
        self.start = start
        self.processes: list[subprocess.Popen[bytes]] = []
        self.log = tempfile.NamedTemporaryFile(prefix="bench-service-", suffix=".log")  # noqa: SIM115

    def __enter__(self) -> Service:
        create_topics(self.env.bootstrap, list(self.topics.values()), PARTITIONS)
        if self.start:
            self.launch()
        return self

    def launch(self, roles: str = "ingest,scheduler,delivery", processes: int = 1) -> float:
        """Start `processes` instances of `digest-stream run --roles ...`; returns the
        perf_counter time just before the first one starts."""
        variables = {
            "DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS": self.env.bootstrap,
            "DIGEST_STREAM_REDIS_URL": self.env.redis_url,
            "DIGEST_STREAM_EVENTS_TOPIC": self.topics["events"],
            "DIGEST_STREAM_SCHEDULE_TOPIC": self.topics["schedule"],
            "DIGEST_STREAM_OUTPUT_TOPIC": self.topics["output"],
            "DIGEST_STREAM_DLQ_TOPIC": self.topics["dlq"],
            "DIGEST_STREAM_GROUP_ID": self.group,
            "DIGEST_STREAM_DELIVERY_GROUP_ID": self.delivery_group,
            "DIGEST_STREAM_NAMESPACE": self.namespace,
        }
        variables |= {f"DIGEST_STREAM_{k.upper()}": v for k, v in self.settings.items()}
        environment = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_STREAM_")}
        started = time.perf_counter()
        for _ in range(processes):
            self.processes.append(
                subprocess.Popen(
                    [str(SERVICE), "run", "--roles", roles],
                    env=environment | variables,
                    stdout=self.log,
                    stderr=subprocess.STDOUT,
                )
            )
        return started

    def check(self) -> None:
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(f"the service exited ({process.returncode}):\n{self.tail()}")

    def tail(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        """Stop every process started (SIGTERM by pid, SIGKILL past STOP_TIMEOUT)."""
        running = [process for process in self.processes if process.poll() is None]
        for process in running:
            os.kill(process.pid, signal.SIGTERM)
        for process in running:
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.log.close()
            delete_topics(self.env.bootstrap, list(self.topics.values()))
            client = redis.Redis.from_url(self.env.redis_url)
            try:
                delete_namespace(client, self.namespace)
            finally:
                client.close()


class Reader(threading.Thread):
    """Reads a topic from the beginning and hands every message, with its arrival time, on."""

    def __init__(self, env: Stack, topic: str, handle: Callable[[Message, float], None]) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {"bootstrap.servers": env.bootstrap, "group.id": unique("reader")}
            | {"enable.auto.commit": False, "fetch.wait.max.ms": 100}
        )
        self.consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
        )
        self.handle = handle
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                # Like the service: wait for one message, then take what is fetched. A plain
                # consume(500, 0.1) would wait out its timeout to fill the batch, adding up
                # to 100 ms to every latency measured.
                for message in take_batch(self.consumer, 500, 0.1):
                    if message.error() is None:
                        self.handle(message, time.time())
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def event(event_id: str, payload: bytes) -> bytes:
    now_ms = int(time.time() * 1000)
    return codec.encode_event(Event(id=event_id, timestamp=now_ms, payload=payload))


def wait_for(condition: Callable[[], bool], timeout: float, service: Service, what: str) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        service.check()
        if time.monotonic() > deadline:
            print(f"  timed out waiting for {what}", flush=True)
            return False
        time.sleep(0.05)
    return True


def _digest_ids(message: Message) -> list[str]:
    return [record.id for record in codec.decode_digest(message.value() or b"").records]


def immediate(env: Stack, seconds: float, rate: int = 1_000, **settings: str) -> dict[str, Any]:
    """Scenario 2: first event of a new timeline -> its digest at a reader, under `rate`
    background events/s (1,000 unless told)."""
    payload = os.urandom(200)
    arrived: dict[str, float] = {}

    warm_digests = [0]

    def on_digest(message: Message, at: float) -> None:
        for record_id in _digest_ids(message):
            if record_id.startswith("p-"):
                arrived[record_id] = at
            elif record_id.startswith("w-"):
                warm_digests[0] += 1

    with Service(env, settings=settings) as service:
        events = service.topics["events"]
        reader = Reader(env, service.topics["output"], on_digest)
        reader.start()
        probes = Producer({"bootstrap.servers": env.bootstrap, "linger.ms": 0})
        background = Producer({"bootstrap.servers": env.bootstrap, "linger.ms": 5})
        stop_background = threading.Event()
        sent_background = [0]

        def load() -> None:  # `rate` events/s: rate / 100 every 10 ms, on schedule
            tick = time.monotonic()
            while not stop_background.is_set():
                for _ in range(rate // 100):
                    n = sent_background[0]
                    key = f"bg-{n % BACKGROUND_TIMELINES}".encode()
                    background.produce(events, key=key, value=event(f"b-{n}", payload))
                    sent_background[0] += 1
                background.poll(0)
                tick += 0.01
                time.sleep(max(0.0, tick - time.monotonic()))

        try:
            # Warm up: the service has joined its groups once a digest comes out.
            probes.produce(events, key=b"warm", value=event("p-warm", payload))
            probes.flush(10)
            if not wait_for(lambda: "p-warm" in arrived, 90, service, "the service to start"):
                raise RuntimeError(f"service never delivered:\n{service.tail()}")
            # Steady state: the background timelines are already in their cool-down, so the
            # background load accumulates (the common case) instead of being 1,000 new
            # timelines a second that each want an immediate digest of their own.
            for n in range(BACKGROUND_TIMELINES):
                background.produce(events, key=f"bg-{n}".encode(), value=event(f"w-{n}", payload))
                background.poll(0)
            background.flush(30)
            # Not fatal: the probes are still measured, but under a background partly made of
            # new timelines (recorded as background_first_digests < background_timelines).
            wait_for(
                lambda: warm_digests[0] >= BACKGROUND_TIMELINES,
                60,
                service,
                "the background timelines' first digests",
            )
            first_digests = warm_digests[0]
            loader = threading.Thread(target=load, daemon=True)
            loader.start()
            time.sleep(1.0)  # let the background reach its rate
            sent: dict[str, float] = {}
            tick, i = time.monotonic(), 0
            end = tick + seconds
            while time.monotonic() < end:
                probe_id = f"p-{i}"
                value = event(probe_id, payload)
                sent[probe_id] = time.time()
                probes.produce(events, key=f"probe-{i}".encode(), value=value)
                probes.poll(0)
                i += 1
                tick += 0.02
                time.sleep(max(0.0, tick - time.monotonic()))
            stop_background.set()
            loader.join(5)
            # Percentiles are over the delivered probes; "delivered" < "probes" says some are
            # missing (the report marks the row not met).
            wait_for(lambda: all(p in arrived for p in sent), 15, service, "the last probes")
        finally:
            stop_background.set()
            reader.stop()
            probes.flush(5)
            background.flush(5)
    latencies = [(arrived[p] - t) * 1000 for p, t in sent.items() if p in arrived]
    return {
        "settings": settings,
        "target_background_rate": rate,
        "seconds": seconds,
        "probes": len(sent),
        "delivered": len(latencies),
        "background_timelines": BACKGROUND_TIMELINES,
        "background_first_digests": first_digests,
        "background_events": sent_background[0],
        "background_rate": round(sent_background[0] / (seconds + 1.0)),
        "p50_ms": round(percentile(latencies, 0.50), 1),
        "p90_ms": round(percentile(latencies, 0.90), 1),
        "p99_ms": round(percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1) if latencies else None,
        "target_p99_ms": 50,
    }


def scheduled(env: Stack, timelines: int, spread: float) -> dict[str, Any]:
    """Scenario 3: lateness of scheduled digests, `timelines` coming due over `spread` seconds."""
    payload = os.urandom(200)
    minimum, second_after = 10.0, 2.0
    due_ms: dict[str, int] = {}
    published_ms: dict[str, int] = {}
    lock = threading.Lock()

    def on_schedule(message: Message, _at: float) -> None:
        entry = codec.decode_schedule_entry(message.value() or b"")
        if entry.reason is ScheduleReason.SCHEDULED:
            with lock:
                # The first one: the cool-down after the measured digest schedules another
                # (empty) tick 10 s later, which retires the timeline.
                due_ms.setdefault(entry.timeline, entry.scheduled_at)

    def on_digest(message: Message, _at: float) -> None:
        if any(record_id.startswith("s-") for record_id in _digest_ids(message)):
            key = message.key()
            with lock:
                published_ms.setdefault(
                    key.decode() if isinstance(key, bytes) else str(key), message.timestamp()[1]
                )

    settings = {
        "minimum_delay": str(minimum),
        "increment_delay": "0",
        "maximum_delay": "60",
        "ttl": "600",
    }
    with Service(env, settings=settings) as service:
        events = service.topics["events"]
        readers = [
            Reader(env, service.topics["schedule"], on_schedule),
            Reader(env, service.topics["output"], on_digest),
        ]
        for reader in readers:
            reader.start()
        producer = Producer({"bootstrap.servers": env.bootstrap, "linger.ms": 5})
        try:
            producer.produce(events, key=b"warm", value=event("w", payload))
            producer.flush(10)
            warm: dict[str, bool] = {}

            def on_any(_message: Message, _at: float) -> None:
                warm["x"] = True

            probe = Reader(env, service.topics["output"], on_any)
            probe.start()
            ok = wait_for(lambda: bool(warm), 90, service, "the service to start")
            probe.stop()
            if not ok:
                raise RuntimeError(f"service never delivered:\n{service.tail()}")
            plan = sorted(
                [(i * spread / timelines, "f", i) for i in range(timelines)]
                + [(i * spread / timelines + second_after, "s", i) for i in range(timelines)]
            )
            start = time.monotonic()
            for offset, kind, i in plan:
                time.sleep(max(0.0, start + offset - time.monotonic()))
                producer.produce(
                    events, key=f"late-{i}".encode(), value=event(f"{kind}-{i}", payload)
                )
                producer.poll(0)
            producer.flush(10)
            # Lateness is over the digests that arrived; "delivered" < "probes" says some did
            # not (the report marks the row not met).
            wait_for(
                lambda: len(published_ms) >= timelines,
                minimum + 30,
                service,
                "every scheduled digest",
            )
        finally:
            for reader in readers:
                reader.stop()
    with lock:
        lateness = [published_ms[t] - due_ms[t] for t in published_ms if t in due_ms]
    return {
        "timelines": timelines,
        "spread_s": spread,
        "minimum_delay_s": minimum,
        "probes": timelines,
        "delivered": len(lateness),
        "p50_ms": round(percentile(lateness, 0.50), 1),
        "p90_ms": round(percentile(lateness, 0.90), 1),
        "p99_ms": round(percentile(lateness, 0.99), 1),
        "max_ms": max(lateness) if lateness else None,
        "target_p99_ms": 250 + 100,
    }


SCENARIOS = ("immediate", "scheduled")


def main(argv: list[str] | None = None) -> int:
    args = run_args(__doc__.splitlines()[0], SCENARIOS, "shorter runs", argv)
    env = stack()
    started = time.perf_counter()
    result: dict[str, Any] = {"machine": machine(env.redis_url), "quick": args.quick}
    if args.wants("immediate"):
        seconds = 15.0 if args.quick else 60.0
        print(f"scenario 2: immediate-path latency, {seconds:.0f} s under 1k events/s", flush=True)
        result["immediate"] = run_part(env.redis_url, args, lambda: immediate(env, seconds))
        if not args.quick:
            # Where the time goes: the same run with batches that wait 5 ms to fill, not 50.
            print("scenario 2 again with DIGEST_STREAM_BATCH_TIMEOUT=0.005", flush=True)
            result["immediate_batch_timeout_5ms"] = run_part(
                env.redis_url, args, lambda: immediate(env, seconds, batch_timeout="0.005")
            )
            print("scenario 2 again under 10,000 background events/s", flush=True)
            result["immediate_10k"] = run_part(
                env.redis_url, args, lambda: immediate(env, seconds, rate=10_000)
            )
    if args.wants("scheduled"):
        timelines, spread = (2_000, 20.0) if args.quick else (10_000, 60.0)
        print(f"scenario 3: scheduled lateness, {timelines:,} timelines over {spread:.0f} s")
        result["scheduled"] = run_part(
            env.redis_url, args, lambda: scheduled(env, timelines, spread)
        )
    result["seconds"] = round(time.perf_counter() - started, 1)
    name = "latency_quick" if args.quick else "latency"
    path = write_result(name, result, args.only is not None)
    for part in ("immediate", "immediate_batch_timeout_5ms", "immediate_10k", "scheduled"):
        if part in result:
            r = result[part]
            print(
                f"{name}: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms "
                f"(target p99 < {r['target_p99_ms']} ms), "
                f"{r['delivered']} of {r['probes']} delivered"
            )
    print(f"wrote {path} in {result['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
