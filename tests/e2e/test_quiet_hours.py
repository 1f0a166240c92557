"""Quiet hours end to end (issue 39, item 2): through the service, the real broker and Redis
(single node and cluster), a per-prefix window around now (set through the settings, a
minute long, in a zone away from UTC) holds a timeline's first event and what follows it until
the window ends, then sends them as one digest; other timelines go at once; ``inspect`` says
why the timeline waits."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from digest_stream.wire.models import DigestReason
from tests.support import wait_until
from tests.support.kafka import Collector
from tests.support.pipeline import PipelineFactory, cli_flags, inspected

ZONE = "Asia/Kathmandu"  # UTC+05:45: its minutes are UTC's, its hours are not
T = 1_700_000_000_000
BACKENDS = ("redis", "cluster")


def _window_around_now() -> tuple[str, float]:
    """Quiet hours from this minute to the next (local time), and when they end; asked in the
    first 25 s of a minute, so the events of both backends, sent next, fall inside."""
    wait_until(lambda: time.time() % 60 < 25, 40, "the first 25 s of a minute")
    local = datetime.now(ZoneInfo(ZONE)).replace(second=0, microsecond=0)
    ends = local + timedelta(minutes=1)
    return f"{local:%H:%M}-{ends:%H:%M}", ends.timestamp()


@dataclass
class Side:
    """One backend's pipeline: its output and the CLI flags that reach its store."""

    backend: str
    out: Collector
    flags: list[str]


def _side(
    pipeline_factory: PipelineFactory,
    request: pytest.FixtureRequest,
    backend: str,
    overrides: dict[str, dict[str, str]],
) -> Side:
    """The service on ``backend`` (the single Redis or the cluster) with the quiet overrides,
    its timeline night:q holding two records inside the window (loud's went out at once)."""
    where: dict[str, object] = {}
    if backend == "cluster":
        seed = request.getfixturevalue("redis_cluster_nodes")[0]
        where = {"redis_url": f"redis://{seed}/0", "redis_cluster": True}
    pipe = pipeline_factory(
        partitions=2,
        minimum_delay=5.0,
        increment_delay=1.0,
        maximum_delay=10.0,
        timezone=ZONE,
        overrides=overrides,
        **where,
    )
    pipe.app()
    flags = [*cli_flags(pipe.settings), "--timezone", ZONE, "--overrides", json.dumps(overrides)]
    if backend == "cluster":
        flags += ["--redis-cluster", "true"]
    out = pipe.output()
    with pipe.producer() as producer:
        producer.send("night:q", "a", b"{}", timestamp_ms=T)
        producer.send("loud", "x", b"{}", timestamp_ms=T)  # no quiet hours: at once
        producer.flush()
        out.wait_for(lambda: len(out.digests) == 1, 30, "loud's immediate digest")
        assert out.digests[0].timeline == "loud", backend
        wait_until(
            lambda: "pending        1 records" in inspected("night:q", flags), 20, "the held record"
        )
        producer.send("night:q", "b", b"{}", timestamp_ms=T + 1)
        producer.flush()
    return Side(backend, out, flags)


def _held_digest(side: Side, ends: float) -> None:
    """The one digest of night:q's two records, at the window's end, then a plain cool-down."""
    out = side.out
    out.wait_for(lambda: len(out.digests) == 2, ends - time.time() + 20, "the held digest")
    digest = out.digests[1]
    assert digest.timeline == "night:q", side.backend
    assert digest.opened_at >= int(ends * 1000), (side.backend, digest.opened_at, ends)
    assert [r.id for r in digest.records] == ["b", "a"], side.backend  # one digest of both
    assert (digest.reason, digest.total) == (DigestReason.IMMEDIATE, 2), side.backend
    # out of the window now: its next delivery is the plain cool-down after it
    assert digest.next_delivery_at is not None
    assert 0 <= digest.next_delivery_at - (digest.opened_at + 5_000) < 5_000, side.backend
    out.close()


@pytest.mark.slow
@pytest.mark.cluster
def test_quiet_hours_hold_the_first_event_and_send_one_digest_at_their_end(
    pipeline_factory: PipelineFactory, request: pytest.FixtureRequest
) -> None:
    # The single Redis and the cluster inside one window: it lasts a minute, and the test
    # waits for its end once, not once per backend.
    spec, ends = _window_around_now()
    overrides = {"night:*": {"quiet_hours": spec}}
    sides = [_side(pipeline_factory, request, backend, overrides) for backend in BACKENDS]
    for side in sides:
        shown = inspected("night:q", side.flags)
        assert "state          waiting" in shown, (side.backend, shown)
        assert f"(IMMEDIATE, held by quiet hours {spec} {ZONE})" in shown, (side.backend, shown)
        assert f"quiet_hours {spec}" in shown, (side.backend, shown)
    assert time.time() < ends - 1, "the window ended before the test could look inside it"
    for side in sides:
        side.out.observe(min(1.0, ends - time.time() - 0.5))
        assert len(side.out.digests) == 1, side.backend  # nothing of night:q inside the window
    for side in sides:
        _held_digest(side, ends)
