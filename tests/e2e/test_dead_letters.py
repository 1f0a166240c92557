"""A dead letter the broker refuses is never skipped: its source is read again until it lands."""

from __future__ import annotations

import os

from confluent_kafka import Producer

# The package re-exports these without declaring them; import from where they live (typed).
from tests.support import unique, wait_until
from tests.support.kafka import TopicFactory
from tests.support.pipeline import PipelineFactory


def test_a_dead_letter_too_large_for_the_dlq_goes_without_its_value_not_forever_again(
    pipeline_factory: PipelineFactory, topic_factory: TopicFactory
) -> None:
    # The DLQ takes nothing over 600 bytes: the poison (1,000 bytes) could never land whole.
    # Retrying it would hold the partition forever; it goes with its coordinates instead.
    dlq_topic = topic_factory(
        partitions=1, name=unique("small") + ".dlq", **{"max.message.bytes": "600"}
    )
    pipe = pipeline_factory(partitions=1, dlq_topic=dlq_topic)
    app = pipe.app(roles="ingest,scheduler")
    raw = Producer({"bootstrap.servers": pipe.settings.kafka_bootstrap_servers})
    raw.produce(pipe.settings.events_topic, key=b"poison", value=os.urandom(1000))
    assert raw.flush(30) == 0
    with pipe.producer() as producer:
        producer.send("fine", "r1", b"{}")
        producer.flush()
    wait_until(lambda: pipe.committed() == 2, 60, "the commit to pass the poison")
    dlq = pipe.dlq()
    dlq.wait_for(lambda: bool(dlq.messages), 30, "the poison's coordinates in the DLQ")
    message = dlq.messages[0]
    headers = dict(message.headers() or [])
    assert headers["dlq.source.offset"] == b"0"
    assert headers["dlq.value-dropped"] == b"1000"
    assert message.value() is None
    assert app.metrics.value("digest_dead_letters_truncated_total") == 1
    dlq.close()
