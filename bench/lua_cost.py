"""Server-side cost of `ds_add` per record, by batch shape (Redis's own clock, no client time).

    python -m bench.lua_cost [--rounds N]

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
argument packing and round trip included, less Redis's time). Then `ds_open` of one
bulk-imported timeline (20,000 records, 1,000-byte ids sharing a prefix, equal timestamps, no
capacity): ms of Redis time for the open and for a reopen.
Uses its own namespace on the stack's Redis and removes it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable

import redis

from bench.common import T0, delete_namespace, stack, unique
from digest_stream.store import NewRecord, RedisStore, TimelinePolicy

RECORDS = 1_000
#: (label, timelines per call of RECORDS records): 1, 20 and 1,000 records per timeline.
SHAPES = (("1,000 timelines x 1", 1_000), ("50 timelines x 20", 50), ("1 timeline x 1,000", 1))
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


def measured(client: redis.Redis, call: Callable[[], object]) -> float | None:
    """ms of Redis time of ``call`` (one FCALL), or None if another client's FCALL overlapped."""
    calls, usec = fcall_stats(client)
    call()
    calls_after, usec_after = fcall_stats(client)
    return (usec_after - usec) / 1000 if calls_after - calls == 1 else None


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    client = redis.Redis.from_url(stack().redis_url)
    try:
        for label, timelines in SHAPES:
            costs, client_costs, redone = shape(client, timelines, args.rounds)
            print(
                f"{label}: "
                + " ".join(f"{c:.1f}" for c in costs)
                + f" ms per 1,000 records (median {spread(costs)}; client side "
                + f"{spread(client_costs)})"
                + (f" ({redone} attempts redone: other clients' FCALLs)" if redone else "")
            )
        first, again = open_cost(client)
        print(
            "open of 20,000 records (1,000-byte ids, shared prefix, equal timestamps): "
            + " / ".join("overlapped" if ms is None else f"{ms:.1f}" for ms in (first, again))
            + " ms (open / reopen)"
        )
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
