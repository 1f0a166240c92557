"""output_format=json through the real service: digests as JSON objects, read back by the
users' DigestReader, split into parts and with carried headers like Avro ones."""

from __future__ import annotations

import json

from click.testing import CliRunner

from digest_stream.cli import main
from digest_stream.client import DigestReader
from digest_stream.wire.models import Digest, DigestReason
from tests.support import unique, wait_until
from tests.support.kafka import send_events
from tests.support.pipeline import PipelineFactory, cli_flags


def test_the_service_publishes_json_digests_that_the_reader_reads_back(
    pipeline_factory: PipelineFactory,
) -> None:
    pipe = pipeline_factory(
        partitions=1, minimum_delay=3.0, increment_delay=0.0, maximum_delay=3.0,
        output_format="json", max_message_bytes=20_000, max_event_bytes=2_000,
        carry_headers=["traceparent"],
    )  # fmt: skip
    service = pipe.process()  # the real CLI: the format comes from its environment
    out = pipe.output()
    timeline = unique("json")
    traceparent = ("traceparent", b"00-" + b"a" * 51)
    send_events(pipe.settings, timeline, ids=["r0"], headers=[traceparent])
    out.wait_for(lambda: len(out.messages) == 1, 60, "the immediate first digest")
    # Within the cool-down: one digest of 60 records of ~1 KB (base64) each, over 20 KB.
    many = [f"r{n:02d}" for n in range(1, 61)]
    send_events(pipe.settings, timeline, ids=many, headers=[traceparent], payload=bytes(750))
    out.wait_for(lambda: set(many) <= out.record_ids(), 60, "the cool-down digest's parts")
    assert service.popen.poll() is None, service.log()

    for message in out.messages:
        value = message.value() or b""
        assert len(value) + len(timeline) <= 20_000
        assert isinstance(json.loads(value), dict)  # one JSON object per message, unframed
        assert message.headers() == [traceparent]
    first, *parts = out.digests
    assert ([r.id for r in first.records], first.reason) == (["r0"], DigestReason.IMMEDIATE)
    assert len(parts) > 1
    assert [(p.part, p.parts) for p in parts] == [(n, len(parts)) for n in range(1, len(parts) + 1)]
    assert {(p.id, p.reason, p.total) for p in parts} == {(parts[0].id, DigestReason.COOLDOWN, 60)}
    assert [r.id for p in parts for r in p.records] == many[::-1]  # newest first across parts
    assert (first.next_delivery_at or 0) > first.opened_at
    out.close()

    reader = DigestReader(
        pipe.settings.kafka_bootstrap_servers,
        unique("json-reader"),
        topic=pipe.settings.output_topic,
        output_format="json",
    )
    got: list[Digest] = []

    def read_all() -> bool:
        digest = reader.poll(0.5)
        if digest is not None:
            got.append(digest)
        return len(got) >= 1 + len(parts)

    with reader:
        wait_until(read_all, 60, "the digests through DigestReader", interval=0)
    assert got == [first, *parts]

    # `tail` follows the setting: the same digests, one row each.
    flags = [*cli_flags(pipe.settings), "--output-format", "json"]
    tailed = CliRunner().invoke(
        main, ["tail", "--from-beginning", "--max", str(len(got)), "--duration", "60", *flags]
    )
    assert tailed.exit_code == 0, tailed.output
    rows = [line.split() for line in tailed.output.splitlines()[1:] if line.strip()]
    assert [(row[1], row[-1]) for row in rows] == [(timeline, d.id) for d in got]
    assert service.stop() == 0, service.log()
