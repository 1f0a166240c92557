"""Urgent events end to end through Kafka (issue 39, item 3): an event its timeline's
``urgent_when`` calls urgent goes out at once with what is pending, reason URGENT, through the
cool-down, which starts again from it; a burst is one URGENT digest per floor, the rest later;
on a single Redis and on the Redis Cluster."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from click.testing import CliRunner

from digest_stream.cli import main
from digest_stream.store.limits import FLUSH_AT_FLOOR
from digest_stream.wire.models import Digest, DigestReason
from tests.support import wait_until
from tests.support.kafka import Collector
from tests.support.pipeline import PipelineFactory, cli_flags

T = 1_700_000_000_000  # event times (ms), increasing per record
#: A long cool-down, so that an urgent digest inside it cannot be the cool-down's end.
POLICY: dict[str, Any] = {
    "minimum_delay": 30.0,
    "increment_delay": 1.0,
    "maximum_delay": 60.0,
    "urgent_when": "severity=critical,fatal",
}
CRITICAL = {"severity": "critical"}


@pytest.fixture(params=["redis", pytest.param("cluster", marks=pytest.mark.cluster)])
def store_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The pipeline's store: the single Redis, or the Redis Cluster."""
    if request.param == "redis":
        return {}
    nodes: list[str] = request.getfixturevalue("redis_cluster_nodes")
    return {"redis_url": f"redis://{nodes[0]}/0", "redis_cluster": True}


def _mine(out: Collector, timeline: str) -> list[Digest]:
    return [d for d in out.digests if d.timeline == timeline]


def test_an_urgent_event_in_the_cool_down_goes_out_at_once_with_what_is_pending(
    pipeline_factory: PipelineFactory, store_settings: dict[str, Any]
) -> None:
    pipe = pipeline_factory(partitions=1, **POLICY, **store_settings)
    app = pipe.app()
    assert app.store is not None
    store = app.store
    out = pipe.output()
    with pipe.producer() as producer:
        producer.send("u", "first", b"{}", timestamp_ms=T)
        producer.flush()
        out.wait_for(lambda: len(_mine(out, "u")) == 1, 30, "the first digest")
        (first,) = _mine(out, "u")
        assert first.reason == DigestReason.IMMEDIATE
        # With urgent_when set, the earliest next digest is the floor, not the cool-down.
        assert first.next_delivery_at is not None
        assert abs(first.next_delivery_at - first.opened_at - FLUSH_AT_FLOOR * 1000) <= 3000
        producer.send("u", "a", b"{}", timestamp_ms=T + 1, attributes={"severity": "info"})
        producer.send("u", "b", b"{}", timestamp_ms=T + 2)
        producer.flush()
        wait_until(lambda: store.inspect(0, "u").pending == 2, 20, "two records pending")
        assert store.inspect(0, "u").reason == "COOLDOWN"
        sent = time.time()
        producer.send("u", "alarm", b"{}", timestamp_ms=T + 3, attributes={"severity": "fatal"})
        producer.flush()
        out.wait_for(lambda: len(_mine(out, "u")) == 2, 20, "the urgent digest")
        assert time.time() - sent < 20  # well inside the 30 s cool-down
        urgent = _mine(out, "u")[1]
        assert [r.id for r in urgent.records] == ["alarm", "b", "a"]
        assert (urgent.reason, urgent.total) == (DigestReason.URGENT, 3)
        assert urgent.records[0].attributes == {"severity": "fatal"}
        # The cool-down starts again from the urgent digest: an ordinary event waits for it.
        producer.send("u", "later", b"{}", timestamp_ms=T + 4)
        producer.flush()
    wait_until(lambda: store.inspect(0, "u").pending == 1, 20, "the later record pending")
    info = store.inspect(0, "u")
    assert info.reason == "COOLDOWN"
    assert info.last_delivery is not None
    assert info.due is not None
    assert info.due >= info.last_delivery + 30
    assert info.last_delivery >= urgent.opened_at / 1000
    out.close()


def test_a_burst_of_urgent_events_is_one_digest_per_floor(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=1, **POLICY)
    pipe.app()
    out = pipe.output()
    with pipe.producer() as producer:
        producer.send("b", "first", b"{}", timestamp_ms=T)
        producer.flush()
        out.wait_for(lambda: len(_mine(out, "b")) == 1, 30, "the first digest")
        producer.send("b", "u0", b"{}", timestamp_ms=T + 1, attributes=CRITICAL)
        producer.flush()
        out.wait_for(lambda: len(_mine(out, "b")) == 2, 20, "the first urgent digest")
        # At once after it, a burst: it waits for the floor after that digest.
        burst = [f"u{i}" for i in range(1, 11)]
        for i, record_id in enumerate(burst):
            producer.send("b", record_id, b"{}", timestamp_ms=T + 2 + i, attributes=CRITICAL)
        producer.flush()
    out.wait_for(lambda: set(burst) <= out.record_ids(), 30, "the burst delivered")
    digests = _mine(out, "b")
    assert [r.id for r in digests[1].records] == ["u0"]
    rest = digests[2:]
    # Not a digest per event: the burst is one digest, or two when the ingest read it in two
    # batches around a digest's close; each waits for the floor after the one before.
    assert 1 <= len(rest) <= 2, [[r.id for r in d.records] for d in rest]
    assert {d.reason for d in digests[1:]} == {DigestReason.URGENT}
    assert sorted(r.id for d in rest for r in d.records) == sorted(burst)
    for before, after in zip(digests[1:], rest, strict=False):
        assert after.opened_at - before.opened_at >= FLUSH_AT_FLOOR * 1000
    out.close()


def test_the_service_takes_urgent_when_per_prefix_from_its_environment(
    pipeline_factory: PipelineFactory,
) -> None:
    # Black-box: the real `digest-stream run`, urgent_when in DIGEST_STREAM_OVERRIDES for one
    # prefix only; `digest-stream inspect` says which policy is in force and why it is due.
    overrides = {"ops:*": {"urgent_when": "severity=critical"}}
    pipe = pipeline_factory(
        partitions=1, minimum_delay=30.0, increment_delay=1.0, maximum_delay=60.0,
        overrides=overrides,
    )  # fmt: skip
    service = pipe.process()
    out = pipe.output()
    runner = CliRunner()
    flags = [*cli_flags(pipe.settings), "--minimum-delay", "30", "--increment-delay", "1",
             "--maximum-delay", "60", "--overrides", json.dumps(overrides)]  # fmt: skip

    def inspected(timeline: str) -> str:
        result = runner.invoke(main, ["inspect", timeline, *flags])
        assert result.exit_code == 0, result.output
        return result.output

    with pipe.producer() as producer:
        for timeline in ("ops:1", "mail:1"):
            producer.send(timeline, "first", b"{}", timestamp_ms=T)
        producer.flush()
        out.wait_for(lambda: len(out.digests) == 2, 60, "both first digests")
        for timeline in ("ops:1", "mail:1"):
            producer.send(timeline, "alarm", b"{}", timestamp_ms=T + 1, attributes=CRITICAL)
        producer.flush()
    out.wait_for(lambda: len(_mine(out, "ops:1")) == 2, 30, "the urgent digest of ops:1")
    assert service.popen.poll() is None, service.log()
    urgent = _mine(out, "ops:1")[1]
    assert ([r.id for r in urgent.records], urgent.reason) == (["alarm"], DigestReason.URGENT)
    # mail:1's policy has no urgent_when: its critical event waits for the cool-down.
    wait_until(lambda: "pending        1 records" in inspected("mail:1"), 20, "mail:1 pending")
    mail = inspected("mail:1")
    assert "urgent_when off" in mail
    assert "(COOLDOWN)" in mail
    assert len(_mine(out, "mail:1")) == 1
    assert "urgent_when severity=critical" in inspected("ops:1")
    out.close()
