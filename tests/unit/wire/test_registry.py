"""Schema registry mode without a registry: the framing, the writer-schema cache and the check.

The registry client is a fake here (broker-free); tests/e2e/test_schema_registry.py and
tests/integration/test_schema_registry.py run the same paths against the real one.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.error import SchemaRegistryError

from digest_stream.ops.config import masked_settings, secret_values
from digest_stream.roles.ingest.check import Rejected, Rules, check
from digest_stream.settings import Settings
from digest_stream.store.base import NewRecord
from digest_stream.wire import codec, framing, registry
from digest_stream.wire.models import Event, ScheduleEntry, ScheduleReason
from tests.support.avro import write

NOW = 1_700_000_000.0
EVENT = Event(id="r1", timestamp=int(NOW * 1000), payload=b"p", attributes={"a": "b"})

V2 = {
    **codec.EVENT_SCHEMA,
    "fields": [
        {"name": "source", "type": ["null", "string"], "default": None},
        *reversed(codec.EVENT_SCHEMA["fields"]),
    ],
}


class FakeRegistry:
    """get_schema by id from a dict; `down` makes it fail like an unreachable registry."""

    def __init__(self, schemas: dict[int, Schema]) -> None:
        self.schemas = schemas
        self.calls: list[int] = []
        self.down: BaseException | None = None

    def get_schema(self, schema_id: int) -> Schema:
        self.calls.append(schema_id)
        if self.down is not None:
            raise self.down
        if schema_id not in self.schemas:
            raise SchemaRegistryError(404, 40403, f"schema {schema_id} not found")
        return self.schemas[schema_id]


def _avro(schema: Any) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


def _schemas(fake: FakeRegistry, clock: list[float] | None = None) -> registry.WriterSchemas:
    now = clock or [0.0]
    return registry.WriterSchemas(fake, codec.EVENT_SCHEMA, clock=lambda: now[0])  # type: ignore[arg-type]


def _v2_body(source: str | None = "v2") -> bytes:
    datum = {"id": EVENT.id, "timestamp": EVENT.timestamp, "payload": EVENT.payload,
             "attributes": EVENT.attributes, "source": source}  # fmt: skip
    return write(V2, datum)


def test_the_prefix_is_magic_zero_and_a_big_endian_id() -> None:
    assert framing.prefix(258) == b"\x00\x00\x00\x01\x02"
    assert framing.split(framing.prefix(258) + b"body") == (258, b"body")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (codec.encode_event(EVENT), "not-registry-framed"),  # plain Avro never starts with 0
        (b"", "not-registry-framed"),
        (b"\x00\x00\x01", "truncated"),
        (b"\x01" + bytes(16) + b"body", "unknown-schema-id"),  # a GUID prefix
    ],
)
def test_values_not_in_the_framing_name_why(value: bytes, reason: str) -> None:
    with pytest.raises(framing.FramingError) as info:
        framing.split(value)
    assert info.value.reason == reason


def test_our_own_schema_is_read_without_resolution_and_its_body_kept() -> None:
    fake = FakeRegistry({7: _avro(codec.EVENT_SCHEMA)})
    schemas = _schemas(fake)
    body = codec.encode_event(EVENT)
    value = framing.prefix(7) + body
    schemas.fetch(schemas.missing([value]))
    assert schemas.writer(7).text is None
    assert schemas.decode(value, codec.decode_event) == (EVENT, body)
    assert schemas.missing([value]) == set()  # fetched once
    assert fake.calls == [7]


def test_an_evolved_writer_schema_is_resolved_to_ours() -> None:
    fake = FakeRegistry({9: _avro(V2)})
    schemas = _schemas(fake)
    value = framing.prefix(9) + _v2_body()
    schemas.fetch(schemas.missing([value]))
    event, plain = schemas.decode(value, codec.decode_event)
    assert event == EVENT
    assert plain is None  # must be re-encoded in our schema before it is stored


def test_an_unknown_id_is_remembered_for_a_while_then_asked_again() -> None:
    fake = FakeRegistry({})
    clock = [0.0]
    schemas = _schemas(fake, clock)
    value = framing.prefix(5) + codec.encode_event(EVENT)
    schemas.fetch(schemas.missing([value]))
    with pytest.raises(codec.DecodeError) as info:
        schemas.decode(value, codec.decode_event)
    assert info.value.reason == "unknown-schema-id"
    assert schemas.missing([value]) == set()
    clock[0] = registry.UNKNOWN_ID_TTL + 1
    assert schemas.missing([value]) == {5}


@pytest.mark.parametrize(
    "error",
    [
        httpx2.ConnectError("connection refused"),
        SchemaRegistryError(503, 50301, "unavailable"),
        SchemaRegistryError(401, 40101, "unauthorized"),
    ],
)
def test_a_registry_that_cannot_answer_is_an_outage_not_bad_input(error: Exception) -> None:
    fake = FakeRegistry({7: _avro(codec.EVENT_SCHEMA)})
    fake.down = error
    schemas = _schemas(fake)
    with pytest.raises(registry.RegistryUnavailable):
        schemas.fetch({7})
    fake.down = None
    schemas.fetch({7})  # nothing was remembered from the outage
    assert schemas.writer(7).text is None


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (Schema('{"type": "object"}', "JSON"), "schema-mismatch"),
        (
            _avro({"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}),
            "schema-mismatch",
        ),
        (Schema("{not json", "AVRO"), "invalid-writer-schema"),
    ],
)
def test_unusable_writer_schemas_are_bad_input(schema: Schema, reason: str) -> None:
    fake = FakeRegistry({3: schema})
    schemas = _schemas(fake)
    value = framing.prefix(3) + codec.encode_event(EVENT)
    schemas.fetch({3})
    with pytest.raises(codec.DecodeError) as info:
        schemas.decode(value, codec.decode_event)
    assert info.value.reason == reason


def _rules(schemas: registry.WriterSchemas) -> Rules:
    return Rules(max_event_bytes=10_000, max_event_age=None, carry_headers=frozenset(),
                 schemas=schemas)  # fmt: skip


def test_the_check_stores_our_plain_encoding_whatever_the_producer_wrote() -> None:
    fake = FakeRegistry({7: _avro(codec.EVENT_SCHEMA), 9: _avro(V2)})
    schemas = _schemas(fake)
    schemas.fetch({7, 9})
    plain = codec.encode_event(EVENT)
    for value in (framing.prefix(7) + plain, framing.prefix(9) + _v2_body()):
        record = check(b"t", value, None, 3, NOW, _rules(schemas))
        assert record == NewRecord(timeline="t", id="r1", timestamp=NOW, payload=plain, offset=3)


def test_the_check_dead_letters_plain_avro_and_unknown_ids_in_registry_mode() -> None:
    schemas = _schemas(FakeRegistry({}))
    plain = codec.encode_event(EVENT)
    schemas.fetch({5})
    outcome = check(b"t", plain, None, 3, NOW, _rules(schemas))
    assert isinstance(outcome, Rejected)
    assert outcome.reason == "not-registry-framed"
    outcome = check(b"t", framing.prefix(5) + plain, None, 3, NOW, _rules(schemas))
    assert isinstance(outcome, Rejected)
    assert outcome.reason == "unknown-schema-id"


def test_schedule_entries_decode_plain_and_framed() -> None:
    reason = ScheduleReason.SCHEDULED
    entry = ScheduleEntry(timeline="t", partition=1, scheduled_at=5, reason=reason)
    plain = codec.encode_schedule_entry(entry)
    assert codec.decode_schedule_entry(plain) == entry
    assert codec.decode_schedule_entry(framing.prefix(12) + plain) == entry


def test_without_a_url_nothing_changes_and_no_registry_is_asked() -> None:
    frame = registry.output_frame(None, {}, "topic", codec.DIGEST_SCHEMA)
    assert frame(b"abc") == b"abc"
    assert registry.writer_schemas(None, {}, codec.EVENT_SCHEMA) is None
    assert registry.subject("digests.output") == "digests.output-value"


def test_registry_credentials_are_masked_and_scrubbed() -> None:
    settings = Settings(
        schema_registry_url="https://reg:pw-in-url@registry.example:8081",
        schema_registry_config={"basic.auth.user.info": "user:s3cret-pass", "timeout": 3},
    )
    shown = masked_settings(settings)
    assert "pw-in-url" not in json.dumps(shown)
    assert shown["schema_registry_config"] == {"basic.auth.user.info": "***", "timeout": 3}
    assert {"pw-in-url", "s3cret-pass"} <= set(secret_values(settings))


def test_a_registry_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="schema_registry_url"):
        Settings(schema_registry_url="registry:8081")
