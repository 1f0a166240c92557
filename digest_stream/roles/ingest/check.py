"""Check: a batch taken from Kafka becomes, per partition, the records the store will accept.

- ``check``, pure: one consumed message becomes a record, a rejection, or nothing (too old);
- ``Checker``: a taken batch, by partition, into ``Batch``es (apply.py), rejections
  dead-lettered, too-old events counted, one key per partition batch sampled against the
  partitioner setting (``PlacementCheck``) and, in registry mode, the writer schemas fetched
  first (``SchemaFetcher``);
- ``output_room``: the output format's share of the check (what one event may take in a digest);
- urgency (``urgent.py``): a record is marked urgent by its timeline's ``urgent_when``.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from confluent_kafka import Message
from prometheus_client import Counter
from tenacity import RetryCallState, Retrying, retry_if_exception_type

from digest_stream.roles.ingest.apply import Batch
from digest_stream.roles.ingest.commit import DeadLetterLane, Ledger
from digest_stream.roles.ingest.topic import TopicProbe
from digest_stream.roles.ingest.urgent import UrgentRules, is_urgent
from digest_stream.roles.retry import backoff
from digest_stream.roles.runner import Runner
from digest_stream.settings import MESSAGE_OVERHEAD_BYTES, Settings, env_name
from digest_stream.store import limits, validate
from digest_stream.store.base import NewRecord
from digest_stream.store.errors import InvalidArgument
from digest_stream.vocabulary import Argument
from digest_stream.wire import codec, control, envelope, formats
from digest_stream.wire.event_head import EventHead, decode_event_head
from digest_stream.wire.models import MAX_TIMELINE_LENGTH, Event, validate_timeline
from digest_stream.wire.partitioner import Partitioner, partition_for
from digest_stream.wire.registry import RegistryUnavailable, WriterSchemas

log = logging.getLogger(__name__)

#: A NewRecord made from all seven of its fields, without the named tuple's generated __new__
#: (a Python-level call: about a tenth of the check's time; the figures: docs/benchmarks.md).
_record_of_all_fields = tuple.__new__

Headers = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None

# A record id of at most this many characters is within the store's byte limit whatever they
# are (UTF-8 takes at most 4 bytes per character), so the common id needs no encode to check.
_SURELY_SHORT_ID = limits.MAX_NAME_BYTES // 4


@dataclass(frozen=True, slots=True)
class Rejected:
    """Bad input: dead-lettered with this reason (the DLQ header) and detail."""

    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class TooOld:
    """Older than ``max_event_age``: dropped and counted, not dead-lettered."""


TOO_OLD = TooOld()


@dataclass(frozen=True, slots=True)
class OutputRoom:
    """What one event may take in a digest record of the output format."""

    format: str  # its name, for the rejection's detail
    room: int  # bytes a digest message keeps for one event (max_message_bytes less overhead)
    surely_fits: int  # an event of at most this many bytes fits: it is not measured
    measure: Callable[[bytes], int]  # the format's event_size (may raise codec.DecodeError)


#: No output limit beyond max_event_bytes (tests and benchmarks of the check alone).
UNLIMITED = OutputRoom("any", sys.maxsize, sys.maxsize, len)


@dataclass(frozen=True, slots=True)
class Rules:
    """What the check needs from the settings."""

    max_event_bytes: int
    max_event_age: float | None
    carry_headers: frozenset[str]
    # Schema registry mode: the writer schemas the batch names, fetched before the check.
    schemas: WriterSchemas | None = None
    output: OutputRoom = UNLIMITED
    # Some policy has urgent_when: each event's timeline is asked for its rule (None: no
    # policy has it, and no event's attributes are read).
    urgent: UrgentRules | None = None


def check(
    key: bytes | str | None,
    value: bytes | str | None,
    headers: Headers,
    offset: int,
    now: float,
    rules: Rules,
) -> NewRecord | Rejected | TooOld:
    """Decode and check one message's parts; the store will accept what this returns."""
    if not key:
        return Rejected("missing-key", "the Kafka key (timeline) is empty")
    try:
        if type(key) is bytes and len(key) <= MAX_TIMELINE_LENGTH:
            # Hot path: non-empty, short enough in bytes, and strict UTF-8 is valid text.
            timeline = str(key, "utf-8")
        else:  # the model's own check, for its exact message
            timeline = validate_timeline(key.decode("utf-8") if isinstance(key, bytes) else key)
    except (UnicodeDecodeError, ValueError) as exc:
        return Rejected("invalid-key", str(exc))
    if not value or not isinstance(value, bytes):
        return Rejected("missing-value", "the message has no value")
    if value.startswith(control.MAGIC):  # the one check ordinary events pay for controls
        return _control(timeline, value, offset, now)
    if len(value) > rules.max_event_bytes:
        return Rejected(
            "oversize",
            f"value is {len(value)} bytes, over DIGEST_STREAM_MAX_EVENT_BYTES "
            f"({rules.max_event_bytes})",
        )
    try:
        event: EventHead | Event
        if rules.schemas is None:
            # Only the id and timestamp: the payload and attributes stay the event's own bytes.
            event = decode_event_head(value)
        else:
            full, plain = rules.schemas.decode(value, codec.decode_event)
            # The store keeps our plain encoding whatever schema the producer wrote with,
            # so delivery reads every record the same way.
            value = plain if plain is not None else codec.encode_event(full)
            event = full
    except codec.DecodeError as exc:
        return Rejected(exc.reason, exc.detail)
    output = rules.output
    if len(value) > output.surely_fits:  # only a large event can outgrow its message
        rejected = _outgrown(value, output)
        if rejected is not None:
            return rejected
    if len(event.id) > _SURELY_SHORT_ID:
        try:
            # The store's own rule: a batch the store would refuse must never be sent to it.
            validate.name(event.id, "record id")
        except InvalidArgument as exc:
            return Rejected("invalid-id", str(exc))
    timestamp = event.timestamp / 1000.0
    if rules.max_event_age is not None and now - timestamp > rules.max_event_age:
        return TOO_OLD
    # The stored payload is the event's own encoding: delivery decodes it into a record.
    # no policy with urgent_when: one test (False), nothing of the event read
    urgent = rules.urgent is not None and is_urgent(rules.urgent, timeline, event, value)
    carry = rules.carry_headers
    payload = envelope.wrap(headers, carry, value) if carry else value
    return _record_of_all_fields(
        NewRecord, (timeline, event.id, timestamp, payload, offset, None, urgent)
    )


def _outgrown(value: bytes, output: OutputRoom) -> Rejected | None:
    """An event whose fields the output format makes larger than a digest message keeps for
    one event (JSON's escapes: a control character takes six bytes): a digest holding it could
    never be published, so it is refused here, as oversize."""
    try:
        size = output.measure(value)
    except codec.DecodeError as exc:
        return Rejected(exc.reason, exc.detail)
    if size <= output.room:
        return None
    return Rejected(
        "oversize",
        f"its record takes {size:,} bytes in the {output.format} output format, over the "
        f"{output.room:,} a digest message keeps for one event (DIGEST_STREAM_MAX_MESSAGE_BYTES "
        "less its own fields, key and carried headers)",
    )


#: The record id a control without one carries (never looked at by the store).
CONTROL_ID = "control"


def _control(timeline: str, value: bytes, offset: int, now: float) -> NewRecord | Rejected:
    """A control message: a store control operation at its offset, or a rejection."""
    try:
        parsed = control.decode(value)
        spec = parsed.spec
        carried = spec.carried(parsed.argument)
        if spec.argument is Argument.NAME:  # (a time is checked by decode)
            validate.name(carried, f"{spec.field} id")
    except (ValueError, InvalidArgument) as exc:
        return Rejected("invalid-control", str(exc))
    return NewRecord(timeline, carried or CONTROL_ID, now, b"", offset, spec.control)


def output_room(settings: Settings) -> OutputRoom:
    """What one event may take in a digest record of the output format (``check``'s rule)."""
    # Unframed: a registry's 5-byte prefix is the digest's own, in MESSAGE_OVERHEAD_BYTES.
    output = formats.choose(settings.output_format)
    room = settings.max_message_bytes - MESSAGE_OVERHEAD_BYTES
    return OutputRoom(output.name, room, output.surely_fits(room), output.event_size)


def partitions_of(messages: Iterable[Message]) -> dict[int, list[Message]]:
    """Messages grouped by partition, in arrival order."""
    by_partition: dict[int, list[Message]] = {}
    for message in messages:
        by_partition.setdefault(message.partition() or 0, []).append(message)
    return by_partition


class Checker:
    """Checks each batch the ingest takes, partition by partition (role thread)."""

    def __init__(
        self,
        rules: Rules,
        placement: PlacementCheck,
        dead_letters: DeadLetterLane,
        dropped: Counter,
        ledger: Ledger,
        schemas: SchemaFetcher | None,
        now: Callable[[], float],
    ) -> None:
        self._rules = rules
        self._placement = placement
        self._dead_letters = dead_letters
        self._dropped = dropped  # events_dropped, by reason
        self._ledger = ledger
        self._schemas = schemas
        self._now = now

    def batches(self, messages: list[Message]) -> list[Batch]:
        """Check messages, by partition (bad ones are dead-lettered here)."""
        if self._schemas is not None:
            messages = self._with_schemas(self._schemas, messages)
            if not messages:
                return []  # stopping, or all given away or moved during the wait
        now = self._now()  # after a registry outage's wait: the age is checked against now
        rules = self._rules
        carry = bool(rules.carry_headers)  # headers are read only when some are carried
        batches = []
        too_old = 0  # counted once per batch: a backlog past max_event_age is all too old
        for partition, batch in partitions_of(messages).items():
            self._placement.sample(partition, batch, now)
            records: list[NewRecord] = []
            for message in batch:
                outcome = check(
                    message.key(), message.value(), message.headers() if carry else None,
                    message.offset() or 0, now, rules,
                )  # fmt: skip
                if type(outcome) is NewRecord:  # the hot path: one type test per message
                    records.append(outcome)
                elif isinstance(outcome, Rejected):
                    self._dead_letters.send(message, outcome.reason, outcome.detail)
                else:
                    too_old += 1
            batches.append(Batch(partition, records, batch[0].offset() or 0,
                                 batch[-1].offset() or 0, now))  # fmt: skip
        if too_old:
            self._dropped.labels(reason="max_age").inc(too_old)
        return batches

    def _with_schemas(self, fetcher: SchemaFetcher, messages: list[Message]) -> list[Message]:
        """Registry mode: fetch the batch's writer schemas first, waiting out an outage."""
        if not fetcher.ready(messages):
            return []  # stopping; rewound
        # A rebalance during an outage wait: messages of partitions given away or moved are
        # read again by their owner, so they are neither checked nor dead-lettered here.
        ledger = self._ledger
        return [
            m for m in messages
            if ledger.owns(m.partition() or 0) and ledger.moved_to(m.partition() or 0) is None
        ]  # fmt: skip


WARN_EVERY: Final = 60.0
"""Seconds between two WARNING lines of the placement check (its counter counts every miss)."""


class PlacementCheck:
    """Do events arrive on the partition the `partitioner` setting picks for their key? Sampled.

    A timeline's state lives on the partition its events arrive on, and a control acts only on
    the partition it is read from. Events from a producer that partitions otherwise
    (librdkafka's default, CRC32, where the setting says murmur2) still work, but controls sent
    by EventProducer (or by anyone following the setting) land elsewhere. This check makes that
    visible: a counter and a WARNING naming the setting. One message per partition batch is
    hashed, at a rotating position, so the hot path pays one hash per batch, not one per event;
    a misconfigured producer puts most of its keys elsewhere and is caught within a few batches.
    """

    def __init__(
        self, partitioner: Partitioner, topics: TopicProbe, missed: Counter, topic: str
    ) -> None:
        self._partitioner = partitioner
        self._topics = topics
        self._missed = missed
        self._topic = topic
        self._turn = 0
        self._warned_at = -math.inf
        self._since_warning = 0

    def sample(self, partition: int, batch: Sequence[Message], now: float) -> None:
        """Check one message of this partition's batch (the topic's size must be known)."""
        count = self._topics.partitions
        if not count or not batch:
            return  # the broker never described the topic: nothing to compare with
        self._turn += 1
        key = batch[self._turn % len(batch)].key()
        if not key:
            return  # dead-lettered anyway
        expected = partition_for(self._partitioner, key, count)
        if expected == partition:
            return
        self._missed.inc()
        self._since_warning += 1
        if now - self._warned_at < WARN_EVERY:
            return
        log.warning(
            "topic %s: an event of timeline %r arrived on partition %d, but %s=%s puts it on "
            "partition %d (%d such sample(s) since the last warning): its producer uses "
            "another partitioner (librdkafka's default is consistent_random). Its timeline "
            "works, but flush/cancel sent by EventProducer land on another partition and do "
            "nothing; set %s to the producers' partitioner (or theirs to this one)",
            self._topic, key.decode("utf-8", "replace"), partition, env_name("partitioner"),
            self._partitioner, expected, self._since_warning, env_name("partitioner"),
        )  # fmt: skip
        self._warned_at, self._since_warning = now, 0


class SchemaFetcher:
    """Schema registry mode: the writer schemas a batch names, fetched before it is checked.

    A registry that cannot answer is an outage, waited out like a store outage: the ingest
    pauses its partitions and keeps polling (so it stays in its group), backs off and tries
    again; no event is dead-lettered for it and nothing is committed past it. Ids the registry
    does not know are not an outage: the check dead-letters their events ("unknown-schema-id").
    """

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
