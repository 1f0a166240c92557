"""An upgrade over the state each library still in use wrote (issue 36): the fixtures under
upgrade/ were written by the old code itself (upgrade/capture.py says how), this test only
restores them into Redis (single node and cluster) and runs the current library over them as
the service does (its own scheduler: take-over, maintenance and schedule ticks; delivery's
open and close of what it announced), until nothing is due. Every record the old library
stored is accounted for: published in a digest, or reported (a capacity drop); none is lost,
none reported expired (docs/store.md, Upgrades).
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from digest_stream.clock import ManualClock
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.scheduler import ScheduleEmitter, Scheduler
from digest_stream.settings import Settings
from digest_stream.store import Fence, InvalidState, TimelinePolicy
from digest_stream.store.limits import SCHEDULE_REPLY_TTL
from digest_stream.store.policy import PolicyResolver
from digest_stream.store.redis import RedisStore
from digest_stream.wire.models import ScheduleReason
from tests.integration.store.upgrade import capture
from tests.support.store import RedisClient, tag_keys

FIXTURES = sorted((Path(__file__).parent / "upgrade").glob("lib*.json"))
#: The scheduler's default maintenance_timeout, and a tick of fake time (its default
#: maintenance_interval: every tick runs maintenance).
MAINTENANCE_TIMEOUT = Settings().maintenance_timeout
TICK = Settings().maintenance_interval
#: Long enough for every cool-down (300 s), maximum delay (1800 s) and calendar fire (10 min)
#: the fixtures hold to come due, and for what they make due in turn.
RUN_FOR = 2 * 3600.0


@pytest.fixture(params=FIXTURES, ids=lambda path: path.stem)
def fixture(request: pytest.FixtureRequest) -> dict[str, Any]:
    """One library's captured state and what its records are due."""
    loaded: dict[str, Any] = json.loads(Path(request.param).read_text())
    return loaded


def _bytes(text: str) -> bytes:
    return base64.b64decode(text)


def restore(client: RedisClient, fixture: dict[str, Any], namespace: str) -> None:
    """Writes the captured keys into ``namespace`` by type, each with its captured TTL."""
    prefix = "{" + fixture["namespace"] + ":"
    for entry in fixture["keys"]:
        assert entry["key"].startswith(prefix), entry["key"]
        key = "{" + namespace + ":" + entry["key"][len(prefix) :]
        kind, value = entry["type"], entry["value"]
        if kind == "string":
            client.set(key, _bytes(value))
        elif kind == "hash":
            client.hset(key, mapping={_bytes(f): _bytes(v) for f, v in value.items()})
        elif kind == "zset":
            client.zadd(key, {_bytes(member): score for member, score in value})
        elif kind == "list":
            client.rpush(key, *(_bytes(element) for element in value))
        else:
            raise AssertionError(f"{key}: no type the store writes ({kind})")
        if entry["pttl"] > 0:
            client.pexpire(key, entry["pttl"])


def resolver_of(fixture: dict[str, Any]) -> PolicyResolver:
    """The policies the old store ran with (the state's due times came from them)."""
    resolve: PolicyResolver = capture.resolver_of(fixture["policies"], TimelinePolicy)
    return resolve


@dataclass
class Delivered:
    """What the current code published after the upgrade."""

    #: (partition, timeline, record id) -> the digest ids that carried it.
    records: dict[tuple[int, str, str], list[str]] = field(
        default_factory=lambda: defaultdict(list)
    )
    digests: dict[tuple[int, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    dropped: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    expired: list[tuple[int, str, str]] = field(default_factory=list)


class Announcements(ScheduleEmitter):
    """The scheduler's emitter with the schedule topic left out: the announced timelines, in
    order, for the test's delivery to open (what delivery reads from the topic)."""

    def __init__(self) -> None:
        self.timelines: dict[tuple[int, str], None] = {}

    def emit(
        self, partition: int, timelines: Iterable[tuple[str, float]], reason: ScheduleReason
    ) -> int:
        """Keeps each announced timeline (once until delivered)."""
        before = len(self.timelines)
        self.timelines |= dict.fromkeys((partition, timeline) for timeline, _ in timelines)
        return len(self.timelines) - before

    def retry_refused(self) -> int:
        """Nothing is ever refused here."""
        return 0


def run_service(
    store: RedisStore, partitions: list[int], start: float, new_id: Callable[[], str]
) -> Delivered:
    """The service over fake time: the scheduler (the service's own, with its default
    settings) takes the partitions over and ticks every TICK seconds; delivery opens each
    timeline it announced and, the publish acknowledged at once, closes it."""
    out = Delivered()
    clock = ManualClock(start)
    elapsed = [0.0]
    announced = Announcements()
    scheduler = Scheduler(Settings(), store, announced, clock, Metrics(), timer=lambda: elapsed[0])
    scheduler.take_over(partitions)
    while clock.now() < start + RUN_FOR:
        scheduler.tick(partitions)
        targets = [(p, timeline, new_id()) for p, timeline in announced.timelines]
        announced.timelines.clear()
        closes = []
        for digest, (partition, _, _) in zip(
            store.open_many(targets, clock.now()), targets, strict=True
        ):
            if isinstance(digest, InvalidState):
                continue  # announced twice: the first open took it
            timeline = digest.timeline
            out.digests[(partition, timeline)].append(digest.id)
            out.dropped[(partition, timeline)] += digest.dropped
            if digest.expired:
                out.expired.append((partition, timeline, digest.id))
            for record in digest.records:
                out.records[(partition, timeline, record.id)].append(digest.id)
            closes.append((partition, timeline, digest.id))
        assert all(store.close_many(closes, clock.now())), closes
        clock.advance(TICK)
        elapsed[0] += TICK
    return out


def test_every_record_an_old_library_stored_is_delivered_or_reported(
    fixture: dict[str, Any], client: RedisClient, namespace: str
) -> None:
    restore(client, fixture, namespace)
    store = RedisStore(client, namespace=namespace, resolver=resolver_of(fixture))
    partitions = sorted({record["partition"] for record in fixture["records"]})
    ids = iter(f"{n:032x}" for n in range(0xF000, 0xFFFF))
    out = run_service(store, partitions, fixture["captured_at"] + 1.0, lambda: next(ids))

    def records(expect: str) -> list[tuple[int, str, str]]:
        return [
            (record["partition"], record["timeline"], record["id"])
            for record in fixture["records"]
            if record["expect"] == expect
        ]

    lost = [record for record in records("deliver") if record not in out.records]
    assert lost == [], f"library {fixture['library']}: never published after the upgrade: {lost}"
    assert out.expired == []
    again = [record for record in records("delivered") if record in out.records]
    assert again == [], "acknowledged before the upgrade, published again"
    trimmed: dict[tuple[int, str], int] = defaultdict(int)
    for partition, timeline, _ in records("dropped"):
        trimmed[(partition, timeline)] += 1
    assert {key: n for key, n in out.dropped.items() if n} == dict(trimmed)
    # A digest in flight goes out under the id it was published with (readers deduplicate
    # by it); one whose timeline had a later digest open too comes back as records.
    in_flight: dict[tuple[int, str], list[str]] = defaultdict(list)
    for digest in fixture["in_flight"]:
        in_flight[(digest["partition"], digest["timeline"])].append(digest["id"])
    for key, digest_ids in in_flight.items():
        if len(digest_ids) == 1:
            assert digest_ids[0] in out.digests[key], (key, out.digests[key])
    # Nothing left behind: no schedule entry, no digest, no pending record, no old key.
    timelines = {(record["partition"], record["timeline"]) for record in fixture["records"]}
    for partition, timeline in sorted(timelines):
        info = store.inspect(partition, timeline)
        assert (info.pending, info.open_digest, info.state) in {
            (0, None, "absent"),
            (0, None, "cooling"),
        }, (partition, timeline, info)
    for partition in partitions:
        stats = store.stats(partition)
        assert (stats.waiting, stats.ready) == (0, 0)
        keys = tag_keys(client, namespace, partition)
        suffixes = {key.split(b"}", 1)[1][:3] for key in keys}
        # the fence, cooling metas, the last schedule's reply (`:m`, no record in it, kept
        # SCHEDULE_REPLY_TTL for a re-send of that call), the leading edge's index (its two
        # generations and their times: one of each per partition, like the fence), and an
        # add's list of ordinary digests once its batch is closed or taken over: a later
        # close_leading of that add may still name them (kept to its TTL); no batch itself
        assert suffixes <= {b":o", b":t:", b":m", b":g", b":i", b":j", b":x:"}, suffixes
        for listed in (key for key in keys if key.split(b"}", 1)[1].startswith(b":x:")):
            for name in client.lrange(listed, 0, -1):
                # each names a digest closed since: none of them is open any more
                assert isinstance(name, bytes)
                assert store.inspect(partition, name.decode()).open_digest is None, listed
        for memo in (key for key in keys if key.endswith(b"}:m")):
            assert 0 < client.pttl(memo) <= SCHEDULE_REPLY_TTL * 1000, memo
        offset = max(r["offset"] for r in fixture["records"] if r["partition"] == partition)
        assert store.fence(partition) == Fence(offset, fixture["topic_id"])


def test_library_18s_leading_hash_is_taken_in_by_the_partitions_first_call(
    client: RedisClient, namespace: str
) -> None:
    fixture = json.loads((Path(__file__).parent / "upgrade" / "lib18.json").read_text())
    restore(client, fixture, namespace)
    in_flight: dict[str, list[str]] = defaultdict(list)
    for digest in fixture["in_flight"]:
        if digest["partition"] == 0:
            in_flight[digest["timeline"]].append(digest["id"])
    store = RedisStore(client, namespace=namespace, resolver=resolver_of(fixture))
    now = fixture["captured_at"] + 1.0
    leading = [f"{{{namespace}:{partition}}}:l".encode() for partition in (0, 1)]
    assert client.exists(*leading) == 2
    # A schedule call of partition 0 (a maintenance call does the same) takes its hash in:
    # each digest is its timeline's open digest again, due at once, so this very call makes
    # it READY and delivery's open will return it.
    due = {item.timeline for item in store.schedule(0, now)}
    assert {"lead-flight", "lead-more"} <= due
    assert client.exists(leading[0]) == 0
    assert client.exists(leading[1]) == 1  # partition 1's own call takes it in
    for timeline, pending in (("lead-flight", 0), ("lead-more", 1)):
        info = store.inspect(0, timeline)
        assert (info.state, info.open_digest, info.open_records, info.pending) == (
            "ready", in_flight[timeline][0], 1, pending,
        )  # fmt: skip
    # Another digest of lead-two was open already (the capture lists it first): the hash's
    # one comes back as a pending record behind it, as library 18's own reclaim did.
    info = store.inspect(0, "lead-two")
    assert (info.open_digest, info.open_records, info.pending) == (in_flight["lead-two"][0], 1, 1)
    opened = store.open(0, "lead-flight", "f" * 32, now)
    assert (opened.id, [r.id for r in opened.records], opened.expired) == (
        in_flight["lead-flight"][0], ["evt-1"], False,
    )  # fmt: skip
    # Once taken in, nothing is left to take: another instance's call changes nothing.
    before = {key: client.dump(key) for key in tag_keys(client, namespace, 0)}
    other = RedisStore(client, namespace=namespace, resolver=resolver_of(fixture))
    assert other.schedule(0, now) == []
    after = {key: client.dump(key) for key in tag_keys(client, namespace, 0)}
    assert after.keys() == before.keys()
    # A maintenance call takes partition 1's in too (a deadline that finds nothing stale).
    assert store.maintenance(1, fixture["captured_at"] - 3600, now) == []
    assert client.exists(leading[1]) == 0
    ids = {d["timeline"]: d["id"] for d in fixture["in_flight"] if d["partition"] == 1}
    assert store.inspect(1, "lead-flight").open_digest == ids["lead-flight"]
    # READY already (scheduled after its cool-down, never opened): READY it stays, and the
    # open delivery makes of its announcement returns the digest, the later record behind.
    info = store.inspect(1, "lead-ready")
    assert (info.state, info.open_digest, info.open_records, info.pending) == (
        "ready", ids["lead-ready"], 1, 1,
    )  # fmt: skip
