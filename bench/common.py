"""Shared helpers of the benchmark suite: the stack's addresses, unique names, topics,
Redis cleanup, event production, statistics and the machine description.

Every scenario uses names of its own (topics, groups, namespaces) and removes what it created,
so benches can run while tests or other benches use the same stack.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from digest_stream.wire import codec
from digest_stream.wire.models import Event

RESULTS_DIR = Path(__file__).resolve().parent / "results"
T0 = 1_700_000_000.0


@dataclass(frozen=True)
class Stack:
    """Addresses of the local stack (from `digest-stream dev env`)."""

    bootstrap: str
    redis_url: str


def stack() -> Stack:
    """The stack named by the environment (what `make bench` exports)."""
    return Stack(
        bootstrap=os.environ.get("DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092"),
        redis_url=os.environ.get("DIGEST_STREAM_REDIS_URL", "redis://127.0.0.1:16379/0"),
    )


def unique(prefix: str) -> str:
    """A name no other bench, test or earlier run uses."""
    return f"bench-{prefix}-{uuid.uuid4().hex[:10]}"


# ------------------------------------------------------------------------------ kafka


def create_topics(bootstrap: str, names: Sequence[str], partitions: int = 1) -> None:
    """Create topics with the admin client and wait until every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1) for name in names]
    )
    for future in futures.values():
        future.result(timeout=30)
    deadline = time.monotonic() + 30
    for name in names:
        while True:
            meta = admin.list_topics(name, timeout=5).topics.get(name)
            if (
                meta is not None
                and meta.error is None
                and len(meta.partitions) == partitions
                and all(p.leader >= 0 for p in meta.partitions.values())
            ):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name} has no leader after 30 s")
            time.sleep(0.05)


def delete_topics(bootstrap: str, names: Sequence[str]) -> None:
    """Delete topics (missing ones are fine)."""
    if not names:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(list(names)).values():
        with contextlib.suppress(Exception):
            future.result(timeout=30)


@contextlib.contextmanager
def topics(bootstrap: str, names: Sequence[str], partitions: int = 1) -> Iterator[None]:
    """Topics that exist for the duration of a with block."""
    try:
        create_topics(bootstrap, names, partitions)
        yield
    finally:
        delete_topics(bootstrap, names)


def encode_events(count: int, timelines: int, payload_size: int) -> list[tuple[bytes, bytes]]:
    """(key, Avro value) pairs: `count` events spread round-robin over `timelines` timelines."""
    payload = os.urandom(payload_size)
    now_ms = int(time.time() * 1000)
    pairs = []
    for i in range(count):
        event = Event(id=f"e-{i:08d}", timestamp=now_ms, payload=payload)
        pairs.append((f"timeline-{i % timelines:06d}".encode(), codec.encode_event(event)))
    return pairs


def produce(bootstrap: str, topic: str, pairs: Sequence[tuple[bytes, bytes]]) -> None:
    """Produce pre-encoded events and wait for every acknowledgement."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000}
    )
    failures: list[str] = []

    def on_delivery(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    for key, value in pairs:
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(60) or failures:
        raise RuntimeError(f"producing to {topic} failed: {failures[:3]}")


# ------------------------------------------------------------------------------ redis


def delete_namespace(client: redis.Redis, namespace: str) -> None:
    """Remove every key of a store namespace."""
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{{{namespace}:*", count=5000):
        batch.append(key)
        if len(batch) >= 1000:
            client.delete(*batch)
            batch.clear()
    if batch:
        client.delete(*batch)


# ------------------------------------------------------------------------------ cpu

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """CPU-seconds (user + system, every thread) a live process has used, from /proc; 0 for one
    that is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    # The command name (field 2) may hold spaces; utime and stime are fields 14 and 15.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU-seconds per thread name of a live process, from /proc ({} for one that is gone).
    The service names its threads at the OS level (ops/threads.py); librdkafka's (``rdk:*``)
    are summed as one. A thread that ended is no longer counted: pool and role threads live
    as long as the process."""
    used: dict[str, float] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return used
    for task in tasks:
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended meanwhile
        name = "librdkafka" if name.startswith("rdk:") else name
        used[name] = used.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return used


def redis_cpu(client: redis.Redis) -> float:
    """CPU-seconds the Redis server has used (`INFO cpu`: user + system, all its threads)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


class CpuMeter:
    """CPU-seconds of a run's processes and, optionally, of the Redis server they use: a
    sample is {"process": ..., "redis": ...}. `pids` is asked at every sample, so a meter made
    before the launch counts processes from their start (none yet: 0)."""

    def __init__(self, pids: Callable[[], Sequence[int]], redis_url: str | None = None) -> None:
        self.pids = pids
        self.client = redis.Redis.from_url(redis_url) if redis_url else None

    def sample(self) -> dict[str, float]:
        """CPU-seconds used so far."""
        used = {"process": sum(process_cpu(pid) for pid in self.pids())}
        if self.client is not None:
            used["redis"] = redis_cpu(self.client)
        return used

    def threads(self) -> dict[str, float]:
        """CPU-seconds used so far per thread name, over the processes (thread_cpu)."""
        used: dict[str, float] = {}
        for pid in self.pids():
            for name, seconds in thread_cpu(pid).items():
                used[name] = used.get(name, 0.0) + seconds
        return used

    def close(self) -> None:
        """Close the Redis client, if any."""
        if self.client is not None:
            self.client.close()


def cpu_per_100k(
    before: dict[str, float], after: dict[str, float], events: int
) -> dict[str, float]:
    """CPU-seconds per 100,000 events between two samples, per part and in total."""
    used = {part: (after[part] - before[part]) * 100_000 / max(events, 1) for part in after}
    return used | {"total": sum(used.values())}


# ------------------------------------------------------------------------------ statistics


def summary(values: Sequence[float], digits: int = 0) -> dict[str, Any]:
    """Median, min, max and every repetition; spread = (max - min) / median."""
    median = statistics.median(values)
    return {
        "median": round(median, digits) if digits else round(median),
        "min": round(min(values), digits) if digits else round(min(values)),
        "max": round(max(values), digits) if digits else round(max(values)),
        "spread": round((max(values) - min(values)) / median, 3) if median else None,
        "reps": [round(v, digits) if digits else round(v) for v in values],
    }


def ratio(numerators: Sequence[float], denominators: Sequence[float]) -> dict[str, Any]:
    """Per-repetition ratios (each rep's pair was measured back to back): median [min..max]."""
    values = [n / d for n, d in zip(numerators, denominators, strict=True)]
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "reps": [round(v, 3) for v in values],
    }


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (fraction in 0..1)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[index]


# ------------------------------------------------------------------------------ reporting


def cpu_model() -> str:
    """The CPU model line of /proc/cpuinfo."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def machine(redis_url: str) -> dict[str, Any]:
    """What produced the figures: cores, CPU, load, versions."""
    from digest_stream.dev.kafka import KAFKA_VERSION

    client = redis.Redis.from_url(redis_url)
    try:
        redis_version = str(client.info("server").get("redis_version"))
    finally:
        client.close()
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "redis": redis_version,
        "kafka": KAFKA_VERSION,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


@dataclass(frozen=True)
class RunArgs:
    """A bench module's command line: `--quick` and `--only` (None: every scenario)."""

    quick: bool
    only: tuple[str, ...] | None

    def wants(self, scenario: str) -> bool:
        return self.only is None or scenario in self.only


def run_args(
    description: str, scenarios: Sequence[str], quick_help: str, argv: list[str] | None
) -> RunArgs:
    """Parse `[--quick] [--only a,b]`; an unknown scenario name exits (status 2) before
    anything runs or is written."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument(
        "--only", help=f"a subset of {','.join(scenarios)} (merged into the results file)"
    )
    args = parser.parse_args(argv)
    if args.only is None:
        return RunArgs(args.quick, None)
    names = tuple(name.strip() for name in args.only.split(",") if name.strip())
    unknown = [name for name in names if name not in scenarios]
    if unknown or not names:
        parser.error(f"--only {args.only!r}: the scenarios are {','.join(scenarios)}")
    return RunArgs(args.quick, names)


def run_part(
    redis_url: str, args: RunArgs, scenario: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """Run one scenario and stamp its block: the machine at its start, its seconds, and the
    `--only` list of the run that produced it (None for a run of every scenario)."""
    at_start = machine(redis_url)
    started = time.perf_counter()
    block = scenario()
    block["machine"] = at_start
    block["seconds"] = round(time.perf_counter() - started, 1)
    block["only"] = list(args.only) if args.only is not None else None
    return block


def write_result(name: str, result: dict[str, Any], merge: bool = False) -> Path:
    """Write bench/results/<name>.json.

    merge=True (an `--only` rerun) replaces only the scenario blocks in `result`, the dict
    values stamped by `run_part` (they carry their own "machine"), and keeps the file's other
    blocks and its top-level fields: "machine", "seconds" and "quick" go on describing the
    main run. Without an earlier file the rerun's own top-level fields are written.
    """
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    if merge and path.exists():
        parts = {k: v for k, v in result.items() if isinstance(v, dict) and "machine" in v}
        result = json.loads(path.read_text()) | parts
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
