"""A dead letter the broker refuses is never skipped: its source is read again until it lands."""

from __future__ import annotations

import os

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

# The package re-exports these without declaring them; import from where they live (typed).
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource

from tests.conftest import TopicFactory, unique, wait_until
from tests.e2e.conftest import PipelineFactory


def test_refused_dead_letter_holds_the_commit_and_is_retried(
    pipeline_factory: PipelineFactory, topic_factory: TopicFactory, kafka_admin: AdminClient
) -> None:
    # The DLQ refuses anything over 300 bytes until the test lifts the limit.
    dlq_topic = topic_factory(
        partitions=1, name=unique("small") + ".dlq", **{"max.message.bytes": "300"}
    )
    pipe = pipeline_factory(partitions=1, dlq_topic=dlq_topic)
    app = pipe.app(roles="ingest,scheduler")
    raw = Producer({"bootstrap.servers": pipe.settings.kafka_bootstrap_servers})
    raw.produce(pipe.settings.events_topic, key=b"poison", value=os.urandom(1000))
    assert raw.flush(30) == 0
    with pipe.producer() as producer:
        producer.send("fine", "r1", b"{}")
        producer.flush()
    assert app.store is not None
    wait_until(lambda: app.store is not None and app.store.applied_offset(0) == 1, 30, "r1 applied")

    # While the dead letter is refused, the poison's offset (0) is never committed past,
    # and the poison is read (and dead-lettered) again.
    def refusals() -> float:
        return sum(
            app.metrics.value("digest_dead_letters_total", reason=r)
            for r in ("trailing-bytes", "invalid-avro", "truncated")
        )

    before = refusals()
    wait_until(lambda: refusals() >= before + 2, 30, "the refused dead letter to be retried")
    assert pipe.committed() <= 0
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        dlq_topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "1048588", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in kafka_admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    wait_until(lambda: pipe.committed() == 2, 60, "the commit to pass the poison once it landed")
    dlq = pipe.dlq()
    dlq.wait_for(lambda: bool(dlq.messages), 30, "the poison in the DLQ")
    headers = dict(dlq.messages[0].headers() or [])
    assert headers["dlq.source.offset"] == b"0"
    dlq.close()
