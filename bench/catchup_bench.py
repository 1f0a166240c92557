"""Scenarios 7 and 8: catching up a backlog from cold, and delivery throughput.

    python -m bench.catchup_bench [--quick] [--only catchup,delivery,processes,long]

As a new user would meet the service: a backlog of events (200-byte payloads, 4 partitions)
is produced first, then `digest-stream run` starts with default settings (bench/latency_bench's
Service: private topics, groups and namespace; stopped by pid).

- catchup: 100,000 events (in --quick too, for the JVM's sake: see main) at 1, 20 and 1,000
  consecutive events per timeline and at 20 interleaved (SHAPES), all roles in one process,
  timed until the ingest group's committed offsets reach the end of the topic. Against a bare
  consume+decode loop (bench/ingest_bench's raw runner) over the same topic in the same
  repetition. Then the same backlog again with the roles split over two processes (`--roles
  ingest,scheduler` and `--roles delivery`, as docs/benchmarks.md suggests for one box): the
  rate a second core buys when delivery no longer shares the ingest's GIL. At 1 per timeline
  once more with the leading edge published by delivery (`direct_leading_edge=false`), the
  default (the ingest publishes it) as a ratio to that in the same rep.
  The Kafka Streams peer (bench/peer_kstreams.py, `make bench-peer-kstreams`) catches up the
  same backlog in the same repetition, at-least-once and exactly-once, on a topic of its own
  that ends with one later event per partition to close its windows (left out of its rate),
  timed the same way until its application.id group's committed offsets reach the end.
  CPU per event beside each rate: CPU-seconds per 100,000 events of the service's process(es)
  (/proc utime + stime) plus the Redis server (`INFO cpu`), and of the peer's JVM, over the
  same window as the steady rate, so the comparison holds on any host.
- delivery: a backlog of events on as many new timelines (every event an immediate digest).
  The ingest and scheduler roles run first and put one schedule entry per timeline on the
  schedule topic; then they stop and the delivery role alone starts, timed until the delivery
  group's committed offsets reach the end of the schedule topic. Against a bare produce loop:
  the service's idempotent producer settings, the same number of messages of a digest's size
  with the same keys, one flush at the end. Then end to end, in the same repetition: the same
  backlog produced first, `digest-stream run` (all roles, one process) started on it and timed
  until the output topic holds a digest per timeline (the sum of its high watermarks), with
  `direct_leading_edge` off and on (the default); each against the bare producer.
- processes: the 20-per-timeline catch-up with one process and with two processes of all
  roles on this machine (the events/s a second process adds).
- long: the catch-up of backlogs large enough to amortise the JVM's warm-up: 500,000 events
  at one per timeline, and 1.5 million at 20 per timeline, interleaved (as events arrive) and
  consecutive, where Kafka Streams at-least-once runs for several of its 30 s commit intervals
  (200,000 and 300,000 in --quick; LONG; any size for a test run: BENCH_LONG_EVENTS),
  digest-stream and the peer once each, the peer's record cache sized to the longest working
  set (peer_kstreams.LONG_CACHE_BYTES). Then N against N at one per timeline and 20
  interleaved (PAIRED), on the same backlog: two digest-stream processes of all roles (one
  consumer group over the 4 partitions) against the peer with two stream threads (4 tasks),
  CPU per event of both processes + Redis against the JVM's. `make bench` runs it,
  `make bench-quick` not.

Rates: "from cold" divides the backlog by the seconds from launch to the end (process start,
group join, library load included); "steady" counts from the first commit seen (end to end:
the first digest on the output topic; polled every 50 ms) and divides what came after it by
the seconds after it, the way scenario 1 leaves out joining; the Kafka Streams peer's from the
moment its client is RUNNING (every task restored; it prints the records processed by then),
since at-least-once's first commit may be its last. The ratios use the steady rates.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from bench import peer_kstreams
from bench.common import (
    CpuMeter,
    Stack,
    cpu_per_100k,
    create_topics,
    delete_topics,
    machine,
    produce,
    ratio,
    run_args,
    run_part,
    stack,
    summary,
    unique,
    write_result,
)
from bench.ingest_bench import run_raw
from bench.latency_bench import PARTITIONS, Service
from digest_stream.kafka import producer_config
from digest_stream.settings import Settings
from digest_stream.wire import codec
from digest_stream.wire.models import Digest, Event, Record

PAYLOAD = 200
CATCHUP_EVENTS = 100_000  # scenario 7's backlog, in --quick too
POLL = 0.05
CATCHUP_TIMEOUT = 300.0


#: Scenario 7's shapes: key -> (events per timeline, interleaved). Most put a timeline's
#: events next to each other (a batch holds a run of each timeline); "20i" deals the same 20
#: per timeline round-robin over every timeline, as live traffic interleaves them (a batch
#: holds one record each of many timelines, and each add finds its timeline holding more).
SHAPES = {"1": (1, False), "20": (20, False), "20i": (20, True), "1000": (1000, False)}


def shape_label(shape: str) -> str:
    """How a shape reads in the report: "20 event(s)/timeline, interleaved"."""
    per_timeline, interleaved = SHAPES[shape] if shape in SHAPES else (int(shape), False)
    return f"{per_timeline} event(s)/timeline" + (", interleaved" if interleaved else "")


def backlog(
    count: int, per_timeline: int, prefix: str, interleaved: bool = False
) -> list[tuple[bytes, bytes]]:
    """`count` events, `per_timeline` per timeline (key = timeline): consecutive ones, or with
    `interleaved` dealt round-robin over the `count // per_timeline` timelines."""
    payload = os.urandom(PAYLOAD)
    now_ms = int(time.time() * 1000)
    timelines = count // per_timeline
    return [
        (
            f"{prefix}-{i % timelines if interleaved else i // per_timeline:07d}".encode(),
            codec.encode_event(Event(id=f"e-{i:08d}", timestamp=now_ms, payload=payload)),
        )
        for i in range(count)
    ]


#: How long a watermark read keeps asking through retriable broker errors (seconds).
WATERMARK_PATIENCE = 15.0
#: The errors a watermark read asks again after (librdkafka does not mark them retriable here).
_WATERMARK_RETRIES = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
}


class Watermarks:
    """A topic's high watermarks, read with one consumer (so polling opens no client a poll)."""

    def __init__(self, env: Stack, topic: str) -> None:
        self.topic = topic
        self.consumer = Consumer({"bootstrap.servers": env.bootstrap, "group.id": unique("wm")})

    def __enter__(self) -> Watermarks:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.consumer.close()

    def offsets(self) -> list[TopicPartition]:
        """The high watermark of every partition."""
        return [TopicPartition(self.topic, p, self._high(p)) for p in range(PARTITIONS)]

    def _high(self, partition: int) -> int:
        """One partition's high watermark, asked again while the broker answers with a
        retriable error (a leader that moved, or metadata not there yet after the topic's
        creation), for up to WATERMARK_PATIENCE seconds."""
        deadline = time.monotonic() + WATERMARK_PATIENCE
        while True:
            try:
                return int(
                    self.consumer.get_watermark_offsets(TopicPartition(self.topic, partition))[1]
                )
            except KafkaException as error:
                code = error.args[0].code()
                if code not in _WATERMARK_RETRIES or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def total(self) -> int:
        """Messages on the topic: the sum of its high watermarks."""
        return sum(tp.offset for tp in self.offsets())


def end_offsets(env: Stack, topic: str) -> list[TopicPartition]:
    """The high watermarks of every partition of a topic."""
    with Watermarks(env, topic) as marks:
        return marks.offsets()


class Watched(Protocol):
    """What runs while Committed waits: the service, or a peer."""

    def check(self) -> None: ...

    def tail(self) -> str: ...


class Committed:
    """Polls a group's committed offsets on a topic until they reach the given ends; the
    `uncounted` messages at the end (a peer's window closers) count in no rate."""

    def __init__(
        self, env: Stack, group: str, ends: list[TopicPartition], uncounted: int = 0
    ) -> None:
        self.ends = {tp.partition: tp.offset for tp in ends}
        self.total = sum(self.ends.values())
        self.counted = self.total - uncounted
        self.consumer = Consumer({"bootstrap.servers": env.bootstrap, "group.id": group})
        self.topic = ends[0].topic

    def done(self) -> int:
        """Messages below the committed offsets (capped at the ends)."""
        tps = [TopicPartition(self.topic, p) for p in self.ends]
        got = self.consumer.committed(tps, timeout=10)
        return sum(min(max(tp.offset, 0), self.ends[tp.partition]) for tp in got)

    def wait(
        self,
        service: Watched,
        started: float,
        meter: CpuMeter | None = None,
        begun: Callable[[], int | None] | None = None,
        timeout: float = CATCHUP_TIMEOUT,
    ) -> dict[str, Any]:
        """Wait until everything is committed: from-cold and steady rates (and CPU, given a
        meter; steady from `begun()`, if given, instead of the first commit)."""
        try:
            return reach(
                self.done, self.total, service, started, "committed", self.counted, timeout,
                meter=meter, begun=begun,
            )  # fmt: skip
        finally:
            self.consumer.close()


def reach(
    measure: Callable[[], int],
    total: int,
    service: Watched,
    started: float,
    what: str,
    counted: int | None = None,
    timeout: float = CATCHUP_TIMEOUT,
    *,
    meter: CpuMeter | None = None,
    begun: Callable[[], int | None] | None = None,
) -> dict[str, Any]:
    """Poll `measure()` every POLL s until it reaches `total`: from-cold and steady rates of
    `counted` messages (default `total`), steady from the first poll that saw any, or, given
    `begun`, from the first that found it saying how many were done (not None). With a meter
    (made before the launch), CPU-seconds per 100,000 events over the steady window ("cpu")
    and from the launch ("cpu_cold")."""
    counted = total if counted is None else counted
    launch = meter.sample() if meter is not None else {}  # the processes: none yet
    first: tuple[float, int] | None = None
    at_first: dict[str, float] = {}
    threads_first: dict[str, float] = {}
    while True:
        service.check()
        done = measure()
        now = time.perf_counter()
        since = (done or None) if begun is None else begun()
        if first is None and since is not None:
            first = (now, since)
            at_first = meter.sample() if meter is not None else {}
            threads_first = meter.threads() if meter is not None else {}
        if done >= total:
            break
        if now - started > timeout:
            raise RuntimeError(f"{done} of {total} {what} after {timeout} s:\n{service.tail()}")
        time.sleep(POLL)
    assert first is not None
    steady_seconds = now - first[0]
    result: dict[str, Any] = {
        "cold": counted / (now - started),
        "steady": (counted - first[1]) / steady_seconds if steady_seconds else 0.0,
        "seconds": now - started,
        "steady_seconds": steady_seconds,
    }
    if meter is not None:
        at_end = meter.sample()
        launch["process"] = 0.0  # the processes started after the meter's first sample
        result["cpu"] = cpu_per_100k(at_first, at_end, counted - first[1])
        result["cpu_cold"] = cpu_per_100k(launch, at_end, counted)
        # where the service's steady CPU went, by thread (a thread started later from 0)
        steady_events = max(counted - first[1], 1)
        result["threads"] = {
            name: (seconds - threads_first.get(name, 0.0)) * 100_000 / steady_events
            for name, seconds in meter.threads().items()
        }
    return result


#: The leading edge published by the ingest (the default) and by delivery, side by side.
DIRECT = {"direct_leading_edge": "true"}
OFF = {"direct_leading_edge": "false"}


def catch_up(
    env: Stack,
    pairs: list[tuple[bytes, bytes]],
    processes: int = 1,
    split: bool = False,
    settings: dict[str, str] | None = None,
    timeout: float = CATCHUP_TIMEOUT,
) -> dict[str, Any]:
    """One from-cold run of `digest-stream run` (all roles) over a fresh backlog; `split`: the
    roles in two processes instead (`--roles ingest,scheduler` and `--roles delivery`);
    `settings`: more of the service's settings (e.g. OFF: direct_leading_edge=false). Rates,
    and CPU per 100,000 events of the service's processes ("process") and Redis ("redis")."""
    with Service(env, start=False, settings=settings) as service:
        produce(env.bootstrap, service.topics["events"], pairs)
        ends = end_offsets(env, service.topics["events"])
        meter = CpuMeter(lambda: [process.pid for process in service.processes], env.redis_url)
        try:
            if split:
                started = service.launch(roles="ingest,scheduler")
                service.launch(roles="delivery")
            else:
                started = service.launch(processes=processes)
            return Committed(env, service.group, ends).wait(service, started, meter, None, timeout)
        finally:
            meter.close()


def kstreams_catch_up(
    env: Stack,
    pairs: list[tuple[bytes, bytes]],
    guarantee: str,
    timeout: float = CATCHUP_TIMEOUT,
    *,
    threads: int = 1,
    cache_bytes: int = peer_kstreams.CACHE_BYTES,
) -> dict[str, Any]:
    """One from-cold run of the Kafka Streams peer (`threads` stream threads, a record cache
    of `cache_bytes` in all) over a fresh copy of the backlog plus one closer per partition:
    rates (steady from RUNNING) and its JVM's CPU per 100,000 events ("process"); checks one
    digest per timeline, holding every event."""
    topic = unique("ks-in")
    # PARTITIONS (4) tasks: enough for two stream threads, as for two service processes.
    create_topics(env.bootstrap, [topic], PARTITIONS)
    try:
        produce(env.bootstrap, topic, pairs)
        peer_kstreams.closers(env.bootstrap, topic, PARTITIONS)
        ends = end_offsets(env, topic)
        peer_run = peer_kstreams.Peer(
            env, topic, guarantee, threads=threads, cache_bytes=cache_bytes
        )
        with peer_run as peer:
            meter = CpuMeter(peer.pids)
            started = peer.launch()
            committed = Committed(env, peer.group, ends, uncounted=PARTITIONS)
            run = committed.wait(peer, started, meter, peer.running, timeout)
            timelines = len({key for key, _ in pairs})
            # The long run's output is 75,000 digests of 20 records (about 350 MB) to read back.
            reading = max(peer_kstreams.OUTPUT_TIMEOUT, len(pairs) / 10_000)
            digests, records = peer.digests(timelines, reading)
            if (digests, records) != (timelines, len(pairs)):
                raise RuntimeError(
                    f"Kafka Streams {guarantee}: {digests} digests of {records} events, "
                    f"expected {timelines} of {len(pairs)}:\n{peer.tail()}"
                )
            return run
    finally:
        delete_topics(env.bootstrap, [topic])


def catchup(env: Stack, count: int, reps: int) -> dict[str, Any]:
    """Scenario 7: catch-up from cold at 1, 20 and 1,000 events per timeline vs raw, and vs
    the Kafka Streams peer when it is built."""
    result: dict[str, Any] = {"events": count, "payload_bytes": PAYLOAD, "shapes": {}}
    missing = peer_kstreams.available()
    guarantees = peer_kstreams.GUARANTEES if missing is None else ()
    if missing is not None:
        result["kstreams_missing"] = missing
        print(f"  Kafka Streams peer skipped: {missing}", flush=True)
    for shape, (per_timeline, interleaved) in SHAPES.items():
        pairs = backlog(count, per_timeline, "c", interleaved)
        raw_topic = unique("raw")
        create_topics(env.bootstrap, [raw_topic], PARTITIONS)
        raw, cold, steady, split, off = [], [], [], [], []
        cpu: list[dict[str, float]] = []
        cpu_cold: list[dict[str, float]] = []  # from the launch: the interpreter's start too
        threads: list[dict[str, float]] = []
        kstreams: dict[str, list[dict[str, Any]]] = {g: [] for g in guarantees}
        try:
            produce(env.bootstrap, raw_topic, pairs)
            for _ in range(reps):
                raw.append(run_raw(env, raw_topic, count, 1000))
                run = catch_up(env, pairs)
                cold.append(run["cold"])
                steady.append(run["steady"])
                cpu.append(run["cpu"])
                cpu_cold.append(run["cpu_cold"])
                threads.append(run["threads"])
                split.append(catch_up(env, pairs, split=True)["steady"])
                if per_timeline == 1:  # the leading edge's path matters most here
                    off.append(catch_up(env, pairs, settings=OFF)["steady"])
                for guarantee in guarantees:
                    kstreams[guarantee].append(kstreams_catch_up(env, pairs, guarantee))
        finally:
            delete_topics(env.bootstrap, [raw_topic])
        result["shapes"][shape] = {
            "raw": summary(raw),
            "from_cold": summary(cold),
            "steady": summary(steady),
            "steady_vs_raw": ratio(steady, raw),
            "cold_vs_raw": ratio(cold, raw),
            "split": summary(split),
            "split_vs_raw": ratio(split, raw),
            "split_vs_one": ratio(split, steady),
            "cpu_per_100k": _cpu(cpu),
            "cpu_cold_per_100k": _cpu(cpu_cold),
            "cpu_threads_per_100k": _by_thread(threads),
        }
        if off:
            result["shapes"][shape] |= {"off": summary(off), "direct_vs_off": ratio(steady, off)}
            print(
                f"  {shape}/timeline, direct_leading_edge off: "
                f"{summary(off)['median']:,}/s (default / off {ratio(steady, off)['median']}x)",
                flush=True,
            )
        print(
            f"  {shape}/timeline: steady {summary(steady)['median']:,}/s, "
            f"from cold {summary(cold)['median']:,}/s, raw {summary(raw)['median']:,}/s, "
            f"ratio {ratio(steady, raw)['median']}; roles in two processes "
            f"{summary(split)['median']:,}/s",
            flush=True,
        )
        row = result["shapes"][shape]
        if guarantees:
            _kstreams_row(row, steady, cpu, kstreams)
            print(
                "    Kafka Streams "
                + ", ".join(f"{g} {row['kstreams'][g]['median']:,}/s" for g in guarantees)
                + "; digest-stream / Kafka Streams "
                + ", ".join(f"{g} {row['vs_kstreams'][g]['median']}" for g in guarantees),
                flush=True,
            )
        print(f"    {cpu_text(row)}", flush=True)
    result["targets"] = {"1": 0.15, "20": 0.30, "20i": 0.30, "1000": 0.45}
    if guarantees:
        result["kstreams_targets"] = peer_kstreams.TARGETS
        result["cpu_targets"] = peer_kstreams.CPU_TARGETS
    return result


def _cpu(runs: list[dict[str, float]]) -> dict[str, Any]:
    """Summaries of digest-stream's CPU-seconds per 100,000 events, per part and in total."""
    return {part: summary([run[part] for run in runs], 2) for part in ("process", "redis", "total")}


def _by_thread(runs: list[dict[str, float]]) -> dict[str, float]:
    """The service's CPU-seconds per 100,000 events by thread name, median over the runs (a
    thread missing from a run counts 0 there), largest first."""
    names = {name for run in runs for name in run}
    medians = {name: statistics.median(run.get(name, 0.0) for run in runs) for name in names}
    return {name: round(value, 2) for name, value in sorted(medians.items(), key=lambda i: -i[1])}


def _kstreams_row(
    row: dict[str, Any],
    steady: list[float],
    cpu: list[dict[str, float]],
    kstreams: dict[str, list[dict[str, Any]]],
) -> None:
    """The peer's rates and JVM CPU into a shape's row, each against digest-stream's run of
    the same repetition (rates: ours / theirs; CPU: ours / theirs, lower is better)."""
    ours = [run["total"] for run in cpu]
    theirs = {g: [run["cpu"]["process"] for run in runs] for g, runs in kstreams.items()}
    rates = {g: [run["steady"] for run in runs] for g, runs in kstreams.items()}
    row["kstreams"] = {g: summary(v) for g, v in rates.items()}
    row["vs_kstreams"] = {g: ratio(steady, v) for g, v in rates.items()}
    row["kstreams_cpu_per_100k"] = {g: summary(v, 2) for g, v in theirs.items()}
    row["kstreams_cpu_cold_per_100k"] = {
        g: summary([run["cpu_cold"]["process"] for run in runs], 2) for g, runs in kstreams.items()
    }
    row["cpu_vs_kstreams"] = {g: ratio(ours, v) for g, v in theirs.items()}


def cpu_text(row: dict[str, Any]) -> str:
    """CPU-seconds per 100,000 events of a shape's row, digest-stream's beside the peer's."""
    own = row["cpu_per_100k"]
    text = (
        f"CPU-s per 100k events: digest-stream {own['process']['median']} + Redis "
        f"{own['redis']['median']} = {own['total']['median']}"
    )
    for guarantee, value in row.get("kstreams_cpu_per_100k", {}).items():
        text += f"; Kafka Streams {guarantee} {value['median']}"
    if "cpu_vs_kstreams" in row:
        text += f" (ours / at-least-once {row['cpu_vs_kstreams']['at-least-once']['median']})"
    threads = row.get("cpu_threads_per_100k")
    if threads:
        text += "; service by thread: " + thread_text(threads)
    return text


def thread_text(threads: dict[str, float]) -> str:
    """'ingest 2.1, ingest-store 0.8, ...': the threads over 0.05 CPU-s per 100k events."""
    shown = [(name.removeprefix("digest-"), v) for name, v in threads.items() if v >= 0.05]
    return ", ".join(f"{name} {value}" for name, value in shown)


#: The long runs, shape (SHAPES) -> events (full, --quick). Large enough to amortise the JVM's
#: warm-up, a fixed cost that inflated the peer's CPU per event 1.5-3x over 100,000 events; at
#: 20 per timeline the peer's at-least-once spans several of its 30 s commit intervals. 20 per
#: timeline interleaved is how live events arrive (a batch holds one record each of many
#: timelines, each add finds its timeline holding more); consecutive (a batch holds a run of
#: each timeline) stays beside it: the earlier long runs' shape, and the store's cheapest one.
LONG = {"1": (500_000, 200_000), "20i": (1_500_000, 300_000), "20": (1_500_000, 300_000)}
#: These long shapes also run N against N on the same backlog, right after the one-process
#: pair: TWO digest-stream processes (all roles each, one consumer group) against Kafka Streams
#: with TWO stream threads, a process or thread per core of a two-core host.
PAIRED = ("1", "20i")
TWO = 2
#: A test size: with this variable set (e.g. 20000), every long run is over that many events,
#: to check the bench end to end in seconds (its figures then measure the JVM's start).
LONG_EVENTS = "BENCH_LONG_EVENTS"


def long_counts(quick: bool) -> dict[str, int]:
    """Events of each long run: LONG's, or the test size of LONG_EVENTS when it is set."""
    test = os.environ.get(LONG_EVENTS)
    return {
        shape: int(test) if test else (short if quick else full)
        for shape, (full, short) in LONG.items()
    }


def long_runs(env: Stack, quick: bool) -> dict[str, Any]:
    """Scenario 7, long: every shape of LONG with one process against one stream thread, and
    the PAIRED shapes with TWO processes against TWO threads."""
    shapes: dict[str, Any] = {}
    two: dict[str, Any] = {}
    for shape, count in long_counts(quick).items():
        shapes[shape], paired = long_shape(env, shape, count)
        if paired is not None:
            two[shape] = paired
    return {"shapes": shapes, "two_processes": two, "cache_bytes": peer_kstreams.LONG_CACHE_BYTES}


def long_shape(env: Stack, shape: str, count: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One shape's long runs over one backlog: one against one, and TWO against TWO when the
    shape is PAIRED (with what the second process or thread bought each side). The backlog
    (about 550 MB at 1.5 million events) is dropped on return, before the next one is made."""
    per_timeline, interleaved = SHAPES[shape]
    pairs = backlog(count, per_timeline, "l", interleaved)
    print(f"scenario 7, long: catch-up of {count:,} events, {shape_label(shape)}", flush=True)
    one = long_run(env, pairs, shape)
    if shape not in PAIRED:
        return one, None
    print(
        f"scenario 7, long, {TWO} against {TWO}: {TWO} digest-stream processes, Kafka "
        f"Streams {TWO} stream threads, {count:,} events, {shape_label(shape)}",
        flush=True,
    )
    two = long_run(env, pairs, shape, TWO)
    return one, two | {"vs_one": vs_one(two, one)}


def long_run(
    env: Stack, pairs: list[tuple[bytes, bytes]], shape: str, processes: int = 1
) -> dict[str, Any]:
    """One catch-up of the backlog by digest-stream (`processes` processes of all roles) and by
    Kafka Streams at-least-once with as many stream threads (when built), back to back: rates,
    CPU per 100,000 events, ours / theirs."""
    count = len(pairs)
    per_timeline, interleaved = SHAPES[shape]
    timeout = max(CATCHUP_TIMEOUT, count / 2_000)  # at least 2,000 events/s on a busy host
    run = catch_up(env, pairs, processes, timeout=timeout)
    result: dict[str, Any] = {
        "events": count,
        "per_timeline": per_timeline,
        "interleaved": interleaved,
        "processes": processes,
        "steady": round(run["steady"]),
        "steady_seconds": round(run["steady_seconds"], 1),
        "from_cold": round(run["cold"]),
        "cpu_per_100k": {k: round(v, 2) for k, v in run["cpu"].items()},
        "cpu_threads_per_100k": _by_thread([run["threads"]]),
    }
    own = result["cpu_per_100k"]
    print(
        f"  digest-stream ({processes} process{'es' if processes > 1 else ''}) steady "
        f"{result['steady']:,}/s over {result['steady_seconds']} s, CPU-s per 100k events "
        f"{own['process']} + Redis {own['redis']} = {own['total']}",
        flush=True,
    )
    missing = peer_kstreams.available()
    if missing is not None:
        print(f"  Kafka Streams peer skipped: {missing}", flush=True)
        return result | {"kstreams_missing": missing}
    cache = peer_kstreams.LONG_CACHE_BYTES
    peer = kstreams_catch_up(
        env, pairs, "at-least-once", timeout, threads=processes, cache_bytes=cache
    )
    result["kstreams"] = {
        "guarantee": "at-least-once",
        "threads": processes,
        "cache_bytes": cache,
        "steady": round(peer["steady"]),
        "steady_seconds": round(peer["steady_seconds"], 1),
        "cpu_per_100k": round(peer["cpu"]["process"], 2),
    }
    result["vs_kstreams"] = round(run["steady"] / peer["steady"], 3)
    result["cpu_vs_kstreams"] = round(run["cpu"]["total"] / peer["cpu"]["process"], 3)
    print(
        f"  Kafka Streams at-least-once ({processes} stream thread"
        f"{'s' if processes > 1 else ''}) steady {result['kstreams']['steady']:,}/s over "
        f"{result['kstreams']['steady_seconds']} s, CPU-s per 100k events "
        f"{result['kstreams']['cpu_per_100k']}; digest-stream / Kafka Streams "
        f"{result['vs_kstreams']}, CPU {result['cpu_vs_kstreams']}",
        flush=True,
    )
    return result


def vs_one(two: dict[str, Any], one: dict[str, Any]) -> dict[str, float]:
    """What the second process (or stream thread) bought each side on the same backlog: steady
    rate with two / with one, for digest-stream and, when it ran, Kafka Streams."""
    ratios = {"digest-stream": round(two["steady"] / one["steady"], 3)}
    if "kstreams" in two and "kstreams" in one:
        ratios["kstreams"] = round(two["kstreams"]["steady"] / one["kstreams"]["steady"], 3)
    return ratios


def bare_produce(env: Stack, keys: list[bytes], size: int) -> float:
    """msgs/s of an idempotent producer (the service's settings) sending `len(keys)` messages
    of `size` bytes, produce all then one flush, to a fresh 4-partition topic."""
    topic = unique("bare")
    create_topics(env.bootstrap, [topic], PARTITIONS)
    settings = Settings(kafka_bootstrap_servers=env.bootstrap, redis_url=env.redis_url)
    producer = Producer(producer_config(settings))
    value = os.urandom(size)
    failures: list[str] = []

    def on_delivery(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    try:
        producer.produce(topic, key=b"warm", value=value, on_delivery=on_delivery)
        producer.flush(30)  # connected and the producer id assigned: outside the timing
        started = time.perf_counter()
        for key in keys:
            while True:
                try:
                    producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.01)
        if producer.flush(60) or failures:
            raise RuntimeError(f"bare producer failed: {failures[:3]}")
        return len(keys) / (time.perf_counter() - started)
    finally:
        delete_topics(env.bootstrap, [topic])


def _digest_size(pairs: list[tuple[bytes, bytes]]) -> int:
    """Bytes of the digest one event becomes (the output message the bare loop imitates)."""
    event = codec.decode_event(pairs[0][1])
    record = Record.from_event(event)
    whole = Digest.build(
        id="0" * 32, timeline=pairs[0][0].decode(), records=[record], opened_at=event.timestamp
    )
    return len(codec.encode_digest(whole))


def delivery_run(env: Stack, pairs: list[tuple[bytes, bytes]]) -> dict[str, float]:
    """Ingest+scheduler fill the schedule topic; then the delivery role alone drains it."""
    with Service(env, start=False, settings=OFF) as service:  # delivery publishes every one
        produce(env.bootstrap, service.topics["events"], pairs)
        events_end = end_offsets(env, service.topics["events"])
        started = service.launch("ingest,scheduler")
        Committed(env, service.group, events_end).wait(service, started)
        # Every timeline is new, so each event put one IMMEDIATE entry on the schedule topic.
        with Watermarks(env, service.topics["schedule"]) as schedule:
            now = time.perf_counter()
            reach(schedule.total, len(pairs), service, now, "schedule entries", timeout=60)
        service.stop()
        schedule_end = end_offsets(env, service.topics["schedule"])
        started = service.launch("delivery")
        return Committed(env, service.delivery_group, schedule_end).wait(service, started)


def end_to_end_run(
    env: Stack, pairs: list[tuple[bytes, bytes]], settings: dict[str, str] | None = None
) -> dict[str, float]:
    """All roles in one process over a backlog on new timelines, timed from launch until the
    output topic holds a digest per timeline (the sum of its high watermarks)."""
    with Service(env, start=False, settings=settings) as service:
        produce(env.bootstrap, service.topics["events"], pairs)
        with Watermarks(env, service.topics["output"]) as output:
            started = service.launch()
            return reach(output.total, len(pairs), service, started, "digests on the output")


def _rates(runs: list[dict[str, float]], bare: list[float]) -> dict[str, Any]:
    """From-cold and steady summaries of one kind of run, and steady / bare produce."""
    steady = [run["steady"] for run in runs]
    return {
        "from_cold": summary([run["cold"] for run in runs]),
        "steady": summary(steady),
        "steady_vs_bare": ratio(steady, bare),
    }


def delivery(env: Stack, count: int, reps: int) -> dict[str, Any]:
    """Scenario 8: digests/s when every event opens a new timeline, by the delivery role alone
    and end to end (direct_leading_edge off and on), vs a bare produce loop."""
    pairs = backlog(count, 1, "d")
    size = _digest_size(pairs)
    keys = [key for key, _ in pairs]
    bare: list[float] = []
    runs: dict[str, list[dict[str, float]]] = {"delivery": [], "end_to_end": [], "direct": []}
    for rep in range(reps):
        bare.append(bare_produce(env, keys, size))
        runs["delivery"].append(delivery_run(env, pairs))
        runs["end_to_end"].append(end_to_end_run(env, pairs, OFF))
        runs["direct"].append(end_to_end_run(env, pairs, DIRECT))
        one, e2e, direct = (runs[kind][-1] for kind in ("delivery", "end_to_end", "direct"))
        print(
            f"  rep {rep + 1}: delivery {one['steady']:,.0f} digests/s (from cold "
            f"{one['cold']:,.0f}), bare produce {bare[-1]:,.0f} msgs/s",
            flush=True,
        )
        print(
            f"  rep {rep + 1}: end to end, direct_leading_edge off {e2e['steady']:,.0f} "
            f"digests/s (from cold "
            f"{e2e['cold']:,.0f}), / bare {e2e['steady'] / bare[-1]:.3f}; direct_leading_edge "
            f"{direct['steady']:,.0f} (from cold {direct['cold']:,.0f}), / bare "
            f"{direct['steady'] / bare[-1]:.3f}",
            flush=True,
        )
    return {
        "digests": count,
        "message_bytes": size,
        "bare_produce": summary(bare),
        **_rates(runs["delivery"], bare),
        "target_digests_per_s": 15_000,
        "end_to_end": _rates(runs["end_to_end"], bare),
        "end_to_end_direct": _rates(runs["direct"], bare),
        "target_end_to_end_vs_bare": 0.10,
    }


def processes(env: Stack, count: int, reps: int) -> dict[str, Any]:
    """1 vs 2 processes of all roles on this machine, 20 events per timeline."""
    pairs = backlog(count, 20, "p")
    one, two = [], []
    for _ in range(reps):
        one.append(catch_up(env, pairs, 1)["steady"])
        two.append(catch_up(env, pairs, 2)["steady"])
    print(
        f"  1 process {summary(one)['median']:,}/s, 2 processes {summary(two)['median']:,}/s",
        flush=True,
    )
    return {
        "events": count,
        "per_timeline": 20,
        "one": summary(one),
        "two": summary(two),
        "two_vs_one": ratio(two, one),
    }


SCENARIOS = ("catchup", "delivery", "processes", "long")


def main(argv: list[str] | None = None) -> int:
    args = run_args(__doc__.splitlines()[0], SCENARIOS, "fewer events and repetitions", argv)
    env = stack()
    count, reps = (20_000, 1) if args.quick else (100_000, 3)
    # The catch-up's backlog is 100,000 events in --quick too: over 20,000 the Kafka Streams
    # peer spends most of its run compiling (its JIT's warm-up doubled its CPU per event and
    # halved its rate), which measures its start, not its rate.
    backlog_count = CATCHUP_EVENTS
    digests = 10_000 if args.quick else 50_000
    result: dict[str, Any] = {"machine": machine(env.redis_url), "quick": args.quick}
    started = time.perf_counter()
    if args.wants("catchup"):
        print(f"scenario 7: catch-up from cold, {backlog_count:,} events x {reps} reps", flush=True)
        result["catchup"] = run_part(env.redis_url, args, lambda: catchup(env, backlog_count, reps))
    if args.wants("delivery"):
        print(f"scenario 8: delivery, {digests:,} new timelines x {reps} reps", flush=True)
        result["delivery"] = run_part(env.redis_url, args, lambda: delivery(env, digests, reps))
    if args.wants("processes"):
        print(f"scenario 7: 1 vs 2 processes, {count:,} events x {reps} reps", flush=True)
        result["processes"] = run_part(env.redis_url, args, lambda: processes(env, count, reps))
    if args.wants("long"):
        result["long"] = run_part(env.redis_url, args, lambda: long_runs(env, args.quick))
    result["seconds"] = round(time.perf_counter() - started, 1)
    name = "catchup_quick" if args.quick else "catchup"
    path = write_result(name, result, args.only is not None)
    for line in headline(result) + kstreams_headline(result):
        print(line)
    print(f"wrote {path} in {result['seconds']} s")
    return 0


def kstreams_headline(result: dict[str, Any]) -> list[str]:
    """The digest-stream / Kafka Streams catch-up ratios, rates and CPU per event (printed last
    by bench.run): the 100,000-event rows', then the long runs'."""
    return catchup_kstreams_headline(result.get("catchup")) + long_headline(result.get("long", {}))


def catchup_kstreams_headline(block: dict[str, Any] | None) -> list[str]:
    """The lines of scenario 7's catch-up block (none without it: an `--only long` run)."""
    if block is None:
        return []
    if "kstreams_missing" in block:
        return [f"{'catch-up / Kafka Streams':<34} not run: {block['kstreams_missing']}"]
    lines = []
    for shape, row in block["shapes"].items():
        r, own = row["cpu_vs_kstreams"]["at-least-once"], row["cpu_per_100k"]
        theirs = row["kstreams_cpu_per_100k"]["at-least-once"]["median"]
        lines.append(
            f"{f'CPU/event / KStreams ALOS, {shape}/tl':<34} {r['median']:>7} "
            f"[{r['min']}..{r['max']}]  target <= {block['cpu_targets'][shape]}"
            f"  (CPU-s per 100k: {own['process']['median']} + Redis {own['redis']['median']}"
            f" vs {theirs})"
        )
    for guarantee, targets in block["kstreams_targets"].items():
        for shape, row in block["shapes"].items():
            r = row["vs_kstreams"][guarantee]
            label = f"catch-up / KStreams {'ALOS' if guarantee == 'at-least-once' else 'EOS'}"
            lines.append(
                f"{f'{label}, {shape}/tl':<34} {r['median']:>7} [{r['min']}..{r['max']}]"
                f"  target {peer_kstreams.target(targets[shape])[0]}"
                f"  ({row['kstreams'][guarantee]['median']:,} events/s)"
            )
    return lines


def long_headline(long: dict[str, Any]) -> list[str]:
    """A line per long run that met the peer: the rate ratio, both rates and CPU per event."""
    runs = [(f"long {shape}/tl", shape, run) for shape, run in long.get("shapes", {}).items()]
    runs += [
        (f"long {shape}/tl, {TWO} procs / {TWO} threads", shape, run)
        for shape, run in long.get("two_processes", {}).items()
    ]
    lines = []
    for label, shape, run in runs:
        if "kstreams" not in run:
            continue
        theirs, own = run["kstreams"], run["cpu_per_100k"]
        least = peer_kstreams.target(peer_kstreams.TARGETS["at-least-once"][shape])[0]
        lines.append(
            f"{f'catch-up / KStreams ALOS, {label}':<34} {run['vs_kstreams']:>7}  target {least}"
            f"  ({run['events']:,} events, run {long['machine']['at']}: {run['steady']:,} vs "
            f"{theirs['steady']:,} events/s over {theirs['steady_seconds']} s; CPU-s per 100k "
            f"{own['process']} + Redis {own['redis']} vs {theirs['cpu_per_100k']}, ours / "
            f"theirs {run['cpu_vs_kstreams']}, target <= {peer_kstreams.CPU_TARGETS[shape]})"
        )
    return lines


def headline(result: dict[str, Any]) -> list[str]:
    """The catch-up and delivery ratio lines (also printed last by bench.run)."""
    lines = []
    if "catchup" in result:
        block = result["catchup"]
        for shape, row in block["shapes"].items():
            r = row["steady_vs_raw"]
            label = f"catch-up / raw, {shape}/timeline"
            lines.append(
                f"{label:<34} {r['median']:>7} [{r['min']}..{r['max']}]"
                f"  target >= {block['targets'][shape]}  ({row['steady']['median']:,} events/s)"
            )
            if "split" in row:
                r = row["split_vs_raw"]
                label = f"  roles in 2 processes, {shape}/tl"
                lines.append(
                    f"{label:<34} {r['median']:>7} [{r['min']}..{r['max']}]"
                    f"  ({row['split']['median']:,} events/s)"
                )
            if "off" in row:
                r = row["direct_vs_off"]
                label = f"  default vs leading edge off, {shape}/tl"
                lines.append(
                    f"{label:<34} {r['median']:>7} [{r['min']}..{r['max']}]"
                    f"  (off: {row['off']['median']:,} events/s)"
                )
    if "delivery" in result:
        block = result["delivery"]
        r = block["steady_vs_bare"]
        lines.append(
            f"{'delivery digests/s (new timelines)':<34} {block['steady']['median']:>7,} "
            f"[{block['steady']['min']:,}..{block['steady']['max']:,}]  target >= 15,000"
            f"  (vs bare produce {r['median']} [{r['min']}..{r['max']}])"
        )
        if "end_to_end" in block:  # written since the end-to-end runs were added
            target = block["target_end_to_end_vs_bare"]
            for label, row, goal in (
                (
                    "end to end / bare, 1/tl, lead. off",
                    block["end_to_end"],
                    f"target >= {target:.2f}  ",
                ),
                ("  direct_leading_edge", block["end_to_end_direct"], ""),
            ):
                r = row["steady_vs_bare"]
                lines.append(
                    f"{label:<34} {r['median']:>7} [{r['min']}..{r['max']}]"
                    f"  {goal}({row['steady']['median']:,} digests/s)"
                )
    if "processes" in result:
        r = result["processes"]["two_vs_one"]
        lines.append(
            f"{'2 processes / 1, 20/timeline':<34} {r['median']:>7} [{r['min']}..{r['max']}]"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
