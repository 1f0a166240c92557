"""The peer of scenario 1c: Quix Streams consuming the events topic into a tumbling window.

Runs in its own virtualenv (quixstreams pins pydantic<2.14 and confluent-kafka<2.13, which the
service cannot use; see `make bench-peer-venv`), so it imports nothing from digest_stream: it
reads the Event schema file directly. Each event is Avro-decoded by Quix's AvroDeserializer and
collected per key (timeline) in a 60 s tumbling window, the nearest Quix equivalent of
accumulating a digest (the payload bytes are hex-encoded first: Quix serialises window state
as JSON, which has no bytes type); window state lives in RocksDB (changelog topics off, so
nothing else is created on the broker). Prints one JSON line: events counted after the first
one, and seconds.

    python bench/peer_quix.py BOOTSTRAP TOPIC GROUP COUNT STATE_DIR
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).resolve().parents[1] / "digest_stream" / "wire" / "schemas" / "event.avsc"


def main(argv: list[str]) -> int:
    from quixstreams import Application  # type: ignore[import-not-found,unused-ignore]
    from quixstreams.models.serializers.avro import (  # type: ignore[import-not-found,unused-ignore]
        AvroDeserializer,
    )

    bootstrap, topic_name, group, count_text, state_dir = argv
    expected = int(count_text)
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        state_dir=state_dir,
        use_changelog_topics=False,
        auto_create_topics=False,
        loglevel="WARNING",
    )
    schema = json.loads(SCHEMA.read_text())
    for field in schema["fields"]:  # read timestamps as plain longs, as the service's codec does
        if isinstance(field["type"], dict):
            field["type"].pop("logicalType", None)
    topic = app.topic(
        topic_name, key_deserializer="str", value_deserializer=AvroDeserializer(schema=schema)
    )
    seen = {"count": 0, "first": 0.0, "last": 0.0}

    def count(_value: Any) -> None:
        seen["count"] += 1
        now = time.perf_counter()
        if seen["count"] == 1:
            seen["first"] = now
        seen["last"] = now
        if seen["count"] >= expected:
            app.stop()

    sdf = app.dataframe(topic)
    sdf = sdf.update(count)
    # Quix keeps window state as JSON: bytes must become text (hex, the cheapest round trip).
    sdf = sdf.apply(lambda event: {**event, "payload": event["payload"].hex()})
    sdf = sdf.tumbling_window(duration_ms=60_000).collect().final()
    app.run()
    print(
        json.dumps({"count": int(seen["count"]) - 1, "seconds": seen["last"] - seen["first"]}),
        flush=True,
    )
    return 0 if seen["count"] >= expected else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
