"""The fault scenarios of issue 7, parametrized by size (the full runs and the make-test slice).

Each one runs the real CLI as separate processes, sends a known load, injects its fault on a
schedule, waits until every event id is accounted for, prints one line of figures and asserts
lost == 0 (and, where the contract promises it, duplicated == 0).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from digest_stream.settings import Settings
from digest_stream.wire import codec
from digest_stream.wire.models import Event
from tests.chaos.harness import (
    Accounting,
    DeadLetterLog,
    Figures,
    Hostile,
    Load,
    Output,
    OwnKafka,
    OwnRedis,
    Services,
    report,
    scenario,
)
from tests.support import wait_until
from tests.support.crash_hooks import pause_before_close_env
from tests.support.kafka import committed_offsets
from tests.support.pipeline import ServiceProcess
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
        """Duration of the load."""
        return self.events / self.rate


INGEST = "ingest,scheduler"
ALL = "ingest,scheduler,delivery"

FULL = Size(events=50_000, timelines=300, rate=1000.0, drain=300.0)
SLICE = Size(events=4_000, timelines=100, rate=400.0, drain=90.0)


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
) -> Figures:
    acc.load.wait_acked(timeout=size.seconds * 4 + 300)
    acc.wait_complete(size.drain)
    figures = acc.figures(name, note=note)
    report(figures)
    missing = sorted(acc.missing())
    assert figures.lost == 0, f"{figures.line()}; e.g. {missing[:5]}"
    if not allow_duplicates:
        dup = acc.duplicated()
        assert not dup, f"{figures.line()}; records under two digest ids: {list(dup.items())[:3]}"
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
            services.wait_started(services.start("delivery"))
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
            figures = _finish("3 rolling restart x3", acc, size, note=f"{restarts} restarts")
        finally:
            load.stop()
        _all_alive(services)
        return figures


# --------------------------------------------------------------------------- 4 Redis rollback


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
            acc.load.wait_acked(timeout=size.seconds * 4 + 300)
            acc.wait_complete(size.drain)
            dup = acc.duplicated()
            figures = acc.figures(
                "4a Redis rolled back to a snapshot",
                note=f"snapshot, {run_on:.0f}s on, SHUTDOWN NOSAVE, restart; "
                f"{len(dup)} re-published under a new id (their close was rolled back)",
            )
            report(figures)
            assert figures.lost == 0, f"{figures.line()}; e.g. {sorted(acc.missing())[:5]}"
        finally:
            load.stop()
        logs = services.logs()
        assert "Redis lost writes" in logs, "the ingest did not notice the fence going back"
        # Explained duplicates: records first delivered after the snapshot, sent before Redis
        # came back. Their close (or their add, replayed) was lost with the rollback.
        unexplained = {
            rid
            for rid in dup
            if acc.output.first_opened[rid] < snapshot_at - 5.0 or load.acked[rid].at > up_at
        }
        assert not unexplained, f"duplicates the rollback does not explain: {list(unexplained)[:5]}"
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
            )
            if mode == "continue":
                # Only what Redis held at the wipe may be lost (forfeited by the setting);
                # anything else missing is a real loss.
                missing = acc.missing()
                figures.forfeited = len(missing & before)
                figures.lost = len(missing - before)
            report(figures)
        finally:
            load.stop()
        logs = services.logs()
        assert f"on_state_loss={mode}" in logs, "state loss was not reported loudly"
        missing = acc.missing()
        if mode == "replay":
            assert figures.lost == 0, f"{figures.line()}; e.g. {sorted(missing)[:5]}"
            assert set(dup) <= before, "duplicates of records sent after the wipe"
        else:
            # Only what Redis held at the wipe may be lost; everything sent after is delivered.
            assert figures.lost == 0, f"lost records sent after the wipe: {sorted(missing)[:5]}"
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
        )
        report(figures)
        assert not wrong, f"hostile messages that did not end as they must: {wrong[:10]}"
        assert figures.lost == 0, f"{figures.line()}; e.g. {sorted(acc.missing())[:5]}"
        assert dropped_max_age == len(acc.expected_drops), (dropped_max_age, acc.expected_drops)
        assert not (acc.expected_drops & set(acc.output.digest_ids)), "far-past event delivered"
        assert not acc.duplicated({e for e in duplicates_by_producer if e})
        good_letters = acc.dead_lettered_ids()
        assert not good_letters, f"good events dead-lettered: {sorted(good_letters)[:5]}"
        return figures
