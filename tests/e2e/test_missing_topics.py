"""Topics that do not exist yet (issue 36 h), black-box through the CLI.

`digest-stream run` on topics nobody created used to log librdkafka's raw
`KafkaError{code=UNKNOWN_TOPIC_OR_PART,...}` at WARNING, once per consumer, and nothing about
the output and DLQ topics. Now it logs one line naming every missing topic, the setting naming
it and `digest-stream topics create`, and /readyz says the same; once `topics create` made them,
the service delivers without a restart and says the topics exist.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from digest_stream.settings import Settings
from tests.support import free_port, unique, wait_until
from tests.support.http import get
from tests.support.kafka import send_events
from tests.support.pipeline import FAST, Pipeline, ServiceProcess, settings_env

#: Generous on a shared 2-core box: the consumers notice the new topics on their metadata
#: refresh (10 s), the group rebalances (session timeout 10 s), then a digest cycle.
DELIVERY_SECONDS = 90.0


@pytest.fixture
def settings(
    kafka_bootstrap: str, redis_url: str, namespace: str, kafka_admin: AdminClient
) -> Iterator[Settings]:
    """Unique topic names that nobody creates (the test does, through the CLI; it deletes them)."""
    base = unique("missing")
    made = Settings.model_validate(
        {
            "kafka_bootstrap_servers": kafka_bootstrap,
            "redis_url": redis_url,
            "namespace": namespace,
            "events_topic": f"{base}.events",
            "schedule_topic": f"{base}.schedule",
            "output_topic": f"{base}.output",
            "dlq_topic": f"{base}.dlq",
            "group_id": f"{base}-ingest",
            "delivery_group_id": f"{base}-delivery",
            **FAST,
            # Every digest through the schedule topic and the delivery role: both consumers
            # must find their topic once it exists.
            "direct_leading_edge": False,
        }
    )
    yield made
    topics = [made.events_topic, made.schedule_topic, made.output_topic, made.dlq_topic]
    existing = [topic for topic in topics if topic in kafka_admin.list_topics(timeout=10).topics]
    if existing:
        for future in kafka_admin.delete_topics(existing).values():
            future.result(timeout=30)


def _missing_lines(proc: ServiceProcess) -> list[str]:
    return [line for line in proc.log().splitlines() if "do not exist: create them" in line]


def test_missing_topics_are_named_once_and_used_once_created(settings: Settings) -> None:
    port = free_port()
    proc = ServiceProcess(settings, "ingest,scheduler,delivery", {
        "DIGEST_STREAM_METRICS_PORT": str(port)})  # fmt: skip
    pipe = Pipeline(settings, partitions=2, processes=[proc])
    try:
        wait_until(lambda: bool(_missing_lines(proc)), 30, "no line about the missing topics")
        (line,) = _missing_lines(proc)
        assert " WARNING " in line
        assert (
            f"Kafka topics {settings.events_topic} (DIGEST_STREAM_EVENTS_TOPIC), "
            f"{settings.schedule_topic} (DIGEST_STREAM_SCHEDULE_TOPIC), "
            f"{settings.dlq_topic} (DIGEST_STREAM_DLQ_TOPIC), "
            f"{settings.output_topic} (DIGEST_STREAM_OUTPUT_TOPIC) do not exist: create them "
            "with `digest-stream topics create` (run with the same settings); the service waits "
            "for them and needs no restart"
        ) in line
        wait_until(lambda: b"topics create" in _ready(port), 30,
                   "readiness does not name the missing topics")  # fmt: skip
        problems = json.loads(_ready(port))["problems"]
        assert any("`digest-stream topics create`" in problem for problem in problems), problems

        created = subprocess.run(
            [sys.executable, "-m", "digest_stream.cli", "topics", "create", "--partitions", "2"],
            env={**os.environ, **settings_env(settings)},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        ids = send_events(settings, ["missing:a", "missing:b"], per_timeline=2)
        out = pipe.output()
        try:
            out.wait_for(lambda: set(ids) <= out.record_ids(), DELIVERY_SECONDS,
                         "the events sent once the topics exist")  # fmt: skip
        finally:
            out.close()
        wait_until(lambda: "now; the service uses" in proc.log(), 30,
                   "no line saying the topics exist")  # fmt: skip
    except BaseException:
        print(proc.log()[-6000:])
        raise
    finally:
        assert proc.stop() == 0
    log = proc.log()
    assert "UNKNOWN_TOPIC_OR_PART" not in log  # librdkafka's words: DEBUG only
    # once: the reminders (every 60 s) say how long the topics have been missing
    assert [line for line in _missing_lines(proc) if "(missing for" not in line] == [line]


def _ready(port: int) -> bytes:
    _status, body = get(f"http://127.0.0.1:{port}/readyz")
    return body
