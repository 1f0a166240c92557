"""Server-side cost of `ds_add` per record, by batch shape (Redis's own clock, no client time).

    python -m bench.lua_cost [--rounds N] [--interleaved 5,20,100] [--only-interleaved]

Redis counts the calls of each command and the microseconds it spends in them
(`INFO commandstats`); the difference of the FCALL counters around one `store.add` is the Lua's
time for that batch, round trip and client excluded. The counters are server-wide and the
stack's Redis is shared, so a round counts only if FCALL's call count went up by exactly one
(`store.add` makes one FCALL on a single Redis); otherwise another client's FCALL ran in
between, and the round is redone with fresh record ids (up to ATTEMPTS attempts per round; the
printout says how many were redone).

Shapes (1, 20 and 1,000 records per timeline per call): 1,000 records on 1,000 timelines (the ingest
benchmark's shape: every record touches a timeline of its own), repeated so each timeline grows
by one record per round; 1,000 records on 50 timelines (20 per timeline per call); and 1,000
records on one timeline (1,000 per timeline per call). Prints ms of Redis time per 1,000 records
for each round, then the median [min..max] of the client's side (the whole `store.add` call,
argument packing and round trip included, less Redis's time). Then 1,000 first events (each
on a new timeline) by both paths: the leading edge (`ds_add` with an open nonce, which opens
the digests, and `ds_close_many` once acknowledged) and the delivery path (a plain `ds_add`,
`ds_open_many`, `ds_close_many`). Then `ds_open` of one bulk-imported timeline (20,000
records, 1,000-byte ids sharing a prefix, equal timestamps, no
capacity): ms of Redis time for the open and for a reopen.
Then the catch-up's shape, interleaved traffic: 1,000 timelines get one record each per call,
for 5, 20 and 100 calls (records per timeline; the first call with the leading edge, as the
service runs, so every timeline then cools down and its due time moves with each record). Prints
µs per event over all the calls (median of 3 runs [min..max]) of Redis time in FCALL and of
Redis's main-thread CPU (the steadier figure on a busy host: time spent waiting for a core is
not in it), and, call by call, FCALL µs per event of the median run: a cost that grows with
the call number is a cost that grows with what the timeline holds.
Uses its own namespace on the stack's Redis and removes it.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

import redis

from bench.common import T0, delete_namespace, stack, unique
from digest_stream.store import NewRecord, TimelinePolicy
from digest_stream.store.redis import RedisStore
from digest_stream.store.redis.calls import MANY_CHUNK

RECORDS = 1_000
#: (label, timelines per call of RECORDS records): 1, 20 and 1,000 records per timeline.
SHAPES = (("1,000 timelines x 1", 1_000), ("50 timelines x 20", 50), ("1 timeline x 1,000", 1))
_T = TypeVar("_T")
#: FCALLs of an open_many or close_many of RECORDS targets (MANY_CHUNK per call).
CHUNKS = -(-RECORDS // MANY_CHUNK)
ATTEMPTS = 20  # per round: tries to get an FCALL window that no other client's FCALL shares


def fcall_stats(client: redis.Redis) -> tuple[int, int]:
    """(calls, microseconds) of FCALL since Redis's stats were last reset."""
    stats = client.info("commandstats").get("cmdstat_fcall", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def shape(client: redis.Redis, timelines: int, rounds: int) -> tuple[list[float], list[float], int]:
    """ms of Redis time per call of 1,000 records over `timelines`, one figure per round, the
    client's ms per call beside it, and how many attempts were redone."""
    namespace = unique("lua")
    store = RedisStore(client, namespace=namespace)
    payload = os.urandom(200)
    offset, costs, client_costs, redone = 0, [], [], 0
    try:
        for _ in range(rounds):
            for _ in range(ATTEMPTS):
                # A redone attempt's records stay: after a redo the timelines are one round's
                # records larger than the round number says (the printout counts redos).
                batch = [
                    NewRecord(f"tl-{i % timelines}", f"r-{offset + i}", T0, payload, offset + i)
                    for i in range(RECORDS)
                ]
                offset += RECORDS
                calls, usec = fcall_stats(client)
                started = time.perf_counter()
                store.add(0, batch, T0)
                elapsed = (time.perf_counter() - started) * 1000
                calls_after, usec_after = fcall_stats(client)
                if calls_after - calls == 1:
                    costs.append((usec_after - usec) / 1000)
                    client_costs.append(elapsed - costs[-1])
                    break
                redone += 1
            else:
                raise RuntimeError(
                    f"other clients' FCALLs overlapped all {ATTEMPTS} attempts of a round"
                )
    finally:
        delete_namespace(client, namespace)
    return costs, client_costs, redone


def spread(values: list[float]) -> str:
    """median [min..max], one decimal."""
    return f"{statistics.median(values):.1f} [{min(values):.1f}..{max(values):.1f}]"


def measured_call(
    client: redis.Redis, call: Callable[[], _T], fcalls: int = 1
) -> tuple[float | None, _T]:
    """ms of Redis time of ``call`` (``fcalls`` FCALLs; None if another client's FCALL
    overlapped), and what it returned."""
    calls, usec = fcall_stats(client)
    value = call()
    calls_after, usec_after = fcall_stats(client)
    return ((usec_after - usec) / 1000 if calls_after - calls == fcalls else None), value


def measured(client: redis.Redis, call: Callable[[], object], fcalls: int = 1) -> float | None:
    """ms of Redis time of ``call`` (``fcalls`` FCALLs), or None if another client's FCALL
    overlapped."""
    return measured_call(client, call, fcalls)[0]


def first_events(client: redis.Redis, rounds: int) -> dict[str, list[float]]:
    """ms of Redis time per 1,000 first events (each on a new timeline), by path: the leading
    edge (`ds_add` with an open nonce, then `ds_close_many` once acknowledged) and the delivery path
    (a plain `ds_add`, then `ds_open_many` and `ds_close_many` of the 1,000 digests)."""
    namespace = unique("lua-first")
    store = RedisStore(client, namespace=namespace)
    payload = os.urandom(200)
    costs: dict[str, list[float]] = {
        "leading add": [], "leading close": [], "plain add": [], "open": [], "close": []
    }  # fmt: skip
    offset = 0

    def batch() -> list[NewRecord]:
        nonlocal offset
        records = [
            NewRecord(f"new-{offset + i}", f"r-{offset + i}", T0, payload, offset + i)
            for i in range(RECORDS)
        ]
        offset += RECORDS
        return records

    def keep(name: str, ms: float | None) -> None:
        if ms is not None:  # None: another client's FCALL overlapped; the round is left out
            costs[name].append(ms)

    try:
        for _ in range(rounds):
            nonce = uuid.uuid4().hex[:24]
            added = functools.partial(store.add, 0, batch(), T0, open_nonce=nonce)
            ms, result = measured_call(client, added)
            keep("leading add", ms)
            led = [(0, digest.timeline, digest.id) for digest in result.opened]
            closed = functools.partial(store.close_many, led, T0)
            keep("leading close", measured(client, closed, CHUNKS))
            records = batch()
            keep("plain add", measured(client, functools.partial(store.add, 0, records, T0)))
            targets = [(0, record.timeline, uuid.uuid4().hex) for record in records]
            opened = functools.partial(store.open_many, targets, T0)
            keep("open", measured(client, opened, CHUNKS))
            keep(
                "close", measured(client, functools.partial(store.close_many, targets, T0), CHUNKS)
            )
    finally:
        delete_namespace(client, namespace)
    return costs


def open_cost(client: redis.Redis, records: int = 20_000) -> tuple[float | None, float | None]:
    """ms of Redis time of ds_open, then of a reopen, of one bulk-imported timeline."""
    namespace = unique("lua-open")
    store = RedisStore(client, namespace=namespace, policy=TimelinePolicy(capacity=None))
    prefix = "x" * 990
    try:
        for start in range(0, records, RECORDS):
            batch = [
                NewRecord("bulk", f"{prefix}{i:010d}", T0, b"p" * 10, i)
                for i in range(start, min(records, start + RECORDS))
            ]
            store.add(0, batch, T0)
        first = measured(client, lambda: store.open(0, "bulk", uuid.uuid4().hex, T0))
        again = measured(client, lambda: store.open(0, "bulk", uuid.uuid4().hex, T0))
        return first, again
    finally:
        delete_namespace(client, namespace)


def redis_cpu(client: redis.Redis) -> float:
    """Seconds of CPU Redis's main thread has used (user + system)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])


def interleaved(client: redis.Redis, per_timeline: int) -> list[tuple[float, float] | None]:
    """Per call of `per_timeline` calls that add one record to each of RECORDS timelines: µs
    per event of Redis time in FCALL and of Redis's main-thread CPU (None: another client's
    FCALL overlapped that call). The first call leads (open nonce) and its digests are
    closed, outside the figures."""
    namespace = unique("lua-interleaved")
    store = RedisStore(client, namespace=namespace)
    payload = os.urandom(200)
    costs: list[tuple[float, float] | None] = []
    try:
        for call in range(per_timeline):
            batch = [
                NewRecord(f"tl-{i}", f"r-{call}-{i}", T0 + call, payload, call * RECORDS + i)
                for i in range(RECORDS)
            ]
            nonce = uuid.uuid4().hex[:24] if call == 0 else None
            cpu = redis_cpu(client)
            ms, result = measured_call(
                client, functools.partial(store.add, 0, batch, T0 + call, open_nonce=nonce)
            )
            cpu_us = (redis_cpu(client) - cpu) * 1e6 / RECORDS
            costs.append(None if ms is None else (ms * 1000 / RECORDS, cpu_us))
            if result.opened:  # acknowledged: closed, as the ingest does
                led = [(0, digest.timeline, digest.id) for digest in result.opened]
                store.close_many(led, T0 + call)
    finally:
        delete_namespace(client, namespace)
    return costs


def per_event(costs: list[tuple[float, float] | None], which: int) -> float | None:
    """Mean µs per event over the calls (`which`: 0 FCALL time, 1 CPU), None when any call
    overlapped another client's FCALL."""
    known = [cost[which] for cost in costs if cost is not None]
    return statistics.fmean(known) if len(known) == len(costs) else None


def print_interleaved(client: redis.Redis, shapes: list[int], repeats: int = 3) -> None:
    """Prints `interleaved` per shape: µs per event over all calls (FCALL time and Redis CPU,
    median of `repeats` runs), and call by call (FCALL time, of the run with the median)."""
    for per_timeline in shapes:
        runs = [interleaved(client, per_timeline) for _ in range(repeats)]
        measured_runs = sorted(
            (mean, run) for run in runs if (mean := per_event(run, 0)) is not None
        )
        if not measured_runs:
            print(f"interleaved x {per_timeline}: every run overlapped other clients' FCALLs")
            continue
        means = [mean for mean, _ in measured_runs]
        cpus = [cpu for _, run in measured_runs if (cpu := per_event(run, 1)) is not None]
        median_run = measured_runs[len(measured_runs) // 2][1]
        print(
            f"interleaved, {RECORDS:,} timelines x {per_timeline} calls of one record each: "
            f"{spread(means)} us per event in FCALL, {spread(cpus)} us of Redis CPU "
            f"({len(means)} of {repeats} runs); FCALL us per event, call by call: "
            + " ".join(f"{cost[0]:.1f}" for cost in median_run if cost is not None)
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--interleaved",
        default="5,20,100",
        help="records per timeline of the interleaved shapes, comma-separated",
    )
    parser.add_argument(
        "--only-interleaved", action="store_true", help="run the interleaved shapes only"
    )
    args = parser.parse_args(argv)
    client = redis.Redis.from_url(stack().redis_url)
    shapes = [int(value) for value in args.interleaved.split(",") if value]
    try:
        if args.only_interleaved:
            print_interleaved(client, shapes)
            return 0
        for label, timelines in SHAPES:
            costs, client_costs, redone = shape(client, timelines, args.rounds)
            print(
                f"{label}: "
                + " ".join(f"{c:.1f}" for c in costs)
                + f" ms per 1,000 records (median {spread(costs)}; client side "
                + f"{spread(client_costs)})"
                + (f" ({redone} attempts redone: other clients' FCALLs)" if redone else "")
            )
        firsts = first_events(client, args.rounds)
        print(
            "1,000 first events (new timelines), ms per 1,000: "
            + ", ".join(
                f"{name} {spread(values)}" if values else f"{name} overlapped"
                for name, values in firsts.items()
            )
        )
        if all(firsts.values()):
            leading = statistics.median(firsts["leading add"]) + statistics.median(
                firsts["leading close"]
            )
            delivery = sum(
                statistics.median(firsts[name]) for name in ("plain add", "open", "close")
            )
            print(
                f"  per first event: leading edge {leading:.1f} us (add + close), delivery "
                f"path {delivery:.1f} us (add + open + close), {delivery / leading:.2f}x"
            )
        first, again = open_cost(client)
        print(
            "open of 20,000 records (1,000-byte ids, shared prefix, equal timestamps): "
            + " / ".join("overlapped" if ms is None else f"{ms:.1f}" for ms in (first, again))
            + " ms (open / reopen)"
        )
        print_interleaved(client, shapes)
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
