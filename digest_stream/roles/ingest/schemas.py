"""Schema registry mode: the writer schemas a batch names, fetched before the batch is checked.

A registry that cannot answer is an outage, waited out like a store outage: the ingest pauses
its partitions and keeps polling (so it stays in its group), backs off and tries again; no
event is dead-lettered for it and nothing is committed past it. Ids the registry does not
know are not an outage: the check dead-letters their events ("unknown-schema-id").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from confluent_kafka import Message
from prometheus_client import Counter
from tenacity import RetryCallState, Retrying, retry_if_exception_type

from digest_stream.roles.retry import backoff
from digest_stream.roles.runner import Runner, partitions_of
from digest_stream.wire.registry import RegistryUnavailable, WriterSchemas

log = logging.getLogger(__name__)


class SchemaFetcher:
    """Fetches the writer schemas of each batch, pausing the ingest while the registry is down."""

    def __init__(
        self,
        schemas: WriterSchemas,
        runner: Runner,
        errors: Counter,
        seek: Callable[[int, int], None],
    ) -> None:
        self.schemas = schemas
        self._runner = runner
        self._errors = errors
        self._seek = seek  # the ingest's seek (it tells the ledger too)

    def ready(self, messages: Sequence[Message]) -> bool:
        """Fetch what these messages need; False when a stop cut the wait (they were rewound)."""
        missing = self.schemas.missing(m.value() for m in messages)
        if not missing:
            return True
        settings = self._runner.settings
        retrying = Retrying(
            retry=retry_if_exception_type(RegistryUnavailable),
            wait=backoff(settings.retry_backoff_initial, settings.retry_backoff_max),
            stop=lambda _state: self._runner.stopping(),
            sleep=self._runner.wait_serving_group,
            before_sleep=self._down,
            reraise=True,
        )
        try:
            retrying(self.schemas.fetch, missing)
        except RegistryUnavailable:
            # Stopping: these messages were read but not checked. Read them again from the
            # start, so no commit can pass them.
            for partition, batch in partitions_of(messages).items():
                self._seek(partition, batch[0].offset() or 0)
            return False
        finally:
            if self._runner.paused:
                log.info("ingest: schema registry reachable again")
            self._runner.resume()
        return True

    def _down(self, state: RetryCallState) -> None:
        self._errors.inc()
        log.log(
            logging.ERROR if state.attempt_number == 1 else logging.WARNING,
            "ingest: %s; partitions paused, nothing committed; retry %d in %.2fs",
            state.outcome.exception() if state.outcome else "schema registry unavailable",
            state.attempt_number,
            state.next_action.sleep if state.next_action else 0.0,
        )
