"""Quiet hours end to end (issue 39, item 2): through the service, the real broker and Redis
(single node and cluster), a per-prefix window around now (set through the settings, a
minute long, in a zone away from UTC) holds a timeline's first event and what follows it until
the window ends, then sends them as one digest; other timelines go at once; ``inspect`` says
why the timeline waits."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from digest_stream.wire.models import DigestReason
from tests.support import wait_until
from tests.support.pipeline import PipelineFactory, cli_flags, inspected

ZONE = "Asia/Kathmandu"  # UTC+05:45: its minutes are UTC's, its hours are not
T = 1_700_000_000_000


def _window_around_now() -> tuple[str, float]:
    """Quiet hours from this minute to the next (local time), and when they end; asked in the
    first 40 s of a minute, so events sent now fall inside."""
    wait_until(lambda: time.time() % 60 < 40, 25, "the first 40 s of a minute")
    local = datetime.now(ZoneInfo(ZONE)).replace(second=0, microsecond=0)
    ends = local + timedelta(minutes=1)
    return f"{local:%H:%M}-{ends:%H:%M}", ends.timestamp()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["redis", pytest.param("cluster", marks=pytest.mark.cluster)])
def test_quiet_hours_hold_the_first_event_and_send_one_digest_at_their_end(
    pipeline_factory: PipelineFactory, request: pytest.FixtureRequest, backend: str
) -> None:
    spec, ends = _window_around_now()
    overrides = {"night:*": {"quiet_hours": spec}}
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
    out = pipe.output()
    flags = [*cli_flags(pipe.settings), "--timezone", ZONE, "--overrides", json.dumps(overrides)]
    if backend == "cluster":
        flags += ["--redis-cluster", "true"]
    with pipe.producer() as producer:
        producer.send("night:q", "a", b"{}", timestamp_ms=T)
        producer.send("loud", "x", b"{}", timestamp_ms=T)  # no quiet hours: at once
        producer.flush()
        out.wait_for(lambda: len(out.digests) == 1, 30, "loud's immediate digest")
        assert out.digests[0].timeline == "loud"

        wait_until(
            lambda: "pending        1 records" in inspected("night:q", flags), 20, "the held record"
        )
        shown = inspected("night:q", flags)
        assert "state          waiting" in shown, shown
        assert f"(IMMEDIATE, held by quiet hours {spec} {ZONE})" in shown, shown
        assert f"quiet_hours {spec}" in shown, shown
        producer.send("night:q", "b", b"{}", timestamp_ms=T + 1)
        producer.flush()
    assert time.time() < ends - 1, "the window ended before the test could look inside it"
    out.observe(min(2.0, ends - time.time() - 0.5))
    assert len(out.digests) == 1  # nothing of night:q inside the window
    out.wait_for(lambda: len(out.digests) == 2, ends - time.time() + 20, "the held digest")
    digest = out.digests[1]
    assert digest.timeline == "night:q"
    assert digest.opened_at >= int(ends * 1000), (digest.opened_at, ends)
    assert [r.id for r in digest.records] == ["b", "a"]  # one digest of both
    assert (digest.reason, digest.total) == (DigestReason.IMMEDIATE, 2)
    # out of the window now: its next delivery is the plain cool-down after it
    assert digest.next_delivery_at is not None
    assert 0 <= digest.next_delivery_at - (digest.opened_at + 5_000) < 5_000
    out.close()
