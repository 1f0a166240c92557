"""Schema registry mode end to end, through the CLI, against the stack's real registry.

A team's stock confluent-kafka producer (AvroSerializer, an evolved v2 Event schema) feeds the
service; its stock AvroDeserializer, given only the registry URL, reads the digests back.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from digest_stream.wire import codec, framing
from digest_stream.wire.models import Event
from tests.support import wait_until
from tests.support.kafka import Collector, committed_offsets, end_offsets
from tests.support.pipeline import Pipeline, PipelineFactory, ServiceProcess
from tests.support.proxy import TcpProxy
from tests.support.registry import (
    client,
    delete_subjects,
    event_schema_v2,
    register,
    send_stock_events,
    stock_decode,
    stock_serializer,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def registry_pipeline(
    pipeline_factory: PipelineFactory, schema_registry_url: str
) -> Iterator[PipelineFactory]:
    """Pipelines in schema registry mode; their subjects are deleted afterwards."""
    made: list[Pipeline] = []

    def make(**changes: object) -> Pipeline:
        changes.setdefault("schema_registry_url", schema_registry_url)
        pipe = pipeline_factory(**changes)
        made.append(pipe)
        return pipe

    yield make
    for pipe in made:
        s = pipe.settings
        delete_subjects(schema_registry_url, [s.events_topic, s.schedule_topic, s.output_topic])


def _delivered(url: str, out: Collector) -> set[str]:
    """Record ids of every digest on the output topic, read by the stock AvroDeserializer."""
    return {r["id"] for d in stock_decode(url, out.messages) for r in d["records"]}


def _logged(service: ServiceProcess, text: str) -> bool:
    return text in service.log()


def _dlq_reasons(pipe: Pipeline, count: int) -> dict[str, str]:
    dlq = pipe.dlq()
    dlq.wait_for(lambda: len(dlq.messages) >= count, 60, f"{count} dead letters")
    reasons = {}
    for message in dlq.messages:
        headers = dict(message.headers() or [])
        reason = headers["dlq.reason"]
        assert isinstance(reason, bytes)
        reasons[(message.key() or b"").decode()] = reason.decode()
    dlq.close()
    return reasons


def _sent_and_read(
    pipe: Pipeline, url: str, timelines: list[str], per_timeline: int
) -> tuple[list[str], Collector, list[dict[str, Any]]]:
    """Events of an evolved writer schema sent by the stock serializer; the digests holding
    all of them, read by the stock deserializer."""
    s = pipe.settings
    v2 = stock_serializer(url, event_schema_v2())
    sent = send_stock_events(
        s.kafka_bootstrap_servers, s.events_topic, v2, timelines, per_timeline, {"source": "v2"}
    )
    out = pipe.output()
    out.wait_for(
        lambda: len(_delivered(url, out)) >= len(sent),
        90, "every event in a digest read by the stock AvroDeserializer",
    )  # fmt: skip
    return sent, out, stock_decode(url, out.messages)


def test_stock_serializer_in_stock_deserializer_out_with_an_evolved_schema(
    registry_pipeline: PipelineFactory, schema_registry_url: str
) -> None:
    pipe = registry_pipeline(partitions=2)
    s = pipe.settings
    service = pipe.process()
    timelines = [f"reg:{i}" for i in range(6)]
    sent, out, digests = _sent_and_read(pipe, schema_registry_url, timelines, 5)
    assert {r["id"] for d in digests for r in d["records"]} == set(sent)
    assert {d["timeline"] for d in digests} == set(timelines)
    assert all(d["parts"] == 1 and d["dropped"] == 0 for d in digests)
    # The schedule topic speaks the same framing, under its own registered schema.
    subjects = set(client(schema_registry_url).get_subjects())
    assert {f"{s.output_topic}-value", f"{s.schedule_topic}-value"} <= subjects
    assert all(framing.is_framed(m.value() or b"") for m in out.messages)
    assert service.stop() == 0


def test_the_leading_edge_the_ingest_publishes_is_registry_framed(
    registry_pipeline: PipelineFactory, schema_registry_url: str
) -> None:
    pipe = registry_pipeline(partitions=2, direct_leading_edge=True)
    s = pipe.settings
    service = pipe.process(roles="ingest,scheduler")  # no delivery: the ingest publishes
    timelines = [f"lead:{i}" for i in range(6)]
    _, out, digests = _sent_and_read(pipe, schema_registry_url, timelines, 1)
    assert {d["timeline"] for d in digests} == set(timelines)
    assert {d["reason"] for d in digests} == {"IMMEDIATE"}
    assert all(framing.is_framed(m.value() or b"") for m in out.messages)
    assert f"{s.output_topic}-value" in set(client(schema_registry_url).get_subjects())
    assert service.stop() == 0


def test_registration_at_start_is_idempotent(
    registry_pipeline: PipelineFactory, schema_registry_url: str
) -> None:
    pipe = registry_pipeline(partitions=1)
    s = pipe.settings
    registry = client(schema_registry_url)
    for _ in range(2):  # two starts (a restart, a second instance): one version each
        service = pipe.process()
        wait_until(lambda: f"{s.output_topic}-value" in registry.get_subjects(), 60, "registration")
        wait_until(functools.partial(_logged, service, "assigned"), 60, "the ingest to join")
        assert service.stop() == 0, service.log()[-2000:]
    assert registry.get_versions(f"{s.output_topic}-value") == [1]
    assert registry.get_versions(f"{s.schedule_topic}-value") == [1]


def test_plain_avro_and_unknown_ids_are_dead_lettered_with_their_own_reasons(
    registry_pipeline: PipelineFactory, schema_registry_url: str
) -> None:
    pipe = registry_pipeline(partitions=1)
    s = pipe.settings
    service = pipe.process()
    good = send_stock_events(
        s.kafka_bootstrap_servers, s.events_topic,
        stock_serializer(schema_registry_url, codec.EVENT_SCHEMA), "good", 2,
    )  # fmt: skip
    plain = codec.encode_event(
        Event(id="plain-1", timestamp=int(time.time() * 1000), payload=b"{}")
    )
    unknown = framing.prefix(2_000_000_000) + plain  # an id no registry has handed out
    producer = Producer({"bootstrap.servers": s.kafka_bootstrap_servers})
    producer.produce(s.events_topic, key=b"plain", value=plain)
    producer.produce(s.events_topic, key=b"unknown", value=unknown)
    assert producer.flush(30) == 0
    assert _dlq_reasons(pipe, 2) == {
        "plain": "not-registry-framed",
        "unknown": "unknown-schema-id",
    }
    out = pipe.output()
    out.wait_for(
        lambda: _delivered(schema_registry_url, out) >= set(good),
        60, "the good events delivered around the bad ones",
    )  # fmt: skip
    assert service.stop() == 0


def test_a_compatibility_refusal_stops_the_start_with_one_clear_line(
    registry_pipeline: PipelineFactory, schema_registry_url: str
) -> None:
    pipe = registry_pipeline(partitions=1)
    s = pipe.settings
    # The output subject already holds a Digest whose id is an int, and checks BACKWARD.
    clash = {"type": "record", "name": "Digest", "namespace": "digest_stream",
             "fields": [{"name": "id", "type": "int"}]}  # fmt: skip
    register(schema_registry_url, s.output_topic, clash)
    client(schema_registry_url).set_compatibility(f"{s.output_topic}-value", "BACKWARD")
    service = pipe.process()
    service.popen.wait(60)
    assert service.popen.returncode == 1
    lines = [line for line in service.log().splitlines() if "cannot start" in line]
    assert len(lines) == 1, service.log()[-3000:]
    assert "digest_stream.Digest schema is incompatible with subject" in lines[0]
    assert f"{s.output_topic}-value" in lines[0]
    assert "Traceback" not in service.log()


def test_registry_outage_pauses_ingest_and_loses_nothing(
    registry_pipeline: PipelineFactory, schema_registry_url: str
) -> None:
    host_port = schema_registry_url.split("//", 1)[1].split("/", 1)
    host, port = host_port[0].rsplit(":", 1)
    with TcpProxy(host, int(port)) as proxy:
        proxied = f"http://{proxy.address}/{host_port[1]}"
        pipe = registry_pipeline(partitions=2, schema_registry_url=proxied)
        s = pipe.settings
        service = pipe.process()
        out = pipe.output()
        v1 = stock_serializer(schema_registry_url, codec.EVENT_SCHEMA)
        timelines = [f"down:{i}" for i in range(10)]
        sent = send_stock_events(s.kafka_bootstrap_servers, s.events_topic, v1, timelines, 3)
        out.wait_for(
            lambda: _delivered(schema_registry_url, out) >= set(sent),
            90, "the events before the outage",
        )  # fmt: skip
        ends = end_offsets(s, range(2))
        wait_until(lambda: committed_offsets(s, range(2)) == ends, 30, "the first commit")

        proxy.block()
        # A schema the service has not fetched yet: it must ask the (unreachable) registry.
        v2 = stock_serializer(schema_registry_url, event_schema_v2("outage_field"))
        during = send_stock_events(
            s.kafka_bootstrap_servers, s.events_topic, v2, timelines, 3, {"outage_field": "x"}
        )
        wait_until(
            lambda: "schema registry unavailable" in service.log(), 30, "the ingest to notice"
        )
        assert "partitions paused" in service.log()
        blocked_at = time.monotonic()
        while time.monotonic() - blocked_at < 4.0:  # the outage lasts a few seconds
            out.poll(0.5)
            assert committed_offsets(s, range(2)) == ends, "a commit passed the outage"
        assert service.popen.poll() is None, service.log()[-2000:]

        proxy.unblock()
        every = set(sent) | set(during)
        out.wait_for(
            lambda: _delivered(schema_registry_url, out) >= every,
            90, "every event after the outage",
        )  # fmt: skip
        assert "schema registry reachable again" in service.log()
        seen: dict[str, set[str]] = {}
        for digest in stock_decode(schema_registry_url, out.messages):
            for record in digest["records"]:
                seen.setdefault(record["id"], set()).add(digest["id"])
        assert {r: ids for r, ids in seen.items() if len(ids) > 1} == {}
        dlq = pipe.dlq()
        dlq.observe(2.0)
        assert dlq.messages == [], "a good event was dead-lettered during the outage"
        dlq.close()
        assert service.stop() == 0
        out.close()
