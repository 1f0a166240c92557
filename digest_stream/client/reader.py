"""DigestReader: decoded digests from the output topic, at-least-once, repeats skipped."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any, Self

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from digest_stream.client.defaults import CONSUMER_DEFAULTS, OUTPUT_TOPIC
from digest_stream.wire import formats
from digest_stream.wire.codec import DIGEST_SCHEMA, DecodeError, decode_digest
from digest_stream.wire.formats import FormatName
from digest_stream.wire.models import Digest
from digest_stream.wire.registry import RegistryUnavailable, writer_schemas

log = logging.getLogger("digest_stream.client")

#: Consumer errors that waiting does not cure: the ACLs refuse the topic or the group.
#: librdkafka would report them again at every metadata refresh and rejoin, forever.
REFUSED = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED})


class UndecodableDigest(DecodeError):
    """A message on the digest topic that is not a valid Digest, with its coordinates.

    Raised by DigestReader.poll. Polling again continues after it (and its offset is committed
    with the next one), so catching this and going on skips the message.
    """

    def __init__(self, error: DecodeError, topic: str, partition: int, offset: int) -> None:
        super().__init__(error.reason, f"{topic}[{partition}]@{offset}: {error.detail}")
        self.topic = topic
        self.partition = partition
        self.offset = offset


def _with_format_hint(error: DecodeError, value: bytes, reading_avro: bool) -> DecodeError:
    """``error``, naming the other output format when the value looks written in it: a
    reader (or ``tail``) whose output_format is not the service's fails on every digest, and
    the codec's own message does not say why."""
    looks_json = value[:1] == b"{"
    if reading_avro and looks_json:
        hint = "it looks like JSON: read it with output_format='json' (DIGEST_STREAM_OUTPUT_FORMAT)"
    elif not reading_avro and not looks_json:
        hint = "it is not JSON: read it with output_format='avro' (DIGEST_STREAM_OUTPUT_FORMAT)"
    else:
        return error
    return DecodeError(error.reason, f"{error.detail} ({hint})")


class _RecentKeys:
    """A bounded LRU set: remembers the most recently seen `capacity` keys."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"dedupe_capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._keys: OrderedDict[tuple[str, int], None] = OrderedDict()

    def seen(self, key: tuple[str, int]) -> bool:
        """Return whether key was seen recently, and remember it as the most recent."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return True
        if self.capacity:
            self._keys[key] = None
            if len(self._keys) > self.capacity:
                self._keys.popitem(last=False)
        return False

    def __len__(self) -> int:
        return len(self._keys)


class DigestReader:
    """Read digests from the output topic as decoded `Digest` models, skipping repeats.

    Delivery is at-least-once: a digest's offset is committed only after the caller is done with
    it, i.e. asks for the next one (`poll`, the next loop iteration), calls `commit`, or closes
    the reader without an exception. The service re-publishes a digest with the same id when a
    delivery is retried; the reader skips a (digest id, part) it already yielded, remembering
    the last `dedupe_capacity` of them (LRU: bounded memory; 0 disables). Together: effectively
    once, within one reader's lifetime. A restarted reader re-reads at most what was not
    committed yet, so downstream that must never see a repeat still dedupes by `Digest.id`.

    `librdkafka_overrides` are librdkafka consumer properties (dotted names, via `**{...}`).
    With `schema_registry_url` (and optional client properties `schema_registry_config`),
    digests are read in the Confluent wire format: each writer schema is fetched by id once
    and resolved to this version's Digest schema. A registry that cannot answer raises
    `RegistryUnavailable` from `poll`, and the message is read again by the next `poll`.
    `output_format` is the service's (`avro` by default; `json`: JSON digests, never framed).
    Not thread-safe: poll and close from one thread.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str,
        topic: str = OUTPUT_TOPIC,
        dedupe_capacity: int = 100_000,
        *,
        schema_registry_url: str | None = None,
        schema_registry_config: Mapping[str, Any] | None = None,
        output_format: FormatName = "avro",
        **librdkafka_overrides: Any,
    ) -> None:
        if output_format != "avro" and schema_registry_url:
            raise ValueError(f"{output_format} digests are never registry-framed")
        # The format the service writes (its output_format): Avro is read here, with the
        # registry's writer schemas when framed; any other by its format.
        self._format = None if output_format == "avro" else formats.choose(output_format)
        self._recent = _RecentKeys(dedupe_capacity)
        self._schemas = writer_schemas(
            schema_registry_url, schema_registry_config or {}, DIGEST_SCHEMA
        )
        config = {**CONSUMER_DEFAULTS, **librdkafka_overrides}
        config["bootstrap.servers"] = bootstrap_servers
        config["group.id"] = group_id
        self.topic = topic
        self._consumer = Consumer(config)
        self._consumer.subscribe([topic])
        # The message last handed to the caller: its offset is stored once they are done.
        self._pending: Message | None = None
        self._closed = False
        self.duplicates_skipped = 0
        """Messages skipped because their (digest id, part) was yielded before."""

    def poll(self, timeout: float = 1.0) -> Digest | None:
        """The next digest not yielded before, or None if none arrives within timeout seconds.

        Marks the previously returned digest as processed. Raises UndecodableDigest for a
        message that is not a valid Digest (polling again continues after it), and
        KafkaException for a fatal error or one the ACLs cause (topic or group authorization
        failed): those do not pass by waiting.
        """
        self._check_open()
        self._release_pending()
        deadline = time.monotonic() + timeout
        while True:
            message = self._consumer.poll(max(0.0, deadline - time.monotonic()))
            if message is None:
                return None
            error = message.error()
            if error is not None:
                if error.fatal() or error.code() in REFUSED:
                    raise KafkaException(error)
                # Transient (a broker restarting, the topic not created yet): librdkafka
                # recovers by itself; report and go on.
                log.warning("digest reader on %s: %s", self.topic, error)
            else:
                digest = self._decode(message)
                if not self._recent.seen((digest.id, digest.part)):
                    self._pending = message
                    return digest
                self.duplicates_skipped += 1
                self._store(message)
            if time.monotonic() >= deadline:
                return None

    def __iter__(self) -> Iterator[Digest]:
        """Yield digests until the reader is closed (break out of the loop, then close)."""
        while not self._closed:
            digest = self.poll(1.0)
            if digest is not None:
                yield digest

    def commit(self) -> None:
        """Mark the digest returned last as processed and commit synchronously."""
        self._check_open()
        self._release_pending()
        self._commit()

    def close(self, *, commit: bool = True) -> None:
        """Leave the group; with commit, the digest returned last counts as processed."""
        if self._closed:
            return
        self._closed = True
        try:
            if commit:
                self._release_pending()
                self._commit()
        except KafkaException as error:
            # A failed final commit means re-reading a few digests after restart, which
            # at-least-once allows; it must not stop the close.
            log.warning("digest reader on %s: final commit failed: %s", self.topic, error)
        finally:
            self._pending = None
            self._consumer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Leaving on an exception: the last digest was probably not handled; let it come back.
        self.close(commit=exc_type is None)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("DigestReader is closed")

    def _decode(self, message: Message) -> Digest:
        value = message.value() or b""
        try:
            if self._format is not None:
                return self._format.decode(value)
            if self._schemas is None:
                return decode_digest(value)
            self._fetch_schema(message, value)
            return self._schemas.decode(value, decode_digest)[0]
        except DecodeError as error:
            # Pending like a good message: if the caller goes on, its offset gets committed.
            self._pending = message
            raise UndecodableDigest(
                _with_format_hint(error, value, self._format is None),
                message.topic() or self.topic,
                _int(message.partition()),
                _int(message.offset()),
            ) from error

    def _fetch_schema(self, message: Message, value: bytes) -> None:
        assert self._schemas is not None
        try:
            self._schemas.fetch(self._schemas.missing([value]))
        except RegistryUnavailable:
            # Not processed: the next poll reads this message again.
            self._consumer.seek(
                TopicPartition(
                    message.topic() or self.topic, _int(message.partition()), _int(message.offset())
                )
            )
            raise

    def _release_pending(self) -> None:
        if self._pending is not None:
            message, self._pending = self._pending, None
            self._store(message)

    def _store(self, message: Message) -> None:
        try:
            self._consumer.store_offsets(message=message)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() in (
                KafkaError._STATE,
                KafkaError._UNKNOWN_PARTITION,
            ):
                # The partition was revoked meanwhile: its new owner re-reads from the last
                # commit (at-least-once), nothing to store here any more.
                log.info("digest reader: offset of a revoked partition not stored: %s", error)
                return
            raise

    def _commit(self) -> None:
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError._NO_OFFSET:
                return  # nothing stored since the last commit
            raise


def _int(value: int | None) -> int:
    return -1 if value is None else value
