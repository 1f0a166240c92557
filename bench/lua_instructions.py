"""Instructions Redis executes per store operation, counted by callgrind (repeatable under load).

    python -m bench.lua_instructions [--records 256]

`bench.lua_cost` reads Redis's own clock, which a busy host inflates (two cores shared with
the broker, the service and other tests can double it). This counts instructions instead:
a redis-server of its own runs under `valgrind --tool=callgrind` with instrumentation off,
switched on (`callgrind_control -i on`, counters zeroed) around each measured call only, so
the figure is the same on a quiet or a loaded machine. Per operation, for `--records` new
timelines (one record each) of one partition:

- leading add: `ds_add` with an open nonce (the leading edge opens each timeline's digest);
- leading close: `ds_close_leading` of those digests (their broker acknowledgement);
- then the delivery path's `ds_add` (plain), `ds_open_many` and `ds_close_many` of as many;
- append: `ds_add` of one more record to each of those timelines, at 20 records each.

Needs valgrind (Debian's `valgrind` package) and redis-server; the server is stopped by pid.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

from digest_stream.store import NewRecord
from digest_stream.store.base import AddResult
from digest_stream.store.redis import RedisStore

T0 = 1_700_000_000.0
PAYLOAD = b"x" * 200


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class CountedRedis:
    """A redis-server under callgrind; `count(call)` is the instructions `call` made it run."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                "valgrind", "--tool=callgrind", "--instr-atstart=no",
                f"--callgrind-out-file={workdir}/callgrind.out.%p",
                "redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no",
            ],
            cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError("redis-server under callgrind did not answer") from None
                time.sleep(0.2)

    def count(self, call: Callable[[], object]) -> int:
        """Instructions the server ran during ``call``."""
        pid = str(self.process.pid)
        subprocess.run(["callgrind_control", "-i", "on", pid], capture_output=True, check=True)
        subprocess.run(["callgrind_control", "-z", pid], capture_output=True, check=True)
        call()
        subprocess.run(["callgrind_control", "-d", pid], capture_output=True, check=True)
        subprocess.run(["callgrind_control", "-i", "off", pid], capture_output=True, check=True)
        newest = max(glob.glob(f"{self.workdir}/callgrind.out.{pid}.*"), key=os.path.getmtime)
        found = re.search(r"^summary: (\d+)", Path(newest).read_text(), re.M)
        assert found is not None, f"no summary in {newest}"
        return int(found.group(1))

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) by its pid."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def measure(server: CountedRedis, records: int) -> dict[str, float]:
    """k instructions per record (adds) or per digest (opens, closes)."""
    store = RedisStore(server.client, namespace=f"li-{uuid.uuid4().hex[:8]}")
    per = records * 1000

    def batch(prefix: str, first: int) -> list[NewRecord]:
        return [
            NewRecord(f"{prefix}{i}", f"r{first + i}", T0, PAYLOAD, first + i)
            for i in range(records)
        ]

    out: dict[str, float] = {}
    result: dict[str, AddResult] = {}
    out["leading add"] = (
        server.count(
            lambda: result.setdefault("r", store.add(0, batch("a", 0), T0, open_nonce="1" * 24))
        )
        / per
    )
    led = [(0, digest.timeline, digest.id) for digest in result["r"].opened]
    out["leading close"] = server.count(lambda: store.close_leading("1" * 24, led, T0 + 1)) / per
    plain = batch("b", records)
    out["plain add"] = server.count(lambda: store.add(0, plain, T0)) / per
    targets = [(0, record.timeline, uuid.uuid4().hex) for record in plain]
    out["open"] = server.count(lambda: store.open_many(targets, T0)) / per
    out["close"] = server.count(lambda: store.close_many(targets, T0)) / per
    # the append: each timeline grows to 20 records, one record per call
    offset = 2 * records
    for _ in range(19):
        store.add(0, batch("c", offset), T0)
        offset += records
    more = batch("c", offset)
    out["append at 20"] = server.count(lambda: store.add(0, more, T0)) / per
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=256)
    args = parser.parse_args(argv)
    missing = [tool for tool in ("valgrind", "callgrind_control", "redis-server")
               if shutil.which(tool) is None]  # fmt: skip
    if missing:
        print(f"lua_instructions: needs {', '.join(missing)} (apt-get install valgrind)")
        return 1
    with tempfile.TemporaryDirectory(prefix="lua-instructions-") as workdir:
        server = CountedRedis(Path(workdir))
        try:
            figures = measure(server, args.records)
        finally:
            server.stop()
    for name, value in figures.items():
        print(f"{name}: {value:.1f} k instructions")
    first = figures["leading add"] + figures["leading close"]
    delivery = figures["plain add"] + figures["open"] + figures["close"]
    print(
        f"per first event: leading edge {first:.1f} k (add + close), delivery path "
        f"{delivery:.1f} k (add + open + close), {delivery / first:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
