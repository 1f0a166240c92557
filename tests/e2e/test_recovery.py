"""Redis losing writes is survivable: the ingest notices the fence and replays from Kafka.

A rollback is reproduced exactly at the key level: DUMP every key of the partition's hash tag
(the "snapshot"), let the stream run on, then delete the tag's keys and RESTORE the snapshot,
which is what a failover to a lagging replica or a restart from an older RDB does to them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from digest_stream.store.redis.keys import partition_tag
from tests.support import wait_until
from tests.support.kafka import send_events
from tests.support.pipeline import Pipeline, PipelineFactory

Snapshot = list[tuple[bytes, int, bytes]]


def _snapshot(client: redis.Redis, tag: str) -> Snapshot:
    saved: Snapshot = []
    for key in client.scan_iter(match=f"{tag}*", count=1000):
        ttl = int(client.pttl(key))
        value = client.dump(key)
        assert isinstance(key, bytes)
        assert isinstance(value, bytes)
        saved.append((key, max(ttl, 0), value))
    return saved


def _restore(client: redis.Redis, tag: str, snapshot: Snapshot) -> None:
    for key in list(client.scan_iter(match=f"{tag}*", count=1000)):
        client.delete(key)
    for key, ttl, value in snapshot:
        client.restore(key, ttl, value, replace=True)


def _fence_reaches(pipe: Pipeline, offset: int) -> Callable[[], bool]:
    def check() -> bool:
        store = pipe.apps[-1].store
        assert store is not None
        return store.applied_offset(0) == offset

    return check


def _snapshot_midway(pipe: Pipeline, client: redis.Redis, tag: str, timeline: str) -> Snapshot:
    """Apply five events (fence 4), snapshot the partition, apply five more (fence 9)."""
    send_events(pipe.settings, timeline, 5)
    wait_until(_fence_reaches(pipe, 4), 30, "fence at offset 4")
    snapshot = _snapshot(client, tag)
    send_events(pipe.settings, timeline, 5)
    wait_until(_fence_reaches(pipe, 9), 30, "fence at offset 9")
    return snapshot


def test_fence_behind_after_rollback_is_replayed(
    pipeline_factory: PipelineFactory, redis_client: redis.Redis
) -> None:
    # Counts the records Redis holds for the timeline (pending): the leading edge would take
    # the first batch out in a digest.
    pipe = pipeline_factory(partitions=1, direct_leading_edge=False)
    app = pipe.app(roles="ingest,scheduler")  # no delivery: the timeline just accumulates
    tag = partition_tag(pipe.settings.namespace, 0)
    snapshot = _snapshot_midway(pipe, redis_client, tag, "rb")
    _restore(redis_client, tag, snapshot)  # Redis "loses" offsets 5..9
    assert app.store is not None
    assert app.store.inspect(0, "rb").pending == 5
    send_events(pipe.settings, "rb", 1)
    wait_until(_fence_reaches(pipe, 10), 30, "replay up to offset 10")
    assert app.store.inspect(0, "rb").pending == 11  # nothing lost
    assert app.metrics.value("digest_replays_total", cause="fence_behind") == 1
    assert app.metrics.value("digest_replays_total", cause="state_loss") == 0


@pytest.mark.parametrize(
    ("on_state_loss", "pending_after"),
    [
        ("replay", 11),  # replayed from the earliest offset: everything rebuilt
        ("continue", 1),  # what Redis held is gone, as configured; the new event goes on
    ],
)
def test_redis_back_empty_follows_on_state_loss(
    pipeline_factory: PipelineFactory,
    redis_client: redis.Redis,
    on_state_loss: str,
    pending_after: int,
) -> None:
    # Counts the records Redis holds for the timeline (pending): the leading edge would take
    # the first batch out in a digest.
    pipe = pipeline_factory(partitions=1, direct_leading_edge=False, on_state_loss=on_state_loss)
    app = pipe.app(roles="ingest,scheduler")
    tag = partition_tag(pipe.settings.namespace, 0)
    send_events(pipe.settings, "empty", 10)
    wait_until(_fence_reaches(pipe, 9), 30, "fence at offset 9")
    _restore(redis_client, tag, [])  # Redis came back with nothing
    send_events(pipe.settings, "empty", 1)
    wait_until(_fence_reaches(pipe, 10), 30, f"offset 10 applied under {on_state_loss}")
    assert app.store is not None
    assert app.store.inspect(0, "empty").pending == pending_after
    assert app.metrics.value("digest_replays_total", cause="state_loss") == 1


def test_assignment_behind_committed_offset_replays_the_gap(
    pipeline_factory: PipelineFactory, redis_client: redis.Redis
) -> None:
    # Counts the records Redis holds for the timeline (pending): the leading edge would take
    # the first batch out in a digest.
    pipe = pipeline_factory(partitions=1, direct_leading_edge=False)
    first = pipe.app(roles="ingest,scheduler")
    tag = partition_tag(pipe.settings.namespace, 0)
    snapshot = _snapshot_midway(pipe, redis_client, tag, "gap")
    first.stop()
    assert first.wait()
    assert pipe.committed() == 10  # the graceful stop committed everything it applied
    _restore(redis_client, tag, snapshot)  # while no instance runs, Redis rolls back
    second = pipe.app(roles="ingest,scheduler")
    wait_until(_fence_reaches(pipe, 9), 30, "the new owner replays offsets 5..9")
    assert second.store is not None
    assert second.store.inspect(0, "gap").pending == 10
    assert second.metrics.value("digest_replays_total", cause="fence_behind") == 1


def test_sigterm_stops_gracefully_with_everything_committed(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=1)
    service = pipe.process()
    out = pipe.output()
    send_events(pipe.settings, "bye", 20)
    out.wait_for(lambda: bool(out.digests), 60, "a digest from the service process")
    started = time.monotonic()
    assert service.stop(timeout=60) == 0, service.log()
    assert time.monotonic() - started < 30
    assert "finishing in-flight batches" in service.log()
    assert pipe.committed() == 20
    out.close()
