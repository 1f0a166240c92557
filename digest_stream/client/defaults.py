"""The client's defaults: topic names and the librdkafka properties both classes start from."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

EVENTS_TOPIC: Final = "digests.events"
OUTPUT_TOPIC: Final = "digests.output"

LIBRDKAFKA_LOGGER: Final = logging.getLogger("digest_stream.client.librdkafka")
"""Where librdkafka's own log lines go (instead of raw on stderr); override with `logger=`."""

PRODUCER_DEFAULTS: Final[Mapping[str, Any]] = {
    # Idempotence (which implies acks=all): broker-side retries can neither duplicate nor
    # reorder a timeline's events, and an acknowledged event survives a broker failure.
    "enable.idempotence": True,
    "acks": "all",
    # No "partitioner": EventProducer takes it as its own argument (the `partitioner`
    # setting, DEFAULT_PARTITIONER unless told), so its events and controls agree.
    "client.id": "digest-stream-event-producer",
    "logger": LIBRDKAFKA_LOGGER,
}

CONSUMER_DEFAULTS: Final[Mapping[str, Any]] = {
    # At-least-once: an offset is stored only once the caller is done with the digest (it asks
    # for the next one, commits or closes), and only stored offsets are committed, by
    # librdkafka's periodic auto-commit, on rebalance and on close.
    "enable.auto.commit": True,
    "enable.auto.offset.store": False,
    # A new group starts from the oldest retained digest: nothing published before the first
    # start is lost. Override with "latest" to skip history.
    "auto.offset.reset": "earliest",
    # Eager, like the service's consumers: with cooperative-sticky, librdkafka can leave the
    # member that keeps its partitions committing under a stale generation after a rebalance
    # (ILLEGAL_GENERATION until the next one; confluentinc/librdkafka#4059), so its offsets
    # would freeze and a restart would re-read everything since.
    "partition.assignment.strategy": "range",
    "client.id": "digest-stream-digest-reader",
    "logger": LIBRDKAFKA_LOGGER,
}
