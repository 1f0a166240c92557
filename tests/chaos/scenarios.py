"""The fault scenarios of issue 7, parametrized by size (the full runs and the make-test slice).

Each one runs the real CLI as separate processes, sends a known load, injects its fault on a
schedule, waits until every event id is accounted for, prints one line of figures and asserts
lost == 0, every timeline's events out in the order the broker took them, and no record under
two digest ids (where a scenario's fault explains some, exactly those).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions

from digest_stream.client.producer import EventProducer
from digest_stream.settings import Settings
from digest_stream.wire import codec, control
from digest_stream.wire.models import Event
from tests.chaos.harness import (
    CHAOS_KAFKA_CONFIG,
    REFUSING_CAUSE,
    Accounting,
    CommitWatcher,
    DeadLetterLog,
    Figures,
    Hostile,
    Load,
    Output,
    OwnKafka,
    OwnRedis,
    ScheduleLog,
    Sent,
    Services,
    Shape,
    delete_topics,
    end_offsets_of,
    recovery_deadline,
    report,
    scenario,
)
from tests.support import REPO_ROOT, unique, wait_until
from tests.support.crash_hooks import pause_after_leading_add_env, pause_before_close_env
from tests.support.kafka import committed_offsets
from tests.support.kraft import BrokerPair
from tests.support.pipeline import ServiceProcess, settings_env
from tests.support.proxy import TcpProxy


@dataclass(frozen=True)
class Size:
    """How much load a scenario sends."""

    events: int
    timelines: int
    rate: float  # events per second
    drain: float = 180.0  # seconds to wait for the last digests after the load

    @property
    def seconds(self) -> float:
        """Duration of the load (0 for a load sent as fast as the broker takes it)."""
        return self.events / self.rate if self.rate > 0 else 0.0


INGEST = "ingest,scheduler"
ALL = "ingest,scheduler,delivery"

FULL = Size(events=50_000, timelines=300, rate=1000.0, drain=300.0)
SLICE = Size(events=4_000, timelines=100, rate=400.0, drain=90.0)
#: The leading edge's scenarios: 10,000 timelines, each event 10 s after its timeline's last
#: one, so (cool-down 1-2 s) nearly every event finds its timeline quiet.
LEADING = Size(events=50_000, timelines=10_000, rate=1000.0, drain=300.0)
#: Sizes of the issue-12 scenarios (each run a few minutes on the 2-core box).
SHORT_TTL = Size(events=6_000, timelines=300, rate=200.0, drain=120.0)
ACL = Size(events=20_000, timelines=100, rate=1000.0, drain=120.0)
REFUSING = Size(events=30_000, timelines=300, rate=1000.0, drain=180.0)
OVERSIZE = Size(events=600, timelines=10, rate=60.0, drain=60.0)
DEAD_LETTERS = Size(events=5_000, timelines=100, rate=500.0, drain=120.0)
#: Issue 20: 30 s of load over 60 timelines, each cooling down all along (an event every 0.15 s).
GROWN = Size(events=12_000, timelines=60, rate=400.0, drain=120.0)


def pace(seconds: float, output: Output, dlq: DeadLetterLog) -> None:
    """The fault schedule's pause (not a wait for a condition): keep reading meanwhile."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        output.poll(min(0.2, max(0.0, end - time.monotonic())))
        dlq.poll(0)


def _start_under_load(
    settings: Settings,
    size: Size,
    services: Services,
    output: Output,
    dlq: DeadLetterLog,
    *roles: str,
    load: Load | None = None,
) -> tuple[list[ServiceProcess], Load, Accounting]:
    """Start one service per roles, wait until each is ready; then start the load (this size,
    unless one is given) and the accounting of where its events end up."""
    procs = [services.start(r) for r in roles]
    for proc in procs:
        services.wait_started(proc)
    load = (load or Load(settings, size.events, size.timelines, size.rate)).start()
    return procs, load, Accounting(load, output, dlq)


def _finish(
    name: str,
    acc: Accounting,
    size: Size,
    *,
    note: str = "",
    allow_duplicates: bool = False,
    deadline: float | None = None,
    **counts: Any,
) -> Figures:
    """Wait for every event, report the line, assert lost == 0, the order, no duplicates (unless
    allowed) and the recovery deadline (by default the settings' `recovery_deadline`). `counts`
    go to `Accounting.figures` (dead_lettered=, dropped_counted=)."""
    for load in acc.loads():
        load.wait_acked(timeout=size.seconds * 4 + 300)
    acc.wait_complete(size.drain)
    figures = acc.figures(
        name, note=note, deadline=deadline or recovery_deadline(acc.load.settings), **counts
    )
    report(figures)
    missing = sorted(acc.missing())
    assert figures.lost == 0, f"{figures.line()}; e.g. {missing[:5]}"
    figures.check_order()
    if not allow_duplicates:
        dup = acc.duplicated()
        assert not dup, f"{figures.line()}; records under two digest ids: {list(dup.items())[:3]}"
    figures.check_recovery()
    return figures


def _all_alive(services: Services) -> None:
    dead = [p for p in services.all if p.popen.poll() is not None and p.popen.returncode != -9]
    dead = [p for p in dead if p.popen.returncode not in (0,)]
    assert not dead, "a service process died:\n" + "\n".join(p.log()[-3000:] for p in dead)


# --------------------------------------------------------------------------- 1 ingest kills


def ingest_sigkill(settings: Settings, size: Size, every: float = 3.0) -> Figures:
    """SIGKILL one of two ingest processes every `every` seconds, restarting it each time."""
    with scenario(settings) as (services, output, dlq):
        (_, *ingests), load, acc = _start_under_load(
            settings, size, services, output, dlq, "delivery", INGEST, INGEST
        )
        kills = 0
        try:
            while not load.finished.is_set() or kills < 2:
                pace(every, output, dlq)
                slot = kills % 2
                services.kill(ingests[slot])
                kills += 1
                ingests[slot] = services.start(INGEST)
                acc.fault_ended()
            figures = _finish("1 ingest SIGKILL", acc, size, note=f"{kills} kills every {every}s")
        finally:
            load.stop()
        _all_alive(services)
        return figures


# --------------------------------------------------------------------------- 2 delivery kills


def delivery_sigkill_before_close(settings: Settings, size: Size, tmp: Path) -> Figures:
    """SIGKILL delivery between publish and close (test hook), restart it; repeat; then drain."""
    with scenario(settings) as (services, output, dlq):
        _, load, acc = _start_under_load(settings, size, services, output, dlq, INGEST)
        paused: list[str] = []
        kills = 0
        try:
            while not load.finished.is_set() or len(paused) < 2:
                marker = tmp / f"{uuid.uuid4().hex}.paused"
                hooked = services.start("delivery", **pause_before_close_env(marker))

                def at_hook(m: Path = marker) -> bool:
                    output.poll(0.1)
                    return m.exists() and bool(m.read_text().strip())

                wait_until(at_hook, 120, "the delivery to pause between publish and close")
                services.kill(hooked)  # published and acknowledged, never closed
                kills += 1
                paused += marker.read_text().split()
            services.start("delivery")
            acc.fault_ended()
            figures = _finish(
                "2 delivery SIGKILL before close",
                acc,
                size,
                note=f"{kills} kills, {len(paused)} digests published, not closed",
            )
        finally:
            load.stop()
        # Each killed-before-close digest went out again under the same id (repeat, no dup).
        repeats = {d: output.copies.get(d, 0) for d in paused}
        assert all(count >= 2 for count in repeats.values()), repeats
        _all_alive(services)
        return figures


# --------------------------------------------------------------------------- 2b leading edge


def leading_edge_sigkill(settings: Settings, size: Size, tmp: Path, point: str) -> Figures:
    """SIGKILL an ingest that publishes the leading edge (direct_leading_edge) at one of its
    crash points, restart it; repeat; then drain. ``point``: "add" (the add opened digests,
    their produce never happens) or "ack" (acknowledged by the broker, never closed). A
    delivery runs throughout: the take-over's RECOVERED entries reach it."""
    assert settings.direct_leading_edge
    env = pause_after_leading_add_env if point == "add" else pause_before_close_env
    with scenario(settings) as (services, output, dlq):
        _, load, acc = _start_under_load(settings, size, services, output, dlq, "delivery")
        paused: list[str] = []
        kills = 0
        try:
            while True:
                marker = tmp / f"{uuid.uuid4().hex}.paused"
                hooked = services.start(INGEST, **env(marker))

                def at_hook(m: Path = marker) -> bool:
                    output.poll(0.1)
                    return m.exists() and bool(m.read_text().strip())

                # Killed at the hook, or wherever it is once the load is over (its hook would
                # park it at its next leading edge): a plain ingest drains what is left.
                wait_until(
                    lambda: at_hook() or load.finished.is_set(),
                    120,
                    f"the ingest to pause at its leading edge ({point})",
                )
                services.kill(hooked)
                kills += 1
                paused += marker.read_text().split() if marker.exists() else []
                if load.finished.is_set():
                    break
            services.start(INGEST)
            assert len(paused) >= 2, f"{len(paused)} digests paused at the hook before the end"
            acc.fault_ended()
            figures = _finish(
                f"2{'b' if point == 'add' else 'c'} leading edge SIGKILL after the {point}",
                acc,
                size,
                note=f"{kills} kills, {len(paused)} digests opened, not closed",
            )
        finally:
            load.stop()
        # Each digest opened and not closed went out under its id: once (never produced) or
        # again (produced, never closed), from the delivery's reopen after the take-over.
        least = 1 if point == "add" else 2
        copies = {d: output.copies.get(d, 0) for d in paused}
        assert all(count >= least for count in copies.values()), copies
        _all_alive(services)
        return figures


# --------------------------------------------------------------------------- 3 rolling restart


def rolling_restart(settings: Settings, size: Size, every: float = 4.0) -> Figures:
    """Three instances; restart them one by one (graceful stop, start, ready) under load."""
    with scenario(settings) as (services, output, dlq):
        instances, load, acc = _start_under_load(
            settings, size, services, output, dlq, ALL, ALL, ALL
        )
        restarts = 0
        try:
            while not load.finished.is_set() or restarts < 3:
                pace(every, output, dlq)
                slot = restarts % 3
                code = instances[slot].stop(timeout=90)
                assert code == 0, f"graceful stop exited {code}:\n{instances[slot].log()[-3000:]}"
                instances[slot] = services.start()
                services.wait_started(instances[slot])
                restarts += 1
                acc.fault_ended()
            figures = _finish("3 rolling restart x3", acc, size, note=f"{restarts} restarts")
        finally:
            load.stop()
        _all_alive(services)
        return figures


# --------------------------------------------------------------------------- 4 Redis rollback


def _after_rollback(
    acc: Accounting, size: Size, name: str, what: str
) -> tuple[Figures, dict[str, set[str]]]:
    """Wait for every event after a Redis rollback, report the line (the duplicates in its
    note), assert lost == 0, the order and the recovery deadline; the figures and the
    duplicates (the caller checks that the rollback explains them)."""
    acc.load.wait_acked(timeout=size.seconds * 4 + 300)
    acc.wait_complete(size.drain)
    dup = acc.duplicated()
    figures = acc.figures(
        name,
        note=f"{what}; {len(dup)} re-published under a new id (their close was rolled back)",
        deadline=recovery_deadline(acc.load.settings),
    )
    report(figures)
    assert figures.lost == 0, f"{figures.line()}; e.g. {sorted(acc.missing())[:5]}"
    figures.check_order()
    figures.check_recovery()
    return figures, dup


#: How long before a snapshot a digest may have been opened and still have its close rolled
#: back (a batch of digests publishing while BGSAVE forks).
ROLLBACK_SLACK = 5.0


def unexplained_duplicates(
    acc: Accounting, dup: dict[str, set[str]], rollbacks: list[tuple[float, float]]
) -> set[str]:
    """Records under two digest ids that no rollback explains. A rollback (snapshot time,
    time Redis was back) explains a record first delivered after its snapshot (less the
    slack) and sent before Redis came back: its close, or its add, was lost and replayed."""
    tracked = acc.tracked()
    return {
        rid
        for rid in dup
        if not any(
            acc.output.first_opened[rid] >= snapshot - ROLLBACK_SLACK and tracked[rid].at <= up
            for snapshot, up in rollbacks
        )
    }


def redis_rollback(settings: Settings, size: Size, redis: OwnRedis, run_on: float = 5.0) -> Figures:
    """BGSAVE, run on, SHUTDOWN NOSAVE, restart from the snapshot: fence behind -> replay."""
    with scenario(settings) as (services, output, dlq):
        _, load, acc = _start_under_load(settings, size, services, output, dlq, ALL, ALL)
        try:
            load.wait_progress(0.3)
            snapshot_at = redis.snapshot()
            pace(run_on, output, dlq)
            redis.shutdown_nosave()
            redis.start()  # loads the snapshot: every write since it is gone
            up_at = time.time()
            acc.fault_ended()
            figures, dup = _after_rollback(
                acc,
                size,
                "4a Redis rolled back to a snapshot",
                f"snapshot, {run_on:.0f}s on, SHUTDOWN NOSAVE, restart",
            )
        finally:
            load.stop()
        logs = services.logs()
        assert "Redis lost writes" in logs, "the ingest did not notice the fence going back"
        # Explained duplicates: records first delivered after the snapshot, sent before Redis
        # came back. Their close (or their add, replayed) was lost with the rollback.
        unexplained = unexplained_duplicates(acc, dup, [(snapshot_at, up_at)])
        assert not unexplained, f"duplicates the rollback does not explain: {list(unexplained)[:5]}"
        _all_alive(services)
        return figures


def controls_every(load: Load, every: int) -> Callable[[int], Hostile | None]:
    """After every `every`-th event, a flush of its timeline (a control message, in order with
    the events): nearly every ingest batch then holds a control."""

    def flush(i: int) -> Hostile | None:
        if i % every:
            return None
        timeline = f"c:{load.prefix}:{i % load.timelines}"
        value = control.encode(control.Control("flush"))
        return Hostile("flush", timeline.encode(), value, frozenset())

    return flush


def redis_rollback_inside_controls(
    settings: Settings, size: Size, redis: OwnRedis, rollbacks: int = 6, every: int = 5
) -> Figures:
    """Rollbacks that land inside batches holding controls: a flush after every `every`-th
    event, and `rollbacks` times BGSAVE then SHUTDOWN NOSAVE at once and restart, so Redis goes
    back to a snapshot taken a moment before, while the ingest applies such batches."""
    with scenario(settings) as (services, output, dlq):
        load = Load(settings, size.events, size.timelines, size.rate)
        load._hostile = controls_every(load, every)
        _, load, acc = _start_under_load(settings, size, services, output, dlq, ALL, ALL, load=load)
        try:
            load.wait_progress(0.2)
            windows: list[tuple[float, float]] = []
            for _ in range(rollbacks):
                snapshot_at = redis.snapshot()
                redis.shutdown_nosave()
                redis.start()
                windows.append((snapshot_at, time.time()))
                acc.fault_ended()
                pace(3.0, output, dlq)
            figures, dup = _after_rollback(
                acc,
                size,
                "4d Redis rollback inside batches holding controls",
                f"{rollbacks} rollbacks (BGSAVE, SHUTDOWN NOSAVE at once, restart) 3s apart, "
                f"a flush after every {every}th event",
            )
        finally:
            load.stop()
        unexplained = unexplained_duplicates(acc, dup, windows)
        assert not unexplained, f"duplicates no rollback explains: {list(unexplained)[:5]}"
        assert "Redis lost writes" in services.logs(), "no rollback was noticed by the fence"
        _all_alive(services)
        return figures


def redis_restarted_empty(settings: Settings, size: Size, redis: OwnRedis, mode: str) -> Figures:
    """SHUTDOWN NOSAVE and restart with nothing: on_state_loss decides (replay | continue)."""
    with scenario(settings) as (services, output, dlq):
        _, load, acc = _start_under_load(settings, size, services, output, dlq, ALL, ALL)
        try:
            load.wait_progress(0.4)
            redis.shutdown_nosave()
            down_at = time.time()
            redis.wipe_snapshot()
            redis.start()
            acc.fault_ended()
            before = {rid for rid, sent in load.acked_copy().items() if sent.at <= down_at}
            acc.load.wait_acked(timeout=size.seconds * 4 + 300)
            if mode == "replay":
                acc.wait_complete(size.drain)
            else:
                acc.wait_complete(size.drain, allowed_missing=before)
                acc.wait_quiet(10.0)
            dup = acc.duplicated()
            figures = acc.figures(
                f"4{'b' if mode == 'replay' else 'c'} Redis restarted empty, on_state_loss={mode}",
                note=(
                    "whole topic replayed: delivered records come again under new ids"
                    if mode == "replay"
                    else "records Redis held at the wipe are lost, by contract"
                ),
                deadline=recovery_deadline(settings),
            )
            if mode == "continue":
                # Only what Redis held at the wipe may be lost (forfeited by the setting);
                # anything else missing is a real loss.
                missing = acc.missing()
                figures.forfeited = len(missing & before)
                figures.lost = len(missing - before)
                delivered = set(acc.tracked()) - missing - acc.dead_lettered_ids()
                figures.all_out_after = acc.all_out_after(delivered) if not figures.lost else None
            report(figures)
        finally:
            load.stop()
        logs = services.logs()
        assert f"on_state_loss={mode}" in logs, "state loss was not reported loudly"
        missing = acc.missing()
        # Only records sent before the wipe may come again (replayed) under a new id.
        assert set(dup) <= before, "duplicates of records sent after the wipe"
        figures.check_order()
        if mode == "replay":
            assert figures.lost == 0, f"{figures.line()}; e.g. {sorted(missing)[:5]}"
        else:
            # Only what Redis held at the wipe may be lost; everything sent after is delivered.
            assert figures.lost == 0, f"lost records sent after the wipe: {sorted(missing)[:5]}"
        figures.check_recovery()
        _all_alive(services)
        return figures


# --------------------------------------------------------------------------- 5 Redis outage


def redis_unreachable(
    settings: Settings, size: Size, proxy: TcpProxy, outage: float = 15.0, partitions: int = 8
) -> Figures:
    """Redis behind a proxy that drops everything for `outage` s: pause, no commits, catch up."""
    with scenario(settings) as (services, output, dlq):
        _, load, acc = _start_under_load(settings, size, services, output, dlq, ALL, ALL)

        def offsets() -> list[int]:
            return committed_offsets(settings, range(partitions))

        try:
            load.wait_progress(0.3)
            proxy.block()
            blocked_at = time.monotonic()
            pace(1.0, output, dlq)  # a store call answered just before the block may commit
            frozen = offsets()
            samples = 0
            while time.monotonic() - blocked_at < outage:
                pace(1.0, output, dlq)
                assert offsets() == frozen, "committed offsets moved while Redis was down"
                samples += 1
            proxy.unblock()
            acc.fault_ended()
            figures = _finish(
                "5 Redis unreachable",
                acc,
                size,
                note=f"{outage:.0f}s outage, offsets frozen over {samples} samples",
            )
        finally:
            proxy.unblock()
            load.stop()
        assert offsets() != frozen, "the ingest did not catch up after the outage"
        assert "Redis unreachable" in services.logs()
        _all_alive(services)
        return figures


# --------------------------------------------------------------------------- 6 Kafka restart


def kafka_restart(settings: Settings, size: Size, kafka: OwnKafka, down: float = 10.0) -> Figures:
    """Stop the (own) broker mid-stream for `down` seconds and start it again."""
    with scenario(settings) as (services, output, dlq):
        _, load, acc = _start_under_load(settings, size, services, output, dlq, ALL, ALL)
        try:
            load.wait_progress(0.3)
            kafka.stop()
            time.sleep(down)  # the fault: broker down (nothing to read meanwhile)
            kafka.start()
            acc.fault_ended()
            figures = _finish(
                "6 Kafka broker restarted", acc, size, note=f"broker down {down:.0f}s"
            )
        finally:
            load.stop()
        _all_alive(services)
        return figures


# --------------------------------------------------------------------------- 7 hostile input

FAR_PAST_MS = 1_000  # 1970-01-01T00:00:01Z
FAR_FUTURE_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z
MAX_EVENT_AGE = 30 * 86400.0  # the scenario's max_event_age: far-past events are dropped
OTHER_SCHEMA = {
    "type": "record",
    "name": "Other",
    "namespace": "elsewhere",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "values", "type": {"type": "array", "items": "double"}},
    ],
}


def _event(record_id: str, timestamp: int, payload: bytes = b"{}") -> bytes:
    return codec.encode_event(Event(id=record_id, timestamp=timestamp, payload=payload))


def _decoded(value: bytes) -> frozenset[str]:
    """What the contract says for these bytes: the decoder's reason, or processed (empty)."""
    try:
        codec.decode_event(value)
    except codec.DecodeError as exc:
        return frozenset({exc.reason})
    return frozenset()


def hostile_mix(prefix: str, every: int, max_bytes: int) -> Callable[[int], Hostile | None]:
    """After every `every`-th good event, one hostile message, cycling through the kinds."""
    import io

    import fastavro

    parsed_other = fastavro.parse_schema(OTHER_SCHEMA)
    rng = __import__("random").Random(7)
    now_ms = int(time.time() * 1000)

    def other_schema() -> bytes:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(
            buffer, parsed_other, {"flag": True, "values": [rng.random() for _ in range(3)]}
        )
        return buffer.getvalue()

    def make(i: int) -> Hostile | None:
        if i % every != every - 1:
            return None
        n = i // every
        kind = n % 13
        good_key = f"c:{prefix}:{i % 7}".encode()
        hid = f"{prefix}-h{n}"
        if kind == 0:
            value = os.urandom(rng.randint(1, 200))
            return _maybe_event("random-bytes", good_key, value)
        if kind == 1:
            whole = _event(hid, now_ms)
            return Hostile("truncated-avro", good_key, whole[: rng.randrange(1, len(whole))],
                           frozenset({"truncated"}))  # fmt: skip
        if kind == 2:
            value = other_schema()
            reasons = _decoded(value)
            assert reasons, "the other schema must not decode as an Event"
            return Hostile("other-schema", good_key, value, reasons)
        if kind == 3:
            return Hostile("missing-key", None, _event(hid, now_ms), frozenset({"missing-key"}))
        if kind == 4:
            if n % (13 * 4) != 4:
                return None  # oversize ones are big: one in four rounds
            value = _event(hid, now_ms, b"x" * (max_bytes + 1000))
            return Hostile("oversize", good_key, value, frozenset({"oversize"}))
        if kind == 5:
            return Hostile("100k-char-timeline", b"t" * 100_000, _event(hid, now_ms),
                           frozenset({"invalid-key"}))  # fmt: skip
        if kind == 6:
            return Hostile("far-past", good_key, _event(hid, FAR_PAST_MS), frozenset(), hid)
        if kind == 7:
            return Hostile("far-future", good_key, _event(hid, FAR_FUTURE_MS), frozenset(), hid)
        if kind == 8:
            value = codec.encode_event(
                Event.model_construct(id=hid, timestamp=-5_000, payload=b"{}", attributes={})
            )
            return Hostile("before-epoch", good_key, value, frozenset({"invalid-value"}))
        if kind == 9:
            # The previous good event again, same key and id: a producer retry.
            rid = f"{prefix}-{i}"
            key = f"c:{prefix}:{i % 300}".encode()
            return Hostile("duplicate-id", key, None, frozenset(), rid)
        if kind == 10:
            return Hostile("tombstone", good_key, None, frozenset({"missing-value"}))
        if kind == 11:
            return Hostile("invalid-utf8-key", b"\xff\xfe", _event(hid, now_ms),
                           frozenset({"invalid-key"}))  # fmt: skip
        value = codec.encode_event(
            Event.model_construct(id="", timestamp=now_ms, payload=b"{}", attributes={})
        )
        return Hostile("empty-id", good_key, value, frozenset({"invalid-value"}))

    return make


def _maybe_event(kind: str, key: bytes, value: bytes) -> Hostile:
    reasons = _decoded(value)
    if reasons:
        return Hostile(kind, key, value, reasons)
    return Hostile(kind, key, value, frozenset(), codec.decode_event(value).id)


def hostile_input(settings: Settings, size: Size, every: int = 50) -> Figures:
    """Good events with hostile messages mixed in; each hostile one ends where it must."""
    with scenario(settings) as (services, output, dlq):
        # The load's own prefix names the timelines; build the mix on the same prefix.
        load = Load(settings, size.events, size.timelines, size.rate)
        mix = hostile_mix(load.prefix, every, settings.max_event_bytes)

        def hostile(i: int) -> Hostile | None:
            item = mix(i)
            if item is not None and item.kind == "duplicate-id":
                # Re-send the good event just produced (same key and id): a producer retry.
                timeline = load.timeline_of[item.event_id or ""]
                value = _event(item.event_id or "", int(time.time() * 1000))
                return Hostile(item.kind, timeline.encode(), value, frozenset(), item.event_id)
            return item

        load._hostile = hostile
        _, load, acc = _start_under_load(settings, size, services, output, dlq, ALL, ALL, load=load)
        try:
            load.wait_acked(timeout=size.seconds * 4 + 300)
            hostiles = list(load.hostile_acked)
            expected_drops = {h.event_id for h, _ in hostiles if h.kind == "far-past"}
            acc.expected_drops = {e for e in expected_drops if e}
            # Valid hostile events (far future, random bytes that decode) must come out too.
            acc.extra = {
                h.event_id: sent
                for h, sent in hostiles
                if h.event_id and h.kind not in {"far-past", "duplicate-id"}
            }
            acc.wait_complete(size.drain)
        finally:
            load.stop()
        codes = services.stop_all()
        assert codes == [0] * len(codes), f"exit codes {codes}:\n{services.logs()[-3000:]}"
        dropped_max_age = services.counter("digest_events_dropped_total", reason="max_age")
        wrong: list[str] = []
        by_kind: dict[str, int] = {}
        for h, sent in hostiles:
            by_kind[h.kind] = by_kind.get(h.kind, 0) + 1
            letter = dlq.by_source.get((sent.partition, sent.offset))
            if h.reasons:
                if letter is None or letter.reason not in h.reasons or not letter.detail:
                    got = letter.reason if letter else "not dead-lettered"
                    wrong.append(f"{h.kind}@{sent.partition}:{sent.offset}: {got}")
            elif letter is not None:
                wrong.append(f"{h.kind}: dead-lettered as {letter.reason}, must be processed")
        dead = sum(1 for h, _ in hostiles if h.reasons)
        duplicates_by_producer = {h.event_id for h, _ in hostiles if h.kind == "duplicate-id"}
        figures = acc.figures(
            "7 hostile input",
            dropped_counted=0,
            dead_lettered=dead,
            duplicates_exclude={e for e in duplicates_by_producer if e},
            note=", ".join(f"{k}={v}" for k, v in sorted(by_kind.items())),
            deadline=recovery_deadline(settings),
        )
        report(figures)
        assert not wrong, f"hostile messages that did not end as they must: {wrong[:10]}"
        assert figures.lost == 0, f"{figures.line()}; e.g. {sorted(acc.missing())[:5]}"
        assert dropped_max_age == len(acc.expected_drops), (dropped_max_age, acc.expected_drops)
        assert not (acc.expected_drops & set(acc.output.digest_ids)), "far-past event delivered"
        assert not acc.duplicated({e for e in duplicates_by_producer if e})
        figures.check_order()
        good_letters = acc.dead_lettered_ids()
        assert not good_letters, f"good events dead-lettered: {sorted(good_letters)[:5]}"
        figures.check_recovery()
        return figures


# --------------------------------------------------------------------------- 8 kill points


@dataclass(frozen=True)
class Bursts:
    """Rounds of bursts on new timelines (the kill-point scenario)."""

    rounds: int
    timelines: int  # new timelines per burst
    per_timeline: int

    @property
    def events(self) -> int:
        """Events per burst."""
        return self.timelines * self.per_timeline


#: Where the single ingest process is killed, round after round: "commit" = as soon as the
#: group's commit covers the burst (between the commit and the broker's ack of the IMMEDIATE
#: entries), "mid-burst" = halfway through sending it, a number = that many seconds after
#: the burst was acknowledged.
KILL_POINTS: tuple[str | float, ...] = ("commit", 0.0, "mid-burst", "commit", 0.05, 0.2,
                                        "commit", 0.5, 1.0, "commit", 2.0, "commit")  # fmt: skip
BURSTS = Bursts(rounds=12, timelines=300, per_timeline=10)
BURSTS_SLICE = Bursts(rounds=3, timelines=100, per_timeline=5)


def _assigned(proc: ServiceProcess) -> bool:
    return "] assigned " in proc.log()


def ingest_sigkill_points(
    settings: Settings, bursts: Bursts, points: tuple[str | float, ...] = KILL_POINTS
) -> Figures:
    """One ingest process; each round a burst on new timelines, SIGKILL at a point, restart.

    Each round's events must all be out within the recovery deadline of that round's restart
    (the next round waits for it), so every kill point is measured on its own.
    """
    partitions = 8
    with scenario(settings) as (services, output, dlq):
        schedule = ScheduleLog(settings)
        watcher = CommitWatcher(settings, partitions)
        deadline = recovery_deadline(settings)
        services.wait_started(services.start("delivery"))
        ingest = services.start(INGEST)
        services.wait_started(ingest)
        wait_until(partial(_assigned, ingest), 60, "the ingest to own the partitions")
        acc: Accounting | None = None
        worst: list[tuple[str, float]] = []
        try:
            for r in range(bursts.rounds):
                point = points[r % len(points)]
                load = Load(settings, bursts.events, bursts.timelines, 0.0).start()
                if acc is None:
                    acc = Accounting(load, output, dlq)
                else:
                    acc.more.append(load)
                if point == "mid-burst":
                    load.wait_progress(0.5, 60)
                else:
                    load.wait_acked(60)
                    if point == "commit":
                        ends = end_offsets_of(load)
                        wait_until(partial(watcher.covers, ends), 60, "the burst's commit", 0)
                    else:
                        pace(float(point), output, dlq)
                services.kill(ingest)
                ingest = services.start(INGEST)
                acc.fault_ended()
                load.wait_acked(60)
                ids = set(load.acked_copy())

                def out(ids: set[str] = ids, a: Accounting = acc) -> bool:
                    a.output.poll(0.1)
                    return a.all_out_after(ids) is not None

                wait_until(out, deadline + 60, f"round {r} ({point}) out", 0)
                took = acc.all_out_after(ids) or 0.0
                worst.append((str(point), took))
                assert took <= deadline, f"round {r}, kill at {point}: out after {took:.1f}s"
                wait_until(partial(_assigned, ingest), 60, "the restarted ingest to be assigned")
            assert acc is not None
            schedule.poll(1.0)
            # Timelines of the bursts never announced IMMEDIATE: their announcement was lost
            # with the kill (the window of item 1); only the take-over announced them.
            bursts_timelines = {acc.timeline_of(rid) for rid in acc.tracked()}
            stranded = sum(
                1
                for t in bursts_timelines
                if "IMMEDIATE" not in schedule.reasons.get(t, [])
                and "RECOVERED" in schedule.reasons.get(t, [])
            )
            per_point = ", ".join(f"{p}:{t:.1f}s" for p, t in worst)
            figures = _finish(
                "8 ingest SIGKILL at many points",
                acc,
                Size(bursts.events * bursts.rounds, bursts.timelines, 1000.0, drain=60.0),
                note=f"{bursts.rounds} kills; {stranded} timelines announced only by the "
                f"take-over; out after, per kill point: {per_point}",
            )
            figures.all_out_after = max(t for _, t in worst)
        finally:
            schedule.close()
            watcher.close()
        _all_alive(services)
        return figures


# --------------------------------------------------------------------------- 9 short TTL


def short_ttl_settings(maximum_delay: float = 2.0, ttl: float = 60.0) -> dict[str, float]:
    """A short `ttl` the service accepts: maintenance re-announces (and refreshes the TTL of)
    a stranded READY timeline just in time, `ttl` > maximum_delay + timeout + interval."""
    interval = 1.0
    return {
        "ttl": ttl,
        "maintenance_interval": interval,
        "maintenance_timeout": ttl - maximum_delay - interval - 1.0,
    }


def delivery_down_past_ttl(settings: Settings, size: Size, down: float) -> Figures:
    """Only ingest,scheduler run for `down` s (> 2 x ttl); then delivery starts: nothing
    expired, nothing dropped, everything out within the deadline."""
    assert down > 2 * settings.policy().ttl, "the outage must outlast the ttl twice"
    with scenario(settings) as (services, output, dlq):
        _, load, acc = _start_under_load(settings, size, services, output, dlq, INGEST)
        started = time.monotonic()
        try:
            load.wait_acked(timeout=size.seconds * 4 + 120)
            pace(down - (time.monotonic() - started), output, dlq)
            assert not output.messages, "a digest came out with no delivery running"
            services.start("delivery")
            acc.fault_ended()
            figures = _finish(
                "9 delivery down past a short ttl",
                acc,
                size,
                note=f"ttl {settings.policy().ttl:.0f}s, maintenance_timeout "
                f"{settings.maintenance_timeout:.0f}s, delivery down {down:.0f}s",
            )
        finally:
            load.stop()
        codes = services.stop_all()
        assert codes == [0] * len(codes), f"exit codes {codes}"
        assert figures.dropped == 0, figures.line()
        expired = services.counter("digest_timelines_expired_total")
        assert expired == 0, f"{expired:.0f} timelines expired: {figures.line()}"
        return figures


# --------------------------------------------------------------------------- 10 ACL user


def acl_user(admins: list[redis.Redis], url: str, namespace: str, cluster: bool) -> tuple[str, str]:
    """Create the README's ACL user (single or cluster line) for this namespace on every
    node in `admins` (ACL users are per node); (its URL on `url`'s host, its name)."""
    readme = (REPO_ROOT / "README.md").read_text("utf-8")
    lines = re.findall(r"^\s*ACL SETUSER digest-stream (.+)$", readme, re.MULTILINE)
    assert len(lines) == 2, "README: two ACL SETUSER lines (single Redis, cluster)"
    name, password = unique("chaos-acl"), uuid.uuid4().hex
    rules = [
        r.replace("~{d:*", f"~{{{namespace}:*").replace(">CHANGE-ME", f">{password}")
        for r in lines[1 if cluster else 0].split()
    ]
    for admin in admins:
        admin.execute_command("ACL", "SETUSER", name, *rules)
    parts = urlsplit(url)
    netloc = f"{name}:{password}@{parts.hostname}:{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc)), name


def acl_capacity(settings: Settings, size: Size, admin_settings: Settings | None) -> Figures:
    """The service as the README's restricted user (library preloaded by an admin, as the
    README recommends) with capacity trimming under load, one SIGKILL + restart (replay
    behind the fence): every undelivered event is a counted capacity drop."""
    where = "cluster" if settings.redis_cluster else "single Redis"
    if admin_settings is not None:
        # The admin loads the library (any command does, run with an admin URL): on the single
        # Redis and on every primary of the cluster (the same version: idempotent there).
        preload = subprocess.run(
            [sys.executable, "-m", "digest_stream.cli", "stats"],
            env={**os.environ, **settings_env(admin_settings)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert preload.returncode == 0, preload.stderr
    with scenario(settings) as (services, output, dlq):
        (first, _), load, acc = _start_under_load(settings, size, services, output, dlq, ALL, ALL)
        acc.capacity_drops = True
        try:
            load.wait_progress(0.5)
            services.kill(first)
            services.start(ALL)
            acc.fault_ended()
            figures = _finish(
                f"10 restricted ACL user, capacity {settings.policy().capacity}, {where}",
                acc,
                size,
                note="README ACL line, library preloaded; one SIGKILL + restart at 50%",
            )
        finally:
            load.stop()
        assert figures.dropped > 0, f"capacity trimming never ran: {figures.line()}"
        assert figures.sent == figures.delivered + figures.dropped, figures.line()
        assert "NOPERM" not in services.logs(), services.logs()[-3000:]
        codes = services.stop_all()
        assert codes == [0] * len(codes), f"exit codes {codes}"
        assert services.counter("digest_events_dropped_total", reason="capacity") > 0
        return figures


# --------------------------------------------------------------------------- 11 Redis refusing


def redis_refusing(
    settings: Settings, size: Size, redis_server: OwnRedis, kind: str, seconds: float = 15.0
) -> Figures:
    """Redis refuses calls for `seconds` (OOM, READONLY or BUSY, see OwnRedis.refusing):
    both processes pause and retry, none exits, nothing is lost; the catch-up is measured."""
    with scenario(settings) as (services, output, dlq):
        _, load, acc = _start_under_load(settings, size, services, output, dlq, ALL, ALL)
        try:
            load.wait_progress(0.3)
            with redis_server.refusing(kind, seconds):
                pace(seconds, output, dlq)
                _all_alive(services)
            acc.fault_ended()
            figures = _finish(
                f"11 Redis {kind}", acc, size, note=f"{seconds:.0f}s of {kind} replies"
            )
        finally:
            load.stop()
        _all_alive(services)
        logs = services.logs()
        # the cause and what ends it, not just Redis's reply (ops/failures: outage_line)
        cause = REFUSING_CAUSE[kind]
        assert cause in logs, f"the {kind} replies were never named ({cause!r}):\n{logs[-3000:]}"
        codes = services.stop_all()
        assert codes == [0] * len(codes), f"exit codes {codes}:\n{logs[-3000:]}"
        return figures


# --------------------------------------------------------------------------- 12 oversize


#: Output limits of the oversize scenario: 64 KiB messages, events as large as the settings
#: allow (max_event_bytes leaves the 16 KiB the settings require).
OVERSIZE_MESSAGE = 65_536
OVERSIZE_EVENT = OVERSIZE_MESSAGE - 16_384
#: The output topic's max.message.bytes as an operator would set it: the service's limit.
OVERSIZE_TOPIC = {"output_topic": {"max.message.bytes": str(OVERSIZE_MESSAGE)}}


def oversize_settings() -> dict[str, object]:
    """Settings of the oversize scenario (carried headers, 64 KiB messages)."""
    return {
        "max_message_bytes": OVERSIZE_MESSAGE,
        "max_event_bytes": OVERSIZE_EVENT,
        "carry_headers": ["traceparent", "baggage"],
    }


def oversize_output(
    settings: Settings, size: Size, baggage: bool, topic_limit: bool = False
) -> Figures:
    """Events near max_event_bytes with carried headers: a traceparent each, and with
    `baggage` a distinct 4,000-byte `baggage` header too (`topic_limit`: the output topic's
    max.message.bytes is max_message_bytes, only named in the line). Every message fits
    max_message_bytes and carries the traceparent, nothing is lost, delivery never exits."""
    payload = b"x" * (settings.max_event_bytes - 200)
    traceparent = ("traceparent", b"00-" + b"a" * 51)
    with scenario(settings) as (services, output, dlq):
        services.wait_started(services.start(ALL))
        load = _CarriedHeaders(settings, size, payload, traceparent, baggage).start()
        acc = Accounting(load, output, dlq)
        try:
            acc.wait_complete(size.drain)
            figures = _finish(
                f"12a oversize output ({'traceparent + baggage' if baggage else 'traceparent'}"
                f"{', output topic max.message.bytes = max_message_bytes' if topic_limit else ''})",
                acc,
                size,
                note=f"events of {len(payload)} B payload, max_message_bytes "
                f"{settings.max_message_bytes}; largest message seen {output.largest} B",
            )
        finally:
            load.stop()
        assert output.largest <= settings.max_message_bytes, output.largest
        assert output.carried.get("traceparent", 0) > 0, "carried headers never came out"
        # Every event carries the one traceparent, and it always fits: every message has it,
        # however heavy the baggage beside it (not only the first digests of one record).
        missing = output.messages - output.carried.get("traceparent", 0)
        assert missing == 0, f"{missing} of {output.messages} messages without the traceparent"
        _all_alive(services)
        return figures


class _CarriedHeaders(Load):
    """A load whose events carry a traceparent, and optionally a distinct 4,000-byte
    `baggage` header each (a digest of a few records then carries several of them)."""

    def __init__(
        self,
        settings: Settings,
        size: Size,
        payload: bytes,
        traceparent: tuple[str, bytes],
        baggage: bool,
    ) -> None:
        shape = Shape(payload=payload, headers=(traceparent,))
        super().__init__(settings, size.events, size.timelines, size.rate, shape=shape)
        self._baggage = baggage

    def headers_for(self, i: int) -> list[tuple[str, str | bytes | None]]:
        """The traceparent, plus a distinct baggage value when asked."""
        headers = super().headers_for(i)
        if self._baggage:
            headers.append(("baggage", f"{i:08d}".encode().ljust(4000, b"b")))
        return headers


DLQ_LIMIT = 4_096


def oversize_dead_letters(settings: Settings, size: Size, every: int = 25) -> Figures:
    """Undecodable messages of sizes around the DLQ topic's small max.message.bytes: each is
    dead-lettered, with its value when it fits, with coordinates and `dlq.value-dropped`
    when it cannot; the partition never sticks, good events all come out."""
    sizes = list(range(DLQ_LIMIT - 600, DLQ_LIMIT + 200, 50))
    with scenario(settings) as (services, output, dlq):
        load = Load(settings, size.events, size.timelines, size.rate)

        def hostile(i: int) -> Hostile | None:
            if i % every != every - 1:
                return None
            n = i // every
            whole = _event(f"{load.prefix}-bad{n}", int(time.time() * 1000), b"y" * 10_000)
            value = whole[: sizes[n % len(sizes)]]
            return Hostile("truncated", f"c:{load.prefix}:0".encode(), value,
                           frozenset({"truncated"}))  # fmt: skip

        load._hostile = hostile
        _, load, acc = _start_under_load(settings, size, services, output, dlq, ALL, load=load)
        try:
            load.wait_acked(timeout=size.seconds * 4 + 120)
            hostiles = list(load.hostile_acked)

            def lettered() -> bool:
                dlq.poll(0.2)
                return all((s.partition, s.offset) in dlq.by_source for _, s in hostiles)

            wait_until(lettered, recovery_deadline(settings) + 60, "every dead letter")
            figures = _finish(
                "12b oversize dead letters",
                acc,
                size,
                dead_lettered=len(hostiles),
                note=f"DLQ max.message.bytes {DLQ_LIMIT}; {len(hostiles)} undecodable of "
                f"{sizes[0]}-{sizes[-1]} B; "
                f"{sum(1 for x in dlq.letters if x.value_dropped)} sent without their value",
            )
        finally:
            load.stop()
        for _, sent in hostiles:
            letter = dlq.by_source[(sent.partition, sent.offset)]
            assert letter.reason == "truncated", letter
            assert letter.size <= DLQ_LIMIT, letter
        assert any(x.value_dropped for x in dlq.letters), "no letter was too large for the DLQ"
        assert any(not x.value_dropped for x in dlq.letters), "every letter lost its value"
        _all_alive(services)
        return figures


# --------------------------------------------------------------------------- 13 READY backlog

#: The backlog scenario: maintenance re-announces READY timelines after 30 s (every 5 s), so
#: during the outage it re-announces the whole backlog, in slices, as in issue 12 item 7.
BACKLOG_SETTINGS: dict[str, object] = {"maintenance_timeout": 30.0, "maintenance_interval": 5.0}
BACKLOG_TIMELINES = int(os.environ.get("DIGEST_STREAM_CHAOS_BACKLOG", "150000"))
BACKLOG_DOWN = 60.0
#: Digests per second the delivery must sustain through the backlog (one process, 2 cores).
BACKLOG_FLOOR_RATE = 1000.0


def backlog_deadline(settings: Settings, timelines: int) -> float:
    """The catch-up bound: the recovery deadline plus the backlog at the floor rate."""
    return recovery_deadline(settings) + timelines / BACKLOG_FLOOR_RATE


def ready_backlog(settings: Settings, timelines: int, down: float, deadline: float) -> Figures:
    """`timelines` first events on distinct timelines while only ingest,scheduler run (every
    one READY, maintenance re-announcing them), then delivery starts: no crash, and every
    event out within `deadline` s of delivery starting."""
    size = Size(events=timelines, timelines=timelines, rate=0.0, drain=deadline + 60)
    with scenario(settings) as (services, output, dlq):
        _, load, acc = _start_under_load(settings, size, services, output, dlq, INGEST)
        started = time.monotonic()
        try:
            load.wait_acked(timeout=600)
            loaded = time.monotonic() - started
            pace(max(0.0, down - loaded), output, dlq)
            _all_alive(services)
            services.start("delivery")
            acc.fault_ended()
            acc.wait_complete(size.drain)
        finally:
            load.stop()
        _all_alive(services)
        codes = services.stop_all()
        assert codes == [0] * len(codes), f"exit codes {codes}"
        recovered = services.counter("digest_schedule_entries_total", reason="RECOVERED")
        waits = services.counter("digest_producer_queue_full_total")
        return _finish(
            f"13 {timelines} timelines READY at once",
            acc,
            size,
            deadline=deadline,
            note=f"sent in {loaded:.0f}s, delivery down {max(down, loaded):.0f}s; "
            f"{recovered:.0f} re-announcements by maintenance; producer waited for room "
            f"{waits:.0f} times",
        )


# --------------------------------------------------------------------------- 14 long ids


def long_id_timeline(
    settings: Settings, records: int, redis_server: OwnRedis, stall: float = 2.5
) -> Figures:
    """One timeline of `records` events with 1,000-byte ids sharing a prefix and one event
    time, opened as one digest (delivery starts after they are applied): no Redis call
    longer than `stall` s (SLOWLOG; half the 5 s after which Redis answers BUSY to everyone
    else, and the issue measured 35 s), nothing lost."""
    shape = Shape(timestamp_ms=int(time.time() * 1000), id_pad=1000)
    size = Size(events=records, timelines=1, rate=0.0, drain=180.0)
    with scenario(settings) as (services, output, dlq):
        load = Load(settings, records, 1, 0.0, shape=shape)
        _, load, acc = _start_under_load(settings, size, services, output, dlq, INGEST, load=load)
        try:
            load.wait_acked(timeout=300)
            ends = end_offsets_of(load)
            watcher = CommitWatcher(settings, 8)
            try:
                wait_until(lambda: watcher.covers(ends), 120, "the timeline applied", 0.2)
            finally:
                watcher.close()
            services.start("delivery")
            acc.fault_ended()
            acc.wait_complete(size.drain)
            slowest, command = redis_server.slowest_call()
            figures = _finish(
                f"14 one timeline of {records} records, 1,000-byte ids",
                acc,
                size,
                note=f"slowest Redis call {slowest:.3f}s ({command}); "
                f"{len(output.copies)} digest(s) in {output.messages} messages",
            )
        finally:
            load.stop()
        assert slowest < stall, f"a Redis call ran {slowest:.2f}s ({command})"
        _all_alive(services)
        return figures


# --------------------------------------------------------------------------- 15 topic recreated


def topic_recreated(settings: Settings, first: int = 20, then: int = 5) -> Figures:
    """`first` events processed; the events topic deleted and recreated with
    `digest-stream topics create`; `then` new events must come out too (issue 12 item 3)."""
    size = Size(events=first, timelines=first, rate=0.0, drain=60.0)
    with scenario(settings) as (services, output, dlq):
        _, _, acc = _start_under_load(settings, size, services, output, dlq, ALL)
        acc.wait_complete(60)
        assert not acc.missing(), "the first events did not come out"
        delete_topics(settings.kafka_bootstrap_servers, [settings.events_topic])
        admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap_servers})
        wait_until(
            lambda: settings.events_topic not in admin.list_topics(timeout=5).topics,
            60,
            "the events topic to be gone",
        )
        created = subprocess.run(
            [sys.executable, "-m", "digest_stream.cli", "topics", "create", "--partitions", "8"],
            env={**os.environ, **settings_env(settings)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert created.returncode == 0, created.stderr
        assert f"created {settings.events_topic}" in created.stdout, created.stdout
        acc.fault_ended()
        later = Load(settings, then, then, 0.0).start()
        acc.more.append(later)
        figures = _finish(
            "15 events topic recreated", acc, size, note=f"{first} events, recreate, {then} more"
        )
        _all_alive(services)
        return figures


# --------------------------------------------------------------------------- 16 topic grown


def events_topic_grown(settings: Settings, size: Size, grow_to: int, at: float = 0.4) -> Figures:
    """Two instances under load; at `at` of it the events topic grows to `grow_to` partitions
    with AdminClient.create_partitions while the timelines cool down (issue 20 item 7).

    The load produces like the project's producers (murmur2) and refreshes its metadata every
    second, so its keys move onto the new partitions at once, seconds before the service
    notices them: those first events must be read from the partitions' beginning.
    """
    topic = settings.events_topic
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap_servers})
    before = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    load = Load(
        settings,
        size.events,
        size.timelines,
        size.rate,
        producer_config={
            "partitioner": "murmur2_random",
            "topic.metadata.refresh.interval.ms": 1000,
        },
    )
    with scenario(settings) as (services, output, dlq):
        _, load, acc = _start_under_load(settings, size, services, output, dlq, ALL, ALL, load=load)
        try:
            load.wait_progress(at)
            admin.create_partitions([NewPartitions(topic, grow_to)])[topic].result(timeout=30)
            acc.fault_ended()
            load.wait_acked(timeout=size.seconds * 4 + 300)
            landed = {sent.partition for sent in load.acked_copy().values()}
            assert landed & set(range(before, grow_to)), "the load never reached a new partition"
            acc.wait_complete(size.drain)
            assert services.stop_all() == [0, 0]
            moved = int(services.counter("digest_timelines_moved_total"))
            figures = _finish(
                "16 events topic grown",
                acc,
                size,
                note=f"{before} -> {grow_to} partitions at {at:.0%} of the load; {moved} "
                "timelines counted as moved (split)",
            )
        finally:
            load.stop()
        assert moved > 0, "no moved timeline counted"
        return figures


# --------------------------------------------------------------------------- 17 output refused

#: Issue 26: many timelines, each with an event every second (so several digests each, for
#: the order check) and a flush after every 10th event, while the output refuses writes.
REFUSED = Size(events=12_000, timelines=300, rate=300.0, drain=180.0)
#: The make-test slice of it.
REFUSED_SLICE = Size(events=400, timelines=20, rate=40.0, drain=60.0)
#: The output topic on both brokers (broker 1 leads), refusing acks=all writes unless both are
#: in sync; everything else on broker 1 alone, untouched by the fault.
REFUSED_PLACEMENT = {
    "events_topic": [1],
    "schedule_topic": [1],
    "dlq_topic": [1],
    "output_topic": [1, 2],
}
REFUSED_TOPICS = {"output_topic": {"min.insync.replicas": "2"}}


def refused_output_settings(message_timeout: float) -> dict[str, Any]:
    """The services' settings of the scenario: librdkafka gives up on a message after
    `message_timeout` s; short cool-downs, so cool-downs end while the output refuses writes;
    enough publish attempts that delivery retries through the fault instead of dead-lettering
    (attempts last `message_timeout` each)."""
    kafka_config = dict(CHAOS_KAFKA_CONFIG)
    kafka_config["message.timeout.ms"] = str(int(message_timeout * 1000))
    return {
        "direct_leading_edge": True,
        "minimum_delay": 3.0,
        "increment_delay": 0.5,
        "maximum_delay": 5.0,
        "max_attempts": 20,
        "kafka_config": kafka_config,
        "placement": REFUSED_PLACEMENT,
        "topic_config": REFUSED_TOPICS,
    }


@contextmanager
def output_refusing(
    pair: BrokerPair, topic: str, output: Output, dlq: DeadLetterLog
) -> Iterator[float]:
    """The output topic refuses writes from the `with` until its end: its follower (broker 2)
    stopped with SIGSTOP and out of the ISR, so broker 1 answers NOT_ENOUGH_REPLICAS; yields
    the monotonic time writes began to be refused. At the end SIGCONT, until broker 2 is back
    in the ISR (writes taken again)."""
    pair.second.pause()
    try:
        # Every partition's: while one still counts broker 2 in sync, an acks=all write there
        # waits (the whole produce request with it, other topics' partitions included).
        wait_until(
            lambda: all(isr == {1} for isr in pair.in_sync(topic)),
            60,
            "every output partition's ISR down to broker 1",
        )
        yield time.monotonic()
    finally:
        pair.second.resume()
    wait_until(
        lambda: all(isr == {1, 2} for isr in pair.in_sync(topic)),
        60,
        "broker 2 back in every output partition's ISR",
    )
    output.poll(0)
    dlq.poll(0)


def output_refused(
    settings: Settings,
    size: Size,
    pair: BrokerPair,
    message_timeout: float,
    every: int = 10,
    *,
    under_load: bool = True,
) -> Figures:
    """The output topic refuses writes (NOT_ENOUGH_REPLICAS, `output_refusing`) for about
    twice librdkafka's message.timeout.ms, twice.

    1. The issue's reproduction, the services otherwise idle (a delivery busy retrying other
       digests would open nothing meanwhile): a new timeline X gets e1, whose leading digest
       is refused, then e2 and a flush of X (EventProducer.flush). X's digests must come out
       e1's first, then e2's, e1 under one id.
    2. The same fault while a load over many timelines goes on, a flush after every `every`th
       event, cool-downs ending meanwhile (`under_load`; the slice skips it and only runs the
       load). Lost 0, order kept, one id per record, as in every scenario.
    """
    topic = settings.output_topic
    with scenario(settings) as (services, output, dlq):
        for proc in [services.start(ALL), services.start(ALL)]:
            services.wait_started(proc)
        load = Load(settings, size.events, size.timelines, size.rate)
        load._hostile = controls_every(load, every)
        acc = Accounting(load, output, dlq)
        timeline = f"x:{load.prefix}"
        # X's flush goes where its events go (send_one places them with the same partitioner).
        sender = EventProducer(
            settings.kafka_bootstrap_servers,
            settings.events_topic,
            partitioner=settings.partitioner,
        )
        e1, e2 = f"{load.prefix}-x1", f"{load.prefix}-x2"
        refused: list[float] = []

        def out(ids: set[str], what: str) -> None:
            def seen() -> bool:
                output.poll()
                return ids <= set(output.first_digest)

            wait_until(seen, 60, what)

        try:
            # Warm up: both paths publish once (a leading digest, then delivery's), so every
            # client has the topics' metadata: a first produce to a topic waits for it, and a
            # metadata request may go to the stopped broker and hang past message.timeout.ms.
            warm = f"w:{load.prefix}"
            w1, w2 = f"{load.prefix}-w1", f"{load.prefix}-w2"
            acc.extra[w1] = send_one(load, warm, w1)
            acc.extra[w2] = send_one(load, warm, w2)
            sender.flush_timeline(warm)
            out({w1, w2}, f"{warm}'s two events out")
            with output_refusing(pair, topic, output, dlq) as since:
                acc.extra[e1] = send_one(load, timeline, e1)
                # e2 while e1's leading digest is in flight and X cools down (an e2 after the
                # cool-down would find X quiet and get a leading digest of its own)
                pace(settings.policy().minimum_delay / 3, output, dlq)
                acc.extra[e2] = send_one(load, timeline, e2)
                sender.flush_timeline(timeline)
                pace(since + 2 * message_timeout - time.monotonic(), output, dlq)
                refused.append(time.monotonic() - since)
            acc.fault_ended()
            out({e1, e2}, f"{timeline}'s two events out")
            # X: the leading digest {e1} was refused, then e2 and the flush waited behind it.
            first, rank = output.first_digest, output.rank
            ids = sorted({d for r in (e1, e2) for d in output.digest_ids[r]}, key=lambda d: rank[d])
            where = (
                f"{timeline}'s digests in output order {ids}, e1 in {first[e1]}, e2 in {first[e2]}"
            )
            assert rank[first[e1]] < rank[first[e2]], f"e2 out before e1: {where}"
            assert len(output.digest_ids[e1]) == 1, f"e1 under two ids: {where}"
            load.start()
            if under_load:
                load.wait_progress(0.3)
                with output_refusing(pair, topic, output, dlq) as since:
                    pace(since + 2 * message_timeout - time.monotonic(), output, dlq)
                    refused.append(time.monotonic() - since)
                acc.fault_ended()
            figures = _finish(
                "17 output refused past message.timeout.ms",
                acc,
                size,
                note=f"output refused {' s, '.join(f'{r:.0f}' for r in refused)} s "
                f"(NOT_ENOUGH_REPLICAS, follower stopped; message.timeout.ms "
                f"{message_timeout * 1000:.0f}): a new timeline's e1, e2 and flush, then "
                f"{'the same under ' if under_load else ''}a load with a flush every "
                f"{every}th event",
            )
        finally:
            sender.close()
            load.stop()
        assert len(output.digest_ids[e1]) == 1, f"e1 under two ids: {output.digest_ids[e1]}"
        logs = services.logs()
        assert f"of {timeline}: publish failed" in logs, "X's leading digest was not refused"
        _all_alive(services)
        return figures


def send_one(load: Load, timeline: str, record_id: str) -> Sent:
    """Send one event to the load's events topic on its own (placed by the service's
    partitioner), wait for the broker's acknowledgement; the load's accounting then knows the
    id's timeline."""
    settings = load.settings
    producer = Producer(
        {
            "bootstrap.servers": settings.kafka_bootstrap_servers,
            "acks": "all",
            "partitioner": settings.partitioner,
        }
    )
    acked: list[Message] = []
    value = codec.encode_event(
        Event(id=record_id, timestamp=int(time.time() * 1000), payload=b"{}")
    )

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        assert error is None, f"{record_id}: {error}"
        acked.append(message)

    producer.produce(
        settings.events_topic, key=timeline.encode(), value=value, on_delivery=on_delivery
    )
    assert producer.flush(30) == 0, f"{record_id} not acknowledged"
    load.timeline_of[record_id] = timeline
    message = acked[0]
    return Sent(message.partition() or 0, message.offset() or 0, time.time())
