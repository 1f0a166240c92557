"""Offsets belong to a topic: a recreated events topic is read, never skipped (issue 12, item 3).

Black-box through the CLI: `digest-stream run` applies 20 events (the partition fences stand at
their last offsets), the events topic is deleted and created again with `digest-stream topics
create`, and 5 new events follow. Their offsets (0..4) sit at or below the old fences: before the
fence knew its topic, every one was skipped as "already applied". Now the fence records the topic
id; the new topic is a state loss handled as `on_state_loss` says (replay: read it from the
beginning), with one ERROR line naming both topic ids. A fence written before topic ids
(library 9) is caught by the partitions' ends instead (an offset reset).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import redis
from confluent_kafka.admin import AdminClient

from digest_stream.store.redis.keys import fence_key, partition_tag
from tests.support import free_port, wait_until
from tests.support.http import get, metric
from tests.support.kafka import send_events
from tests.support.pipeline import Pipeline, PipelineFactory, ServiceProcess, settings_env

PARTITIONS = 2
FIRST = 20
AFTER = 5
#: Generous on a shared 2-core box: a rebalance (session timeout 10 s) plus a digest.
DELIVERY_SECONDS = 90.0


def _recreate_events_topic(pipe: Pipeline) -> None:
    """Delete the events topic, then create it again through the CLI."""
    settings = pipe.settings
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap_servers})
    topic = settings.events_topic
    admin.delete_topics([topic])[topic].result(timeout=30)
    wait_until(
        lambda: topic not in admin.list_topics(timeout=5).topics,
        30,
        f"{topic} still listed after its deletion",
    )
    created = subprocess.run(
        [sys.executable, "-m", "digest_stream.cli", "topics", "create",
         "--partitions", str(PARTITIONS)],
        env={**os.environ, **settings_env(settings)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert f"created {topic}" in created.stdout

    def ready() -> bool:
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
        return (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == PARTITIONS
            and all(p.leader >= 0 for p in meta.partitions.values())
        )

    wait_until(ready, 30, f"{topic} has no leaders after its re-creation")


def _delivered(pipe: Pipeline, proc: ServiceProcess, ids: list[str], what: str) -> None:
    out = pipe.output()
    try:
        out.wait_for(lambda: set(ids) <= out.record_ids(), DELIVERY_SECONDS, what)
    except BaseException:
        print(proc.log()[-6000:])
        raise
    finally:
        out.close()


def _first_run(pipe: Pipeline) -> None:
    """`digest-stream run` applies and delivers the first events, then stops gracefully."""
    first_run = pipe.process()
    first = send_events(pipe.settings, [f"before-{n}" for n in range(FIRST)])
    _delivered(pipe, first_run, first, f"the first {FIRST} events")
    assert first_run.stop() == 0


def _topic_change_logged(proc: ServiceProcess) -> list[str]:
    return [
        line
        for line in proc.log().splitlines()
        if "ERROR" in line and re.search(r"topic id changed \S+ -> \S+", line)
    ]


def test_a_recreated_events_topic_is_delivered_while_the_service_runs(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=PARTITIONS)
    port = free_port()
    proc = pipe.process(DIGEST_STREAM_METRICS_PORT=str(port))
    first = send_events(pipe.settings, [f"before-{n}" for n in range(FIRST)])
    _delivered(pipe, proc, first, f"the first {FIRST} events")

    _recreate_events_topic(pipe)
    after = send_events(pipe.settings, [f"after-{n}" for n in range(AFTER)])
    _delivered(pipe, proc, after, f"all {AFTER} events sent to the recreated topic")

    lines = _topic_change_logged(proc)
    assert lines, proc.log()[-4000:]
    print(*lines, sep="\n")
    status, body = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    changed = metric(body.decode(), "digest_replays_total", cause="topic_changed")
    assert changed is not None
    assert changed >= 1
    assert not metric(body.decode(), "digest_events_skipped_total")


def test_a_topic_recreated_while_the_service_is_down_is_delivered_after_the_restart(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(partitions=PARTITIONS)
    _first_run(pipe)

    _recreate_events_topic(pipe)
    after = send_events(pipe.settings, [f"after-{n}" for n in range(AFTER)])
    second_run = pipe.process()
    _delivered(pipe, second_run, after, f"all {AFTER} events sent to the recreated topic")
    lines = _topic_change_logged(second_run)
    assert lines, second_run.log()[-4000:]
    print(*lines, sep="\n")


def test_a_fence_from_before_topic_ids_is_caught_by_the_partition_end(
    pipeline_factory: PipelineFactory,
) -> None:
    # Upgraded from library 9 while the topic was recreated: the fences carry no topic id, so
    # only the partitions' ends can tell that their offsets were reset.
    pipe = pipeline_factory(partitions=PARTITIONS)
    _first_run(pipe)
    client = redis.Redis.from_url(pipe.settings.redis_url)
    try:
        for partition in range(PARTITIONS):
            key = fence_key(partition_tag(pipe.settings.namespace, partition))
            stored = client.get(key)
            assert isinstance(stored, bytes)
            offset, _, topic = stored.partition(b"|")
            assert offset, stored
            assert topic, "the service wrote no topic id with the fence"
            client.set(key, offset)  # as library 9 wrote it
    finally:
        client.close()

    _recreate_events_topic(pipe)
    after = send_events(pipe.settings, [f"after-{n}" for n in range(AFTER)])
    second_run = pipe.process()
    _delivered(pipe, second_run, after, f"all {AFTER} events sent to the recreated topic")
    lines = [
        line
        for line in second_run.log().splitlines()
        if "ERROR" in line and "is at or past the end of the partition" in line
    ]
    assert lines, second_run.log()[-4000:]
    print(*lines, sep="\n")
