"""The Python share of the ingest hot path, per record, without Kafka or Redis in the timing.

    python -m bench.hotpath_bench [--json]

Scenario 6 showed that an ingest step is mostly the `ds_add` call (Redis running Lua) and
partly Python: decoding and checking each message (`Checker.batches`) and building the
arguments of the call (`RedisStore.add` up to the FCALL). This bench times that Python part
alone, on 1,000 messages spread over 1,000 timelines (the shape of a batch of scenario 1): the
store's FCALL is replaced by a stub returning a well-formed reply, and messages are stand-ins
with the accessors the check uses. Measures optimisations before and after in one sitting:

    git archive <old-commit> digest_stream | tar -x -C /tmp/ds-before
    python -m bench.hotpath_bench --against /tmp/ds-before
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from confluent_kafka import Producer

from bench.common import stack
from digest_stream.clock import SystemClock
from digest_stream.ops.hooks import NO_HOOKS
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.ingest import ingest_role
from digest_stream.roles.publish import DigestPublisher
from digest_stream.settings import Settings
from digest_stream.store import NewRecord, TimelinePolicy
from digest_stream.store.redis import RedisStore
from digest_stream.wire import codec
from digest_stream.wire.models import Event

BATCH = 1_000
REPS = 50


class FakeMessage:
    """What the check (`Checker.batches`) reads from a confluent-kafka Message."""

    def __init__(self, key: bytes, value: bytes, offset: int) -> None:
        self._key, self._value, self._offset = key, value, offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def offset(self) -> int:
        return self._offset

    def partition(self) -> int:
        return 0

    def headers(self) -> None:
        return None


def per_record_us(
    run: Any, reps: int = REPS, clock: Callable[[], float] = time.perf_counter
) -> float:
    samples = []
    for _ in range(reps):
        started = clock()
        run()
        samples.append((clock() - started) / BATCH * 1e6)
    # Best of the repetitions: the intrinsic cost, robust to the other load on a shared box.
    return min(samples)


# Imports the digest_stream package found in a given folder instead of the editable install
# (whose import hook would otherwise win over sys.path), then runs this bench.
_SHIM = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
sys.path.insert(0, sys.argv[1])
import digest_stream
assert digest_stream.__file__.startswith(sys.argv[1]), digest_stream.__file__
from bench.hotpath_bench import main
sys.exit(main(["--json"]))
"""


def compare(against: str, rounds: int) -> int:
    """Alternate runs of this tree and of the package in `against`; print both and the ratio."""
    samples: dict[str, list[dict[str, float]]] = {"current": [], "against": []}
    for _ in range(rounds):
        for name, command in (
            ("against", [sys.executable, "-c", _SHIM, against]),
            ("current", [sys.executable, "-m", "bench.hotpath_bench", "--json"]),
        ):
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            samples[name].append(json.loads(out.strip().splitlines()[-1]))
    print(
        f"us/record, best of {REPS} passes per run, median [min..max] of {rounds} alternating"
        f" runs (ratio = current / {against})"
    )
    for key in samples["current"][0]:
        new = [s[key] for s in samples["current"]]
        old = [s[key] for s in samples["against"]]
        ratios = [n / o for n, o in zip(new, old, strict=True)]
        before, after = statistics.median(old), statistics.median(new)
        print(
            f"  {key:<18} before {before:>6.2f}  after {after:>6.2f}"
            f"  ratio {statistics.median(ratios):.2f} [{min(ratios):.2f}..{max(ratios):.2f}]"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument("--against", help="folder holding an older digest_stream package")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if args.against:
        return compare(args.against, args.rounds)
    env = stack()
    payload = os.urandom(200)
    now_ms = int(time.time() * 1000)
    messages = [
        FakeMessage(
            f"timeline-{i:06d}".encode(),
            codec.encode_event(Event(id=f"e-{i:08d}", timestamp=now_ms, payload=payload)),
            i,
        )
        for i in range(BATCH)
    ]
    settings = Settings(kafka_bootstrap_servers=env.bootstrap, redis_url=env.redis_url)
    client = redis.Redis.from_url(env.redis_url)
    store = RedisStore(client, namespace="bench-hotpath", policy=TimelinePolicy())

    connection = client.connection_pool.get_connection()

    def fake_fcall(function: str, call_keys: list[str], call_args: Sequence[Any], **_: Any) -> Any:
        # The packing redis-py does is part of the hot path: keep it, send nothing.
        connection.pack_command("FCALL", function, len(call_keys), *call_keys, *call_args)
        return [[], BATCH, 0, 0, None, BATCH - 1, None, 0, []]  # ds_add's reply (no led digest)

    # The FCALL every part of the store calls through (RedisCalls.fcall; before issue 29 the
    # store's own _fcall: --against an older tree finds that one).
    calls = getattr(store, "calls", store)
    setattr(calls, "fcall" if hasattr(calls, "fcall") else "_fcall", fake_fcall)
    producer = Producer({"bootstrap.servers": env.bootstrap})
    _, ingest = ingest_role(settings, store, SystemClock(), Metrics(), producer)
    now = time.time()
    records: list[NewRecord] = []

    def decode() -> None:
        for message in messages:
            codec.decode_event(message.value())

    # The ingest's check of a taken batch (before issue 38 `Ingest._prepare`: --against an
    # older tree finds that one).
    check = getattr(ingest, "_check", None)
    prepare = check.batches if check is not None else getattr(ingest, "_prepare")  # noqa: B009

    def build() -> None:
        records.clear()
        for batch in prepare(messages):
            records.extend(batch.records)

    def add() -> None:
        store.add(0, records, now, expected_fence=None, through_offset=BATCH - 1)

    # The leading edge's share per first event: its digests (opened by a real add, one per
    # timeline) prepared for publishing, then closed in one close_many against Redis. The
    # close is timed in this process's CPU only (time.process_time): Redis's Lua runs in
    # another process, so what is left is the arguments built, sent and the replies read.
    real = RedisStore(client, namespace=f"bench-leading-{os.getpid()}", policy=TimelinePolicy())
    build()
    led = real.add(0, records, now, open_nonce=os.urandom(12).hex()).opened
    if len(led) != BATCH:
        raise RuntimeError(f"the add opened {len(led)} leading digests, expected {BATCH}")
    publisher = DigestPublisher(settings, producer, Metrics(), NO_HOOKS, SystemClock(), "ingest")

    def leading() -> None:
        for digest in led:
            publisher.prepare_leading(0, digest, now)

    targets = [(0, digest.timeline, digest.id) for digest in led]

    def close() -> None:
        real.close_many(targets, now)

    for run in (decode, build, add, leading, close):  # warm up
        run()
    result = {
        "decode_event_us": round(per_record_us(decode), 2),
        "record_us": round(per_record_us(build), 2),
        "add_args_us": round(per_record_us(add), 2),
        "leading_us": round(per_record_us(leading), 2),
        "close_cpu_us": round(per_record_us(close, clock=time.process_time), 2),
    }
    result["python_total_us"] = round(
        result["record_us"] + result["add_args_us"] + result["leading_us"] + result["close_cpu_us"],
        2,
    )
    for timeline in {digest.timeline for digest in led}:
        real.delete(0, timeline)
    client.connection_pool.release(connection)
    client.close()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:<18} {value:>7} us/record")
    return 0


if __name__ == "__main__":
    sys.exit(main())
