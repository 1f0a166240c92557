"""Scenarios 1 and 6: ingest throughput against its limit, the seed-style store and a peer;
its shape against batch size and payload size; a profile of the hot path.

    python -m bench.ingest_bench [--quick] [--only throughput,scaling,profile]

One topic (one partition, so a consumed batch is one store call) is filled once per
configuration with events spread round-robin over 5,000 timelines; every runner then reads it
from the start with a consumer group of its own. A runner's rate is the events it handled after
its first batch divided by the time since that batch, so group join and connection set-up are
left out alike for everybody. Within a repetition the runners go back to back, and every ratio
is computed per repetition, then summarised (median [min..max]).

Runners:
- raw: a confluent-kafka consumer (the service's consumer settings) that consumes and
  Avro-decodes with fastavro, nothing else: the limit of this process on this machine.
- seed: consume, decode with the service's codec, then one script call and one key per record
  (the seed-style layout of bench/store_bench.py), committing offsets after each batch.
- ingest: the service's own Ingest role (no scheduler), committed into Redis and Kafka; the
  leading edge off (it would publish first digests too, which the others do not).
- quix: Quix Streams collecting per key in a tumbling window (bench/peer_quix.py, own venv).
- ingest_sr, ingest_sr_v2: the Ingest role in schema registry mode (bench/registry_bench.py).
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import redis
from confluent_kafka import Consumer, Message, Producer

from bench import registry_bench
from bench.common import (
    Stack,
    create_topics,
    delete_namespace,
    delete_topics,
    encode_events,
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
from bench.store_bench import SeedStyle
from digest_stream.clock import SystemClock
from digest_stream.kafka import consumer_config, producer_config
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.ingest import ingest_role
from digest_stream.settings import Settings
from digest_stream.store import NewRecord
from digest_stream.store.redis import RedisStore
from digest_stream.wire import codec

TIMELINES = 5_000
PAYLOAD = 200
PEER_PYTHON = Path(
    os.environ.get(
        "DIGEST_STREAM_BENCH_PEER_PYTHON",
        Path.home() / ".cache" / "digest-stream" / "bench-peer-venv" / "bin" / "python",
    )
)
PEER_SCRIPT = Path(__file__).resolve().parent / "peer_quix.py"
RUN_TIMEOUT = 120.0  # per runner: a stalled runner fails the bench instead of hanging it


class Measured:
    """Events handled after the first batch, and the seconds since that batch finished."""

    def __init__(self) -> None:
        self.count = 0
        self.started: float | None = None
        self.seconds = 0.0

    def batch(self, handled: int) -> None:
        now = time.perf_counter()
        if self.started is None:
            self.started = now
        else:
            self.count += handled
            self.seconds = now - self.started

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0


def _settings(env: Stack, topic: str, **extra: Any) -> Settings:
    # The leading edge off: these runners store events (as the seed and Quix do); with it on,
    # the ingest would also publish each new timeline's first digest, delivery's work, which
    # scenarios 7 and 8e measure.
    extra.setdefault("direct_leading_edge", False)
    return Settings(
        kafka_bootstrap_servers=env.bootstrap,
        redis_url=env.redis_url,
        events_topic=topic,
        schedule_topic=extra.pop("schedule_topic"),
        dlq_topic=extra.pop("dlq_topic", unique("dlq")),
        group_id=unique("g"),
        namespace=extra.pop("namespace", unique("ns")),
        **extra,
    )


def _deadline_check(started: float, what: str) -> None:
    if time.monotonic() - started > RUN_TIMEOUT:
        raise RuntimeError(f"{what} did not finish within {RUN_TIMEOUT} s")


def _consume(
    settings: Settings,
    count: int,
    batch: int,
    what: str,
    handle: Callable[[Consumer, list[Message]], None],
) -> float:
    """Consume `count` events in batches (poll timeout: the service's batch_timeout), hand
    each non-empty batch of good messages to `handle`, and measure from the first batch."""
    consumer = Consumer(consumer_config(settings, settings.group_id))
    consumer.subscribe([settings.events_topic])
    measured, total, started = Measured(), 0, time.monotonic()
    try:
        while total < count:
            _deadline_check(started, what)
            messages = consumer.consume(batch, timeout=settings.batch_timeout)
            good = [m for m in messages if m.error() is None]
            if good:
                handle(consumer, good)
                total += len(good)
                measured.batch(len(good))
    finally:
        consumer.close()
    return measured.rate


def run_raw(env: Stack, topic: str, count: int, batch: int) -> float:
    """Consume and Avro-decode only."""
    schema = codec._EVENT  # the codec's parsed schema: the same decode work, nothing more

    def decode(_consumer: Consumer, messages: list[Message]) -> None:
        for message in messages:
            fastavro.schemaless_reader(io.BytesIO(message.value() or b""), schema, None)

    settings = _settings(env, topic, schedule_topic="unused")
    return _consume(settings, count, batch, "raw consumer", decode)


def run_seed(env: Stack, topic: str, count: int, batch: int, client: redis.Redis) -> float:
    """Consume, decode, one script call and one key per record, commit per batch."""
    settings = _settings(env, topic, schedule_topic="unused")
    namespace = unique("seed")
    seed = SeedStyle(client, namespace)

    def store(consumer: Consumer, messages: list[Message]) -> None:
        records = []
        for message in messages:
            value, key = message.value() or b"", message.key() or b""
            event = codec.decode_event(value)
            records.append(
                NewRecord(
                    key.decode(), event.id, event.timestamp / 1000, value, message.offset() or 0
                )
            )
        seed.add_one_by_one(records)
        consumer.commit(asynchronous=True)

    try:
        return _consume(settings, count, batch, "seed-style runner", store)
    finally:
        delete_namespace(client, namespace)


def run_ingest(
    env: Stack,
    topic: str,
    count: int,
    batch: int,
    client: redis.Redis,
    profile: cProfile.Profile | None = None,
    **extra: Any,
) -> float:
    """The service's Ingest role, one process, committed into Redis and Kafka."""
    schedule_topic = unique("sched")
    create_topics(env.bootstrap, [schedule_topic])
    settings = _settings(env, topic, schedule_topic=schedule_topic, batch_size=batch, **extra)
    store = RedisStore(client, namespace=settings.namespace, policy=settings.policy())
    producer = Producer(producer_config(settings))
    # The real path: the scheduler ticks the partitions ingest owns, as `run` does.
    runner, ingest = ingest_role(settings, store, SystemClock(), Metrics(), producer)
    runner.start(ingest, lambda: False)
    measured, total, started = Measured(), 0, time.monotonic()
    try:
        while total < count:
            _deadline_check(started, "ingest runner")
            if profile is not None and measured.started is not None:
                profile.enable()
                applied = ingest.step()
                profile.disable()
            else:
                applied = ingest.step()
            if applied:
                total += applied
                measured.batch(applied)
    finally:
        runner.close(ingest)
        delete_namespace(client, settings.namespace)
        delete_topics(env.bootstrap, [schedule_topic])
    return measured.rate


def peer_available() -> bool:
    """Whether the Quix Streams virtualenv exists (`make bench-peer-venv`)."""
    return PEER_PYTHON.exists()


def run_quix(env: Stack, topic: str, count: int) -> float:
    """Quix Streams in its own process and virtualenv."""
    state_dir = tempfile.mkdtemp(prefix="bench-quix-")
    command = [str(PEER_PYTHON), str(PEER_SCRIPT), env.bootstrap, topic, unique("quix")]
    command += [str(count), state_dir]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()  # only the process this bench started, by its handle
        process.communicate()
        raise RuntimeError("quix peer did not finish in time") from None
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    if process.returncode != 0:
        raise RuntimeError(f"quix peer failed ({process.returncode}): {err[-2000:]}")
    line = json.loads(out.strip().splitlines()[-1])
    return float(line["count"]) / float(line["seconds"])


def _fill(env: Stack, count: int, payload: int) -> str:
    topic = unique("events")
    create_topics(env.bootstrap, [topic])
    produce(env.bootstrap, topic, encode_events(count, TIMELINES, payload))
    return topic


def throughput(env: Stack, client: redis.Redis, count: int, reps: int) -> dict[str, Any]:
    """Scenario 1: ingest vs raw limit, seed-style store and Quix Streams, same run."""
    topic = _fill(env, count, PAYLOAD)
    rates: dict[str, list[float]] = {"raw": [], "seed": [], "ingest": [], "quix": []}
    use_peer = peer_available()
    # 1d: schema registry mode on the same events, when the stack runs a registry.
    url = registry_bench.registry_url()
    framed: dict[str, str] = {}
    subjects: list[str] = []
    if url:
        pairs = encode_events(count, TIMELINES, PAYLOAD)
        for name, evolved in (("ingest_sr", False), ("ingest_sr_v2", True)):
            framed[name], made = registry_bench.fill_framed(env, url, pairs, evolved)
            subjects += made
            rates[name] = []
    try:
        for rep in range(reps):
            rates["raw"].append(run_raw(env, topic, count, 1000))
            rates["ingest"].append(run_ingest(env, topic, count, 1000, client))
            for name, framed_topic in framed.items():
                rates[name].append(
                    run_ingest(env, framed_topic, count, 1000, client, schema_registry_url=url)
                )
            rates["seed"].append(run_seed(env, topic, count, 1000, client))
            if use_peer:
                rates["quix"].append(run_quix(env, topic, count))
            print(
                f"  rep {rep + 1}: "
                + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in rates.items() if v),
                flush=True,
            )
    finally:
        delete_topics(env.bootstrap, [topic, *framed.values()])
        if url:
            registry_bench.delete_subjects(url, subjects)
    result: dict[str, Any] = {
        "events": count,
        "timelines": TIMELINES,
        "payload_bytes": PAYLOAD,
        "batch_size": 1000,
        "events_per_s": {k: summary(v) for k, v in rates.items() if v},
        "ingest_vs_raw": ratio(rates["ingest"], rates["raw"]),
        "ingest_vs_seed": ratio(rates["ingest"], rates["seed"]),
    }
    if framed:
        result["registry_vs_plain"] = ratio(rates["ingest_sr"], rates["ingest"])
        result["registry_v2_vs_plain"] = ratio(rates["ingest_sr_v2"], rates["ingest"])
    else:
        result["registry_missing"] = "no schema registry: `digest-stream dev up --registry`"
    if use_peer:
        result["ingest_vs_quix"] = ratio(rates["ingest"], rates["quix"])
    else:
        result["quix_missing"] = f"{PEER_PYTHON} not found: run `make bench-peer-venv`"
    return result


def scaling(env: Stack, client: redis.Redis, count: int, reps: int) -> dict[str, Any]:
    """Scenario 6: ingest rate and its ratio to the raw limit vs batch size and payload size."""
    result: dict[str, Any] = {"batch_size": {}, "payload_bytes": {}}
    shapes: list[tuple[str, int, int]] = [("batch_size", b, PAYLOAD) for b in (100, 1000, 5000)]
    shapes += [("payload_bytes", 1000, p) for p in (100, 1000, 10_000)]
    topics: dict[int, str] = {}
    try:
        for axis, batch, payload in shapes:
            if payload not in topics:
                topics[payload] = _fill(env, count, payload)
            raw, ours = [], []
            for _ in range(reps):
                raw.append(run_raw(env, topics[payload], count, batch))
                ours.append(run_ingest(env, topics[payload], count, batch, client))
            value = batch if axis == "batch_size" else payload
            result[axis][str(value)] = {
                "raw": summary(raw),
                "ingest": summary(ours),
                "ingest_vs_raw": ratio(ours, raw),
            }
            print(f"  {axis}={value}: ingest {summary(ours)['median']:,}/s, "
                  f"vs raw {ratio(ours, raw)['median']}", flush=True)  # fmt: skip
    finally:
        delete_topics(env.bootstrap, list(topics.values()))
    return result


# Where a sampled stack of the ingest thread is, first match wins (py-spy frame names).
BUCKETS = (
    ("waiting for the batch in flight (store worker)", ("result (",)),
    ("redis-py: packing the call", ("pack_command", "RespSerializer.pack", "pack_commands")),
    ("redis: ds_add call (Lua + round trip)", ("recv_into", "fcall", "read_response")),
    ("decode: the event's id and timestamp", ("decode_event",)),
    ("record checks and NewRecord (check)", ("ingest/check.py",)),
    ("store.add: validation and arguments", ("(digest_stream/store/",)),
    ("kafka: take a batch (poll, consume)", ("take_batch", "consume")),
    ("booking: schedule entries, metrics, commit", ("_finish", "ingest/commit.py")),
)
#: The store worker thread's frames: its module, on a stack that is not the role thread's.
WORKER_FILE = "ingest/apply.py"
STEP_REST = "rest of step"  # a sample under Ingest.step that no bucket above names
WORKER_REST = "rest of the store call"  # the same for the store worker thread


def sample(env: Stack, client: redis.Redis, topic: str, count: int) -> dict[str, Any]:
    """py-spy (sampling, no instrumentation bias) of this process during an ingest run.

    Without output (py-spy missing, not permitted to attach, ...) the result is only
    `py_spy_error`, with py-spy's own error text."""
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        return {"py_spy_error": f"{spy} not found (the `bench` extra installs it)"}
    folder = Path(tempfile.mkdtemp(prefix="bench-pyspy-"))
    out, err = folder / "raw.txt", folder / "stderr.txt"
    command = [str(spy), "record", "--pid", str(os.getpid()), "--format", "raw"]
    command += ["--output", str(out), "--rate", "250", "--idle", "--nonblocking"]
    try:
        with err.open("wb") as stderr:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
            try:
                time.sleep(1.0)  # attached
                rate = run_ingest(env, topic, count, 1000, client)
            finally:
                process.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()  # only the process this bench started, by its handle
                    process.wait()
        if not out.exists():
            text = err.read_text(errors="replace").strip()
            return {"py_spy_error": text[-2000:] or f"no output (exit {process.returncode})"}
        lines = out.read_text().splitlines()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    shares: dict[str, int] = {}
    worker: dict[str, int] = {}
    for line in lines:
        stack_text, _, number = line.rpartition(" ")
        if WORKER_FILE in stack_text and "run_ingest" not in stack_text:
            # The store worker thread (the ingest's store calls overlap the next batch).
            part = stack_text.split(WORKER_FILE, 1)[1]
            name = next(
                (label for label, marks in BUCKETS[1:] if any(m in part for m in marks)),
                WORKER_REST,
            )
            worker[name] = worker.get(name, 0) + int(number)
            continue
        if "run_ingest" not in stack_text or "step (" not in stack_text:
            continue  # other threads, or set-up outside the measured loop
        step_part = stack_text.split("step (", 1)[1]
        name = next(
            (label for label, marks in BUCKETS if any(m in step_part for m in marks)), STEP_REST
        )
        shares[name] = shares.get(name, 0) + int(number)
    return {
        "rate_while_sampled": round(rate),
        "samples": sum(shares.values()),
        "share_of_step": _shares(shares),
        # Shares of the worker's busy time (samples inside a store call), not of wall time.
        "share_of_store_worker": _shares(worker),
    }


def _shares(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: round(v / total, 3) for k, v in sorted(counts.items())} if total else {}


def profile(env: Stack, client: redis.Redis, count: int) -> dict[str, Any]:
    """cProfile of Ingest.step over one pass of the topic (first batch excluded), and a
    py-spy sample of another pass when py-spy is installed (the `bench` extra)."""
    topic = _fill(env, count, PAYLOAD)
    prof = cProfile.Profile()
    try:
        rate = run_ingest(env, topic, count, 1000, client, profile=prof)
        sampled = sample(env, client, topic, count)
    finally:
        delete_topics(env.bootstrap, [topic])
    error = sampled.pop("py_spy_error", None)
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(25)
    raw_stats: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in raw_stats.values())
    top = sorted(raw_stats.items(), key=lambda item: item[1][2], reverse=True)[:15]
    return {
        "events": count,
        "py_spy": sampled or None,
        "py_spy_error": error,
        "rate_while_profiled": round(rate),
        "cprofile_text": text.getvalue().splitlines(),
        "total_tottime_s": round(total, 3),
        "top_tottime": [
            {
                "function": f"{Path(file).name}:{line}({name})",
                "tottime_share": round(entry[2] / total, 3),
                "calls": entry[1],
            }
            for (file, line, name), entry in top
        ],
    }


SCENARIOS = ("throughput", "scaling", "profile")


def main(argv: list[str] | None = None) -> int:
    args = run_args(__doc__.splitlines()[0], SCENARIOS, "fewer events and repetitions", argv)
    env = stack()
    client = redis.Redis.from_url(env.redis_url)
    count, reps = (20_000, 3) if args.quick else (50_000, 5)
    result: dict[str, Any] = {"machine": machine(env.redis_url), "quick": args.quick}
    started = time.perf_counter()
    try:
        if args.wants("throughput"):
            print(f"scenario 1: ingest throughput, {count:,} events x {reps} reps", flush=True)
            result["throughput"] = run_part(
                env.redis_url, args, lambda: throughput(env, client, count, reps)
            )
        if args.wants("scaling"):
            print("scenario 6: scaling vs batch size and payload size", flush=True)
            result["scaling"] = run_part(
                env.redis_url, args, lambda: scaling(env, client, count // 2, 3)
            )
        if args.wants("profile"):
            print("scenario 6: profile of the ingest hot path", flush=True)
            result["profile"] = run_part(env.redis_url, args, lambda: profile(env, client, count))
    finally:
        client.close()
    result["seconds"] = round(time.perf_counter() - started, 1)
    name = "ingest_quick" if args.quick else "ingest"
    path = write_result(name, result, args.only is not None)
    if "throughput" in result:
        t = result["throughput"]
        for key in ("ingest_vs_raw", "ingest_vs_seed", "ingest_vs_quix", "registry_vs_plain",
                    "registry_v2_vs_plain"):  # fmt: skip
            if key in t:
                r = t[key]
                print(f"{key}: {r['median']} [{r['min']}..{r['max']}]")
    print(f"wrote {path} in {result['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
