"""Schema Registry mode (setting `schema_registry_url`): our schemas registered, theirs fetched.

Values travel in the Confluent framing (wire/framing.py). On the way out, each schema the
service writes is registered under the topic-name strategy (`<topic>-value`) once, at start,
and every value is its plain-Avro encoding behind that schema's 5-byte prefix. On the way in,
the writer schema is fetched by id (once; confluent-kafka's SchemaRegistryClient) and resolved
to the service's reader schema by Avro rules (wire/codec.py), so producers may evolve their
schema compatibly. A value written with a schema identical to ours (same parsing canonical
form) is read without resolution: its body already is our plain encoding.

Outcomes are told apart because the callers treat them differently: an id the registry does
not know is bad input (DecodeError "unknown-schema-id": dead-lettered), a registry that cannot
answer is an outage (RegistryUnavailable: the ingest pauses), a refused registration stops the
start (SchemaRefused).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

import fastavro
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro.schema import to_parsing_canonical_form

from digest_stream.wire import framing
from digest_stream.wire.codec import DecodeError

if TYPE_CHECKING:
    # Imported where used, in registry mode only: the client pulls in an HTTP stack and
    # OAuth/JOSE libraries (about 85 ms of every start without a registry, `-X importtime`).
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

#: Our defaults for the registry client; `schema_registry_config` overrides them. The client's
#: own retries sleep inside the call (1 s, growing to 20 s), where the ingest cannot serve its
#: consumer group; the ingest's outage backoff (which polls the group) does the waiting instead.
CLIENT_DEFAULTS: Final[Mapping[str, Any]] = {
    "max.retries": 1,
    "retries.wait.ms": 100,
    "retries.max.wait.ms": 500,
    "timeout": 5,
}
#: How long an id the registry said it does not know is remembered as unknown: a flood of bad
#: ids costs one lookup each per period, and a registry that learns the id is asked again.
UNKNOWN_ID_TTL: Final = 60.0
#: Bound on the remembered unknown ids (random prefixes must not grow memory without end).
MAX_UNKNOWN_IDS: Final = 10_000
#: HTTP answers that mean "cannot answer now" (an operator or time fixes them), not "no such id".
_WAIT_STATUSES: Final = frozenset({401, 403, 408, 429})


class RegistryUnavailable(RuntimeError):
    """The schema registry could not answer (unreachable, timing out, 5xx, auth refused)."""


class SchemaRefused(RuntimeError):
    """The registry refused to register one of our schemas (incompatible, or invalid)."""


def _config_key(config: Mapping[str, Any]) -> str:
    return json.dumps(dict(config), sort_keys=True, default=str)


@functools.lru_cache(maxsize=8)
def _client(url: str, config_key: str) -> SchemaRegistryClient:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({**CLIENT_DEFAULTS, **json.loads(config_key), "url": url})


def connect(url: str, config: Mapping[str, Any] | None = None) -> SchemaRegistryClient:
    """The registry client of this URL and client config (one per process, shared by roles)."""
    return _client(url, _config_key(config or {}))


def subject(topic: str) -> str:
    """The subject of a topic's values under the topic-name strategy: `<topic>-value`."""
    from confluent_kafka.schema_registry import topic_subject_name_strategy

    name = topic_subject_name_strategy(SerializationContext(topic, MessageField.VALUE), None)
    return str(name)


def _unavailable(exc: BaseException) -> bool:
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    from httpx2 import TransportError

    if isinstance(exc, SchemaRegistryError):
        status = exc.http_status_code
        return status >= 500 or status in _WAIT_STATUSES or status < 0
    return isinstance(exc, TransportError | OSError)


def _schema_name(schema: Mapping[str, Any]) -> str:
    return f"{schema.get('namespace', '')}.{schema.get('name', '?')}".lstrip(".")


def register(client: SchemaRegistryClient, topic: str, schema: Mapping[str, Any]) -> int:
    """Register one of our schemas under `<topic>-value` (idempotent); its schema id.

    Raises SchemaRefused (one line, naming subject and reason) when the registry refuses it,
    RegistryUnavailable when it cannot answer.
    """
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    name = subject(topic)
    try:
        return int(client.register_schema(name, Schema(json.dumps(schema), "AVRO")))
    except Exception as exc:
        if _unavailable(exc):
            raise RegistryUnavailable(f"schema registry unavailable: {_line(exc)}") from exc
        if not isinstance(exc, SchemaRegistryError):
            raise
        what = "incompatible with" if exc.http_status_code == 409 else "refused by"
        raise SchemaRefused(
            f"the {_schema_name(schema)} schema is {what} subject {name} of the schema "
            f"registry: {_line(exc)}"
        ) from exc


def _line(exc: BaseException) -> str:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    text = exc.error_message if isinstance(exc, SchemaRegistryError) else str(exc)
    return " ".join(str(text).split())[:500]


def _identity(value: bytes) -> bytes:
    return value


def output_frame(
    url: str | None, config: Mapping[str, Any], topic: str, schema: Mapping[str, Any]
) -> Callable[[bytes], bytes]:
    """What turns a plain-Avro value for topic into what goes on the wire.

    Without a registry URL: the value unchanged. With one: the schema is registered now
    (SchemaRefused / RegistryUnavailable at start, not on the hot path) and values get its prefix.
    """
    if not url:
        return _identity
    head = framing.prefix(register(connect(url, config), topic, schema))
    return head.__add__


@dataclass(frozen=True, slots=True)
class WriterSchema:
    """A writer schema fetched by id: its text, or None when it is exactly the reader schema."""

    id: int
    text: str | None


T = TypeVar("T")


class WriterSchemas:
    """Writer schemas by id for one reader schema: fetched once, resolved by the codec.

    `fetch` does the I/O (before a batch is checked); `decode` only reads what was fetched,
    so the ingest's message check stays pure.
    """

    def __init__(
        self,
        client: SchemaRegistryClient,
        reader: Mapping[str, Any],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._reader = to_parsing_canonical_form(fastavro.parse_schema(dict(reader)))
        self._clock = clock
        self._known: dict[int, WriterSchema | DecodeError] = {}
        self._unknown: dict[int, float] = {}  # id -> when it was found unknown

    def missing(self, values: Iterable[bytes | str | None]) -> set[int]:
        """Schema ids named by these framed values and not fetched yet (nor known unknown)."""
        now = self._clock()
        wanted = set()
        for value in values:
            if not isinstance(value, bytes) or not framing.is_framed(value):
                continue
            try:
                schema_id, _body = framing.split(value)
            except framing.FramingError:
                continue  # the check dead-letters it
            if schema_id in self._known:
                continue
            found_unknown = self._unknown.get(schema_id)
            if found_unknown is None or now - found_unknown > UNKNOWN_ID_TTL:
                wanted.add(schema_id)
        return wanted

    def fetch(self, ids: Iterable[int]) -> None:
        """Fetch these writer schemas; RegistryUnavailable when the registry cannot answer."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        for schema_id in sorted(ids):
            try:
                schema = self._client.get_schema(schema_id)
            except Exception as exc:
                if _unavailable(exc):
                    raise RegistryUnavailable(
                        f"schema registry unavailable fetching schema id {schema_id}: {_line(exc)}"
                    ) from exc
                if not isinstance(exc, SchemaRegistryError):
                    raise
                if len(self._unknown) >= MAX_UNKNOWN_IDS:
                    self._unknown.clear()
                self._unknown[schema_id] = self._clock()
                continue
            self._unknown.pop(schema_id, None)
            self._known[schema_id] = self._writer(schema_id, schema)

    def _writer(self, schema_id: int, schema: Schema) -> WriterSchema | DecodeError:
        kind = schema.schema_type or "AVRO"
        if kind != "AVRO":
            return DecodeError("schema-mismatch", f"schema id {schema_id} is {kind}, not Avro")
        text = schema.schema_str or ""
        try:
            canonical = to_parsing_canonical_form(fastavro.parse_schema(json.loads(text)))
        except Exception as exc:  # fastavro's zoo of schema errors, as in codec._parse_writer
            return DecodeError(
                "invalid-writer-schema", f"schema id {schema_id}: {type(exc).__name__}: {exc}"
            )
        return WriterSchema(schema_id, None if canonical == self._reader else text)

    def writer(self, schema_id: int) -> WriterSchema:
        """The fetched writer schema of an id; DecodeError when it is unknown or unusable."""
        found = self._known.get(schema_id)
        if found is None:
            raise DecodeError(
                "unknown-schema-id", f"schema id {schema_id} is unknown to the schema registry"
            )
        if isinstance(found, DecodeError):
            raise DecodeError(found.reason, found.detail)
        return found

    def decode(
        self, value: bytes, decode: Callable[[bytes, str | None], T]
    ) -> tuple[T, bytes | None]:
        """(model, its plain-Avro body if already in our schema) of a framed value.

        `decode(body, writer_schema_text)` is one of codec's decoders. The body comes back
        only when it needs no re-encoding (written with our schema exactly).
        """
        try:
            schema_id, body = framing.split(value)
        except framing.FramingError as exc:
            raise DecodeError(exc.reason, exc.detail) from exc
        writer = self.writer(schema_id)
        if writer.text is None:
            return decode(body, None), body
        return decode(body, writer.text), None


def writer_schemas(
    url: str | None, config: Mapping[str, Any], reader: Mapping[str, Any]
) -> WriterSchemas | None:
    """The writer-schema cache for one reader schema, or None without a registry URL."""
    return WriterSchemas(connect(url, config), reader) if url else None
