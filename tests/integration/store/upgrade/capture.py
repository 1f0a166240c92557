"""Captures the Redis state an old library wrote, as the fixtures of test_upgrade.py.

How the fixtures were made (run from the repository root, with redis-server on PATH):

    python tests/integration/store/upgrade/capture.py

For each library in LIBRARIES this checks out its last commit in a temporary git worktree,
starts a throwaway redis-server, runs ``Scenario.run`` with THAT commit's store (this file is
run again with the old tree first on PYTHONPATH: the old RedisStore loads the old Lua
library), and writes every key of the namespace, by type and with its TTL, to ``lib<N>.json``
beside this file, with the records the scenario added and what each one is due after the
upgrade (``expect``: ``deliver``, ``delivered`` before it, ``dropped`` by capacity), and the
digests in flight. The old library is loaded into that throwaway Redis only, never into a
shared one. Arguments: library numbers (default: all of LIBRARIES).

This file imports nothing from tests/ and only what every old library's
``digest_stream.store`` has: it runs under each of them.
"""

from __future__ import annotations

import base64
import dataclasses
import inspect
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The last commit of each library still in use, by version (CHANGELOG.md): 9, the last whose
#: metas carry no cause and whose fence no topic id; 16, the last milestone's ("Operators'
#: kit"); 17 and 18, which kept the leading edge's digests their own ways; 25, the last
#: before the cooling close; 27, the last before each timeline's own inline limit; 29, the
#: last before the leading edge's batch form; 32, the last before list containers.
LIBRARIES = {
    "9": "41e1ab5",
    "16": "68e3a4a",
    "17": "96290d2",
    "18": "b9d17e6",
    "25": "e090ad4",
    "27": "3e0151e",
    "29": "bdd3047",
    "32": "5d811ff",
}
NAMESPACE = "up"
#: The fake clock of the scenario: every time in the captured state is relative to it, and
#: the test runs the current code from CAPTURED_AT on (calendar fires are on the 10 minutes).
CAPTURED_AT = 1_800_000_000.0
TOPIC_ID = "dXBncmFkZS10b3BpYw"
#: Policies by timeline prefix (the default policy elsewhere), the same for the old store and
#: the test: due times in the state were computed from them.
POLICIES: dict[str, dict[str, Any]] = {
    "cal:": {"schedule": "*/10 * * * *"},
    "cap:": {"capacity": 3},
}
HERE = Path(__file__).resolve().parent


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def resolver_of(policies: dict[str, dict[str, Any]], policy_type: Any) -> Callable[[str], Any]:
    """Timeline -> policy: the first prefix of ``policies`` it starts with, else the default
    (``policy_type``: that library's TimelinePolicy)."""
    made = {prefix: policy_type(**fields) for prefix, fields in policies.items()}
    default = policy_type()

    def resolve(timeline: str) -> Any:
        for prefix, policy in made.items():
            if timeline.startswith(prefix):
                return policy
        return default

    return resolve


def dump_namespace(client: Any, namespace: str) -> list[dict[str, Any]]:
    """Every key of the namespace by type, with its remaining TTL (ms, -1: none)."""
    out = []
    for key in sorted(client.scan_iter(match=f"{{{namespace}:*", count=1000)):
        kind = client.type(key).decode()
        entry: dict[str, Any] = {"key": key.decode(), "type": kind, "pttl": client.pttl(key)}
        if kind == "string":
            entry["value"] = _b64(client.get(key))
        elif kind == "hash":
            entry["value"] = {_b64(f): _b64(v) for f, v in sorted(client.hgetall(key).items())}
        elif kind == "zset":
            entry["value"] = [[_b64(m), s] for m, s in client.zrange(key, 0, -1, withscores=True)]
        elif kind == "list":
            entry["value"] = [_b64(element) for element in client.lrange(key, 0, -1)]
        else:
            raise SystemExit(f"{key!r}: a {kind} is no type the store writes")
        out.append(entry)
    return out


class Scenario:
    """The state to capture, written through the old store's own calls."""

    def __init__(self, store: Any, library: str, policies: dict[str, Any]) -> None:
        self.store = store
        self.policies = policies
        self.library = int(library)
        self.offset = 0
        self.records: list[dict[str, Any]] = []
        self.in_flight: list[dict[str, Any]] = []
        self.nonces = 0

    def add(
        self,
        partition: int,
        timeline: str,
        ids: list[str],
        at: float,
        *,
        lead: bool,
    ) -> Any:
        """Records added at ``at`` (with the leading edge when the library has one)."""
        from digest_stream.store import NewRecord

        batch = []
        for record_id in ids:
            self.offset += 1
            payload = f"{self.library}:{timeline}:{record_id}".encode()
            batch.append(NewRecord(timeline, record_id, at - 1.0, payload, offset=self.offset))
            self.records.append(
                {
                    "partition": partition,
                    "timeline": timeline,
                    "id": record_id,
                    "offset": self.offset,
                    "expect": "deliver",
                }
            )
        options: dict[str, Any] = {}
        if "topic_id" in inspect.signature(self.store.add).parameters:
            options["topic_id"] = TOPIC_ID
        if lead and self.library >= 17:
            self.nonces += 1
            options["open_nonce"] = f"{self.nonces:024x}"
        return self.store.add(partition, batch, at, **options)

    def expect(self, partition: int, timeline: str, state: str) -> None:
        """What the records of a timeline are due now (after an ack, a capacity trim)."""
        for record in self.records:
            if record["partition"] == partition and record["timeline"] == timeline:
                record["expect"] = state

    def lead(self, partition: int, timeline: str, ids: list[str], at: float) -> str:
        """A first event: its leading digest's id (a plain open where the library has no
        leading edge, as delivery would have opened it)."""
        result = self.add(partition, timeline, ids, at, lead=True)
        if getattr(result, "opened", None):
            (digest,) = result.opened
            return str(digest.id)
        assert result.ready == [timeline], result
        return str(self.store.open(partition, timeline, self.new_id(), at + 0.5).id)

    def acknowledged(self, partition: int, timeline: str, digest_id: str, at: float) -> None:
        """The broker acknowledged a leading digest: 18 settles it, the others close it."""
        settled = hasattr(self.store, "settle") and self.store.settle(partition, [digest_id])
        if settled != [True]:
            assert self.store.close(partition, timeline, digest_id, at)
        self.expect(partition, timeline, "delivered")

    def new_id(self) -> str:
        self.nonces += 1
        return f"{self.nonces:032x}"

    def flying(self, partition: int, timeline: str, digest_id: str) -> None:
        self.in_flight.append({"partition": partition, "timeline": timeline, "id": digest_id})

    def run(self) -> None:
        """Timelines in every state an old library leaves behind, in the order of time."""
        t = CAPTURED_AT
        store = self.store
        # A leading digest never acknowledged while its timeline's next digest is open (18:
        # the first in the leading hash, the second its open digest).
        first = self.lead(0, "lead-two", ["y-1"], t - 3000)
        self.add(0, "lead-two", ["y-2"], t - 2990, lead=True)
        for due in store.schedule(0, t - 2600):
            self.flying(0, due.timeline, store.open(0, due.timeline, self.new_id(), t - 2600).id)
        self.flying(0, "lead-two", first)
        # Delivered once, then records (below): WAITING with records pending.
        self.add(0, "waiting", ["w-1"], t - 1000, lead=False)
        digest = store.open(0, "waiting", self.new_id(), t - 999)
        assert store.close(0, "waiting", digest.id, t - 998)
        self.expect(0, "waiting", "delivered")
        # A leading digest never acknowledged, records since, and its timeline READY again (18:
        # due after its cool-down and scheduled, not opened: delivery down).
        self.flying(1, "lead-ready", self.lead(1, "lead-ready", ["z-1"], t - 997))
        self.add(1, "lead-ready", ["z-2"], t - 990, lead=True)
        store.schedule(1, t - 600)
        # A digest delivery opened and never closed (killed), a record waiting behind it.
        self.add(0, "open", ["o-1"], t - 500, lead=False)
        self.flying(0, "open", store.open(0, "open", self.new_id(), t - 400).id)
        # Acknowledged leading digests: one cooling with records since, one with nothing.
        self.acknowledged(0, "lead-again", self.lead(0, "lead-again", ["a-1"], t - 200), t - 199)
        self.acknowledged(0, "lead-done", self.lead(0, "lead-done", ["d-1"], t - 100), t - 99)
        # Capacity 3: two of five trimmed, reported by the next digest (READY, announced).
        result = self.add(0, "cap:small", ["k-1", "k-2", "k-3", "k-4", "k-5"], t - 60, lead=False)
        assert result.dropped == 2, result
        for record in self.records:
            if record["timeline"] == "cap:small" and record["id"] in ("k-1", "k-2"):
                record["expect"] = "dropped"
        if "cal:" in self.policies:
            # A calendar timeline waiting for its next fire (CAPTURED_AT).
            self.add(0, "cal:daily", ["c-1"], t - 50, lead=True)
        self.add(0, "lead-again", ["a-2"], t - 50, lead=True)
        # A refused publish: 18 reclaimed it for delivery at once; the others leave it open.
        refused = self.lead(0, "lead-refused", ["x-1"], t - 40)
        if hasattr(store, "reclaim"):
            assert store.reclaim(0, t - 39, [refused]) == ["lead-refused"]
        self.flying(0, "lead-refused", refused)
        # READY, announced, never delivered (delivery down).
        self.add(0, "ready", ["r-1", "r-2"], t - 30, lead=False)
        # Leading digests published, not acknowledged (the ingest killed): one with a record
        # behind it, one alone on each partition.
        self.flying(0, "lead-more", self.lead(0, "lead-more", ["m-1"], t - 20))
        self.add(0, "lead-more", ["m-2"], t - 10, lead=True)
        self.add(0, "waiting", ["w-2", "w-3"], t - 10, lead=False)
        self.add(0, "open", ["o-2"], t - 5, lead=False)
        self.flying(1, "lead-flight", self.lead(1, "lead-flight", ["p1-1", "p1-2"], t - 3))
        self.flying(0, "lead-flight", self.lead(0, "lead-flight", ["evt-1"], t - 2))


def capture(library: str, redis_url: str, out: Path) -> None:
    """Runs SCENARIO with the store importable now (the old one) and writes its fixture."""
    import redis

    from digest_stream.store import TimelinePolicy
    from digest_stream.store.redis import RedisStore

    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.function_flush()
    # The options this library has (a calendar schedule came with library 11).
    known = {option.name for option in dataclasses.fields(TimelinePolicy)}
    used = {prefix: fields for prefix, fields in POLICIES.items() if set(fields) <= known}
    store = RedisStore(client, namespace=NAMESPACE, resolver=resolver_of(used, TimelinePolicy))
    scenario = Scenario(store, library, used)
    scenario.run()
    fixture = {
        "library": library,
        "commit": LIBRARIES[library],
        "namespace": NAMESPACE,
        "captured_at": CAPTURED_AT,
        "topic_id": TOPIC_ID if "topic_id" in inspect.signature(store.add).parameters else None,
        "policies": used,
        "records": scenario.records,
        "in_flight": scenario.in_flight,
        "keys": dump_namespace(client, NAMESPACE),
    }
    out.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
    client.function_flush()
    client.flushall()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    """Every library's fixture: a worktree of its commit and a throwaway Redis each."""
    root = Path(subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip())
    wanted = sys.argv[1:] or list(LIBRARIES)
    with tempfile.TemporaryDirectory(prefix="ds-upgrade-capture-") as scratch:
        port = _free_port()
        server = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                scratch,
            ],
            stdout=subprocess.DEVNULL,
        )
        try:
            url = f"redis://127.0.0.1:{port}/0"
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            for library in wanted:
                tree = Path(scratch) / f"lib{library}"
                subprocess.check_call(
                    [
                        "git",
                        "-C",
                        str(root),
                        "worktree",
                        "add",
                        "--detach",
                        "--quiet",
                        str(tree),
                        LIBRARIES[library],
                    ]
                )
                try:
                    env = {**os.environ, "PYTHONPATH": str(tree)}
                    subprocess.check_call(
                        [
                            sys.executable,
                            __file__,
                            "--one",
                            library,
                            url,
                            str(HERE / f"lib{library}.json"),
                        ],
                        env=env,
                        cwd=scratch,
                    )
                finally:
                    subprocess.check_call(
                        ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)]
                    )
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        capture(sys.argv[2], sys.argv[3], Path(sys.argv[4]))
    else:
        main()
