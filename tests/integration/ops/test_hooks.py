"""Lifecycle hooks and event headers carried into digest headers, on the real pipeline."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from digest_stream.app import App
from digest_stream.ops.hooks import Hook, Hooks, load_hooks
from digest_stream.ops.metrics import Metrics
from digest_stream.settings import Settings
from digest_stream.store import AddResult, MemoryStore, NewRecord
from digest_stream.wire import codec, envelope
from digest_stream.wire.models import Digest, Event
from tests.support import unique, wait_until
from tests.support.kafka import send_events
from tests.support.metrics_dump import metrics_dump_env
from tests.support.pipeline import Pipeline


class Recorder(Hook):
    """Remembers every call."""

    def __init__(self, _settings: Settings | None = None) -> None:
        self.calls: list[tuple[str, tuple[object, ...]]] = []
        self.lock = threading.Lock()

    def _note(self, name: str, *args: object) -> None:
        with self.lock:
            self.calls.append((name, args))

    def names(self) -> list[str]:
        with self.lock:
            return [name for name, _ in self.calls]

    def on_add(self, partition: int, records: Sequence[NewRecord], result: AddResult) -> None:
        self._note("on_add", partition, len(records), result.added)

    def on_ready(self, partition: int, timelines: Sequence[str], reason: str) -> None:
        self._note("on_ready", partition, tuple(timelines), reason)

    def on_publish(
        self, partition: int, digest: Digest, headers: Sequence[tuple[str, bytes]]
    ) -> None:
        self._note("on_publish", digest.timeline, len(digest.records), tuple(headers))

    def on_close(self, partition: int, timeline: str, digest_id: str, closed: bool) -> None:
        self._note("on_close", timeline, closed)

    def on_dead_letter(self, reason: str, detail: str, source: tuple[str, int, int]) -> None:
        self._note("on_dead_letter", reason)

    def on_stop(self, metrics: Metrics) -> None:
        self._note("on_stop", _ingested(metrics))


def _ingested(metrics: Metrics) -> float:
    """The events_ingested counter's value."""
    total = metrics.registry.get_sample_value("digest_events_ingested_total")
    return total or 0.0


class Broken(Hook):
    def on_add(self, partition: int, records: Sequence[NewRecord], result: AddResult) -> None:
        raise RuntimeError("a broken hook never stops the pipeline")


def _traced(trace: str) -> list[tuple[str, bytes]]:
    """Kafka headers of an event: a trace id the service carries, and one it does not."""
    return [("traceparent", trace.encode()), ("other", b"x")]


@pytest.mark.parametrize("leading", [True, False], ids=["leading-edge", "announced"])
def test_hooks_fire_and_trace_headers_reach_the_digest(
    pipeline_factory: Callable[..., Pipeline], leading: bool
) -> None:
    pipe = pipeline_factory(partitions=2)
    recorder = Recorder()
    # A cool-down long enough for the three later sends below (each its own producer and
    # flush) under a loaded CI machine: 2 s split them over two digests once.
    settings = pipe.with_settings(
        carry_headers=["traceparent"], direct_leading_edge=leading,
        minimum_delay=8.0, maximum_delay=12.0,
    )  # fmt: skip
    app = App(settings, hooks=[recorder, Broken()])
    app.start()
    pipe.apps.append(app)  # stopped by the fixture
    timeline, plain = unique("mail:p"), unique("plain")
    send_events(pipe.settings, timeline, ids=["a"], headers=_traced("trace-a"))
    send_events(pipe.settings, plain, ids=["p"])
    producer = Producer({"bootstrap.servers": pipe.settings.kafka_bootstrap_servers})
    producer.produce(pipe.settings.events_topic, key=b"bad", value=b"\xff\xff")  # -> DLQ
    producer.flush(10)
    output = pipe.output()
    output.wait_for(lambda: len(output.messages) >= 2, 30, "two immediate digests")
    # Later events for the cooling-down timeline: one digest carrying both trace ids.
    for record_id, trace in (("b", "trace-b"), ("c", "trace-c"), ("d", "trace-b")):
        send_events(pipe.settings, timeline, ids=[record_id], headers=_traced(trace))
    output.wait_for(lambda: len(output.messages) >= 3, 30, "the cool-down digest")
    by_timeline: dict[str, list[list[tuple[str, str | bytes | None]]]] = {}
    for message in output.messages:
        key = (message.key() or b"").decode()
        headers = message.headers() or []
        assert isinstance(headers, list)
        by_timeline.setdefault(key, []).append(headers)
    assert by_timeline[timeline][0] == [("traceparent", b"trace-a")]
    # Newest record first, each value once, only the carried header names.
    assert by_timeline[timeline][1] == [("traceparent", b"trace-b"), ("traceparent", b"trace-c")]
    assert by_timeline[plain] == [[]]
    assert [r.id for r in output.digests[-1].records] == ["d", "c", "b"]  # payloads intact
    wait_until(lambda: recorder.names().count("on_close") >= 3, 30, "three closes")
    names = set(recorder.names())
    assert names == {"on_add", "on_ready", "on_publish", "on_close", "on_dead_letter"}
    reasons = {args[2] for name, args in recorder.calls if name == "on_ready"}
    # on_ready is an announcement on the schedule topic: the leading edge (the first digests,
    # published by the ingest) has none; the cool-down digest is announced either way.
    assert reasons == ({"SCHEDULED"} if leading else {"IMMEDIATE", "SCHEDULED"})
    published = [args for name, args in recorder.calls if name == "on_publish"]
    assert (timeline, 3, (("traceparent", b"trace-b"), ("traceparent", b"trace-c"))) in published
    dead = [args for name, args in recorder.calls if name == "on_dead_letter"]
    assert len(dead) == 1
    output.close()


def test_on_stop_gets_the_final_counts_once(pipeline_factory: Callable[..., Pipeline]) -> None:
    pipe = pipeline_factory(partitions=1)
    recorder = Recorder()
    app = App(pipe.settings, hooks=[recorder])
    app.start()
    pipe.apps.append(app)  # stopped by the fixture too: wait() again must not call it twice
    send_events(pipe.settings, unique("t"), ids=["a", "b", "c"])
    wait_until(lambda: _ingested(app.metrics) == 3, 30, "the three events ingested")
    assert "on_stop" not in recorder.names()
    app.stop()
    assert app.wait()
    app.wait()
    stops = [args for name, args in recorder.calls if name == "on_stop"]
    assert stops == [(3.0,)]


def test_a_service_process_dumps_its_counters_through_the_hooks_setting(
    pipeline_factory: Callable[..., Pipeline], tmp_path: Path
) -> None:
    # The chaos harness counts drops across process lifetimes this way (no test switch).
    pipe = pipeline_factory(partitions=1)
    dump = tmp_path / "counters.prom"
    proc = pipe.process(**metrics_dump_env(dump, {}))
    send_events(pipe.settings, unique("t"), ids=["a", "b"])
    output = pipe.output()
    output.wait_for(lambda: len(output.messages) >= 1, 60, "a digest")
    output.close()
    assert not dump.exists()
    assert proc.stop() == 0, proc.log()[-3000:]
    counters = {
        sample.name: sample.value
        for family in text_string_to_metric_families(dump.read_text())
        for sample in family.samples
    }
    assert counters["digest_events_ingested_total"] == 2
    assert counters["digest_digests_published_total"] >= 1


def test_envelope_round_trip_and_old_payloads() -> None:
    event = codec.encode_event(Event(id="e1", timestamp=1, payload=b"p"))
    names = frozenset({"traceparent", "tenant"})
    assert envelope.wrap(None, names, event) is event
    assert envelope.wrap([("other", b"x")], names, event) is event
    wrapped = envelope.wrap([("traceparent", b"t1"), ("tenant", "acme"), ("x", b"y")], names, event)
    assert wrapped[0] == 0  # never the first byte of an Avro Event
    assert envelope.unwrap(wrapped) == ([("traceparent", b"t1"), ("tenant", b"acme")], event)
    assert envelope.unwrap(event) == ([], event)  # payloads stored before: unchanged
    too_long = envelope.wrap([("traceparent", b"x" * 5000)], names, event)
    assert too_long is event


def test_enveloped_payloads_are_opaque_to_the_store() -> None:
    store = MemoryStore()
    payload = envelope.wrap([("traceparent", b"t")], frozenset({"traceparent"}), b"\x02e")
    store.add(0, [NewRecord("t1", "r1", 1.0, payload, offset=1)], 10.0)
    digest = store.open(0, "t1", "a" * 32, 11.0)
    assert envelope.unwrap(digest.records[0].payload) == ([("traceparent", b"t")], b"\x02e")


def test_hooks_dispatch_only_overridden_methods_and_load_by_name() -> None:
    recorder = Recorder()
    hooks = Hooks([recorder, Hook()])
    assert hooks
    assert not Hooks()
    assert hooks.wants_ready
    assert not Hooks([Hook()]).wants_ready
    hooks.on_close(0, "t", "id", True)
    assert recorder.calls == [("on_close", ("t", True))]
    loaded = load_hooks(["tests.integration.ops.test_hooks:Recorder"], Settings())
    assert isinstance(loaded[0], Recorder)
