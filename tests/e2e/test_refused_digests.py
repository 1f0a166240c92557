"""Digests that can never be produced (issue 36 b), through the real broker.

An event whose record the output format makes larger than a digest message can hold is
refused at the ingest (`oversize`), by its real encoded size (JSON escapes a control character
into six bytes); a digest the broker refuses for good is dead-lettered (`publish-refused`) and
closed, so its timeline goes on."""

from __future__ import annotations

import time

from digest_stream.client import EventProducer
from tests.support import unique
from tests.support.kafka import TopicFactory
from tests.support.pipeline import Pipeline, PipelineFactory


def _send(pipe: Pipeline, timeline: str, record_id: str, payload: bytes, **attributes: str) -> None:
    with EventProducer(
        pipe.settings.kafka_bootstrap_servers, topic=pipe.settings.events_topic
    ) as p:
        p.send(timeline, record_id, payload, attributes=attributes)
        p.flush()


def test_an_event_whose_json_record_cannot_fit_a_message_is_refused_at_the_ingest(
    pipeline_factory: PipelineFactory, topic_factory: TopicFactory
) -> None:
    # The event, scaled down: its Avro value (~17,000 bytes) is within
    # max_event_bytes, but its 16,900 control characters take 101,400 bytes of JSON, four
    # times what a 40,000-byte message holds. The output topic takes what the service is told.
    output = topic_factory(
        partitions=1, name=unique("json-small") + ".output", **{"max.message.bytes": "40000"}
    )
    pipe = pipeline_factory(
        partitions=1, output_topic=output, output_format="json",
        max_message_bytes=40_000, max_event_bytes=17_000, max_attempts=2,
    )  # fmt: skip
    app = pipe.app()
    out, dlq = pipe.output(), pipe.dlq()
    timeline = unique("hostile")
    _send(pipe, timeline, "r1", b"{}", a="\x01" * 16_900)
    dlq.wait_for(lambda: bool(dlq.messages), 60, "the hostile event dead-lettered")
    (letter,) = dlq.messages
    headers = dict(letter.headers() or [])
    assert headers["dlq.reason"] == b"oversize", headers
    assert headers["dlq.source.topic"] == pipe.settings.events_topic.encode()
    detail = str(headers["dlq.detail"])
    assert "json output format" in detail, detail
    assert "101,4" in detail
    assert letter.key() == timeline.encode()
    # The timeline never held it: an ordinary event after it goes out as its first digest.
    sent = time.monotonic()
    _send(pipe, timeline, "r2", b"{}")
    out.wait_for(lambda: "r2" in out.record_ids(), 30, "the ordinary event's digest")
    took = time.monotonic() - sent
    assert out.record_ids() == {"r2"}
    assert len(dlq.messages) == 1
    assert app.metrics.value("digest_dead_letters_total", reason="oversize") == 1
    assert took < 30, took
    print(f"ordinary event out {took:.2f} s after it was sent")
    out.close()
    dlq.close()


def test_a_digest_the_broker_refuses_for_good_is_dead_lettered_and_closed(
    pipeline_factory: PipelineFactory, topic_factory: TopicFactory
) -> None:
    # The output topic takes nothing over 1,000 bytes: the 2,000-byte event was accepted
    # (max_event_bytes is the service's, the topic's limit is the broker's), and its digest is
    # refused with MSG_SIZE_TOO_LARGE however often it is tried.
    output = topic_factory(
        partitions=1, name=unique("tiny") + ".output", **{"max.message.bytes": "1000"}
    )
    pipe = pipeline_factory(partitions=1, output_topic=output, max_attempts=3)
    app = pipe.app()
    out, dlq = pipe.output(), pipe.dlq()
    timeline = unique("refused")
    _send(pipe, timeline, "r1", b"x" * 2000)
    dlq.wait_for(lambda: bool(dlq.messages), 60, "the refused digest dead-lettered")
    (letter,) = dlq.messages
    headers = dict(letter.headers() or [])
    assert headers["dlq.reason"] == b"publish-refused", headers
    assert headers["dlq.source.topic"] == pipe.settings.schedule_topic.encode()
    detail = str(headers["dlq.detail"])
    assert "MSG_SIZE_TOO_LARGE" in detail, detail
    assert "1 record" in detail
    assert "r1" in detail
    # Not retried by delivery (it can never go: the one retry is the leading edge's hand-over
    # to delivery), and its record is counted lost.
    assert app.metrics.value("digest_publish_retries_total") == 1
    assert app.metrics.value("digest_events_dropped_total", reason="refused") == 1
    assert app.store is not None
    info = app.store.inspect(0, timeline)
    assert info is None or info.open_digest is None  # closed: nothing waits behind it
    # The timeline goes on: an ordinary event after it is published within a bound.
    sent = time.monotonic()
    _send(pipe, timeline, "r2", b"{}")
    out.wait_for(lambda: "r2" in out.record_ids(), 30, "the next event's digest")
    took = time.monotonic() - sent
    assert out.record_ids() == {"r2"}
    assert len(dlq.messages) == 1
    assert took < 30, took
    print(f"the next event out {took:.2f} s after it was sent")
    out.close()
    dlq.close()


def test_a_digest_refused_only_for_the_batch_it_was_in_is_published(
    pipeline_factory: PipelineFactory, topic_factory: TopicFactory
) -> None:
    # The broker refuses a record batch as a whole: a small digest produced in the same batch
    # as one too large for the topic comes back MSG_SIZE_TOO_LARGE too (librdkafka does not
    # split the batch). Taking that for good would lose it: it is tried alone first.
    output = topic_factory(
        partitions=1, name=unique("tiny") + ".output", **{"max.message.bytes": "1000"}
    )
    pipe = pipeline_factory(partitions=1, output_topic=output)
    app = pipe.app()
    out, dlq = pipe.output(), pipe.dlq()
    big, small = unique("big"), unique("small")
    # One flush: the ingest reads both in one batch and produces both digests in one call.
    with EventProducer(
        pipe.settings.kafka_bootstrap_servers, topic=pipe.settings.events_topic
    ) as p:
        p.send(big, "b1", b"x" * 2000)
        p.send(small, "s1", b"{}")
        p.flush()
    dlq.wait_for(lambda: bool(dlq.messages), 60, "the big digest dead-lettered")
    out.wait_for(lambda: "s1" in out.record_ids(), 30, "the small digest")
    (letter,) = dlq.messages
    assert letter.key() == big.encode()
    assert dict(letter.headers() or [])["dlq.reason"] == b"publish-refused"
    assert out.record_ids() == {"s1"}
    assert app.metrics.value("digest_events_dropped_total", reason="refused") == 1
    out.close()
    dlq.close()
