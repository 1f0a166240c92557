"""Service settings: environment (prefix DIGEST_STREAM_), validated once at start."""

from __future__ import annotations

import os
import re
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from digest_stream.store import calendar
from digest_stream.store.backends import StoreChoice, StoreSections
from digest_stream.store.base import NAMESPACE_PATTERN
from digest_stream.store.errors import InvalidArgument
from digest_stream.store.policy import (
    OPTIONS,
    PolicyOverride,
    PolicyResolver,
    TimelinePolicy,
    declare_fields,
    overridden,
    prefix_of,
    prefix_resolver,
)
from digest_stream.wire.formats.base import FormatName
from digest_stream.wire.partitioner import DEFAULT_PARTITIONER, Partitioner

ENV_PREFIX = "DIGEST_STREAM_"
#: Room a digest message needs beside one record: its own fields, the key, carried headers.
MESSAGE_OVERHEAD_BYTES = 16_384
#: The largest ``batch_size``: one store call per partition per batch, so it bounds how long
#: one call holds the store (a batch this size on one new timeline, led whole, tested on Redis
#: and the cluster: tests/integration/store/test_leading.py) and a batch's memory.
MAX_BATCH_SIZE = 10_000
#: A TimelinePolicy field name in one of its error messages (each is also a setting).
_POLICY_FIELD = re.compile(r"\b(?:" + "|".join(spec.name for spec in OPTIONS) + r")\b")
#: A librdkafka property value: confluent-kafka takes strings, numbers and booleans.
KafkaValue = str | bool | int | float
#: Env var naming the optional TOML settings file (also `--config PATH`); not a setting itself.
CONFIG_ENV = f"{ENV_PREFIX}CONFIG"
#: The TOML file of the command being run (set by the CLI's --config); wins over CONFIG_ENV.
config_file: ContextVar[Path | None] = ContextVar("digest_stream_config_file", default=None)


class ConfigFileError(ValueError):
    """The TOML settings file is unreadable or names something that is not a setting."""


class _Sources(BaseSettings):
    """Where settings come from: explicit values (CLI flags) > environment > TOML file >
    defaults."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = config_file.get() or (
            Path(os.environ[CONFIG_ENV]) if os.environ.get(CONFIG_ENV) else None
        )
        if path is None:
            return (init_settings, env_settings)
        return (init_settings, env_settings, InitSettingsSource(settings_cls, read_toml(path)))


class Settings(StoreSections, _Sources):
    """Every knob of the service; each field is also an env var and a CLI flag. The store's
    come first: the ``store`` setting and each backend's section (``store.backends``)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", validate_default=True, frozen=True
    )

    # -- connections
    kafka_bootstrap_servers: str = Field(
        "127.0.0.1:9092", description="Kafka bootstrap servers (host:port, comma-separated)."
    )
    kafka_config: dict[str, KafkaValue] = Field(
        default_factory=dict,
        description="Extra librdkafka properties for every client, as JSON (e.g. SASL/SSL); "
        "values are strings, numbers or booleans, as confluent-kafka takes them.",
    )
    schema_registry_url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="Schema Registry URL (Confluent API; for Apicurio: .../apis/ccompat/v7); "
        "set: events and digests in the Confluent wire format; unset: plain Avro.",
    )
    schema_registry_config: dict[str, str | int | float] = Field(
        default_factory=dict,
        description="Extra Schema Registry client properties, as JSON (e.g. "
        '`{"basic.auth.user.info": "user:secret"}`, `ssl.ca.location`).',
    )
    namespace: str = Field(
        "d",
        min_length=1,
        pattern=NAMESPACE_PATTERN.pattern,
        description="The store's key namespace.",
    )

    # -- topics and groups
    events_topic: str = Field("digests.events", description="Input topic of Avro Events.")
    partitioner: Partitioner = Field(
        DEFAULT_PARTITIONER,
        description="librdkafka partitioner the events topic's producers use (key = timeline): "
        "EventProducer and the CLI produce with it, the service checks events against it. "
        "murmur2_random: Java's default; consistent_random: librdkafka's default "
        "(confluent-kafka, Go, .NET); fnv1a_random: Sarama's. murmur2, consistent and fnv1a "
        "place a timeline as their _random forms do.",
    )
    schedule_topic: str = Field("digests.schedule", description="Topic of ScheduleEntries.")
    output_topic: str = Field("digests.output", description="Topic the Digests go to.")
    dlq_topic: str = Field("digests.dlq", description="Dead-letter topic for bad input.")
    group_id: str = Field("digest-stream", description="Consumer group of ingest+scheduler.")
    delivery_group_id: str = Field(
        "digest-stream-delivery", description="Consumer group of the delivery role."
    )

    # -- digest semantics: one setting per option of the timeline policy, declared (name,
    # type, default, bounds, description) by TimelinePolicy in store/policy.py
    declare_fields(locals())
    overrides: dict[str, PolicyOverride] = Field(
        default_factory=dict,
        description="Per-timeline-prefix policy, as JSON: "
        '`{"mail:p:*": {"minimum_delay": 60, "capacity": 100}}`; longest prefix wins.',
    )

    # -- scheduling
    scheduler_interval: float = Field(0.25, gt=0, description="Seconds between schedule ticks.")
    maintenance_interval: float = Field(
        30.0, gt=0, description="Seconds between maintenance ticks."
    )
    maintenance_timeout: float = Field(
        300.0, gt=0, description="READY for longer than this counts as a lost delivery."
    )

    # -- ingest
    batch_size: int = Field(
        1000,
        ge=1,
        le=MAX_BATCH_SIZE,
        description=f"Max events consumed per batch (at most {MAX_BATCH_SIZE}).",
    )
    batch_timeout: float = Field(
        0.05,
        ge=0,
        description="Max seconds to wait for a batch's first message (not to fill it).",
    )
    max_event_bytes: int = Field(
        256_000, ge=100, description="Larger input values go to the DLQ as oversize."
    )
    max_event_age: float | None = Field(
        None, gt=0, description="Drop events older than this many seconds; unset = keep all."
    )
    direct_leading_edge: bool = Field(
        True,
        description="The ingest opens a quiet timeline's first digest in its add and publishes "
        "it to the output topic itself (one store call and one batch produce per consumed "
        "batch; a failure hands it to delivery under the same id); false = announce it on the "
        "schedule topic for delivery.",
    )
    on_state_loss: Literal["replay", "continue"] = Field(
        "replay",
        description="When the store lost a partition's fence: replay from earliest, or continue.",
    )

    # -- delivery
    max_attempts: int = Field(5, ge=1, description="Publish attempts before dead-lettering.")
    retry_backoff_initial: float = Field(0.1, gt=0, description="First retry delay (s).")
    retry_backoff_max: float = Field(5.0, gt=0, description="Cap on retry delay (s).")
    max_message_bytes: int = Field(
        1_000_000, ge=10_000, description="Largest digest message; bigger ones are split."
    )
    output_format: FormatName = Field(
        "avro",
        description="Digest message format: `avro` (schemas/digest.avsc; registry-framed when "
        "schema_registry_url is set) or `json` (one UTF-8 JSON object per message, same fields, "
        "payloads in base64; never framed).",
    )
    carry_headers: list[str] = Field(
        default_factory=list,
        description='Event header names (JSON list, e.g. `["traceparent"]`) carried '
        "into the digest's headers.",
    )

    # -- operations
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="HTTP port for /metrics, /healthz, /readyz; unset = no server, 0 = any.",
    )
    # Loopback by default: the probes and /metrics answer anyone who reaches the port. Where
    # scrapers and probes come from other hosts (a container, kubelet), set 0.0.0.0 explicitly.
    metrics_host: str = Field(
        "127.0.0.1",
        description="Address the metrics server binds to (0.0.0.0 to serve other hosts).",
    )
    stall_timeout: float = Field(
        300.0, gt=0, description="/healthz fails when a role loop is stuck this long (s)."
    )
    log_format: Literal["human", "json"] = Field(
        "human", description="Log lines as human-readable text or one JSON object each."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Lowest level logged."
    )
    hooks: list[str] = Field(
        default_factory=list,
        description="Lifecycle hook factories to load (JSON list of `module:attribute`).",
    )

    @model_validator(mode="after")
    def _check_sizes(self) -> Settings:
        check_sizes(self)
        return self

    @field_validator("kafka_config")
    @classmethod
    def _one_partitioner(cls, value: dict[str, KafkaValue]) -> dict[str, KafkaValue]:
        # Two places to say it would let the CLI's controls and the events disagree.
        if "partitioner" in value:
            raise ValueError(
                f"set the partitioner with {env_name('partitioner')}, not in kafka_config: "
                "the service, EventProducer and the CLI share that one setting"
            )
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_policy(self) -> Settings:
        check_policies(self)
        return self

    def policy(self) -> TimelinePolicy:
        """The default timeline policy these settings describe."""
        return TimelinePolicy(**{spec.name: getattr(self, spec.name) for spec in OPTIONS})

    def policy_for(self, pattern: str) -> TimelinePolicy:
        """The policy of timelines matching one override pattern."""
        return overridden(self.policy(), self.overrides[pattern])

    def resolver(self) -> PolicyResolver:
        """timeline -> policy: the longest matching override prefix, else the default."""
        return prefix_resolver(self.policy(), self.overrides)


def check_sizes(settings: Settings) -> None:
    """Refuse an event size limit that leaves a digest part no room for one event."""
    # Every event must fit a digest part of its own, with room for the digest's fields and
    # carried headers; otherwise a digest holding it could never be published.
    room = settings.max_message_bytes - MESSAGE_OVERHEAD_BYTES
    if settings.output_format == "json":
        # JSON carries a payload in base64: 4 bytes for every 3. Its escapes (six bytes for a
        # control character) no limit on the Avro size can allow for: the ingest measures an
        # event's real JSON and refuses one over the room (roles/ingest/check.py).
        room = room * 3 // 4
    if settings.max_event_bytes > room:
        raise ValueError(
            f"{env_name('max_event_bytes')} ({settings.max_event_bytes}) must leave "
            f"{MESSAGE_OVERHEAD_BYTES} bytes of room under {env_name('max_message_bytes')} "
            f"({settings.max_message_bytes}) in the {settings.output_format} output format: "
            f"at most {room}"
        )


def check_policies(settings: Settings) -> None:
    """Refuse a default or override policy that breaks a cross-field rule (one line each)."""
    # TimelinePolicy holds every rule across its options (minimum_delay <= maximum_delay <
    # ttl, flush_at <= capacity): an error has no single field, so the default policy's
    # field names are reworded as the settings' env names; an override's keep its own.
    try:
        settings.policy()
    except InvalidArgument as exc:
        raise ValueError(_POLICY_FIELD.sub(lambda m: env_name(m[0]), str(exc))) from exc
    for pattern in settings.overrides:
        try:
            prefix_of(pattern)
        except InvalidArgument as exc:
            raise ValueError(f"{env_name('overrides')}: {exc}") from exc
        try:
            settings.policy_for(pattern)
        except InvalidArgument as exc:
            raise ValueError(f"{env_name('overrides')} {pattern!r}: {exc}") from exc
    for pattern in ("", *settings.overrides):
        _check_recovery(settings, pattern)


def _check_recovery(settings: Settings, pattern: str) -> None:
    # Records must outlive the slowest path back to delivery: a digest due at
    # last_delivery + maximum_delay, stranded READY until maintenance re-announces it
    # (maintenance_timeout, checked every maintenance_interval) and refreshes its TTL.
    policy = settings.policy_for(pattern) if pattern else settings.policy()
    where = f" (in {env_name('overrides')} {pattern!r})" if pattern else ""
    maximum, ttl = env_name("maximum_delay"), env_name("ttl")
    # Quiet hours hold a due time for up to their longest window.
    held, quiet = 0.0, ""
    if policy.quiet_hours is not None:
        held = calendar.longest_quiet(policy.quiet_hours, policy.timezone, time.time())
        quiet = f" + the longest window of {env_name('quiet_hours')} ({held:.0f} s)"
    bound = (
        policy.maximum_delay + held + settings.maintenance_timeout + settings.maintenance_interval
    )
    if policy.ttl <= bound:
        raise ValueError(
            f"{ttl} ({policy.ttl}) must exceed {maximum}{quiet} + "
            f"{env_name('maintenance_timeout')} + {env_name('maintenance_interval')} "
            f"({bound}){where}, or records expire before maintenance re-announces them"
        )
    if policy.schedule is not None:
        # A calendar timeline waits up to the longest gap between two fires.
        gap = calendar.longest_gap(policy.schedule, policy.timezone, time.time())
        bound = gap + held + settings.maintenance_timeout + settings.maintenance_interval
        if policy.ttl <= bound:
            raise ValueError(
                f"{ttl} ({policy.ttl}) must exceed the longest gap of "
                f"{env_name('schedule')} {policy.schedule!r} ({gap:.0f} s){quiet} + "
                f"{env_name('maintenance_timeout')} + {env_name('maintenance_interval')} "
                f"({bound:.0f}){where}, or records expire before their digest"
            )


def read_toml(path: Path) -> dict[str, Any]:
    """Settings from a TOML file (top-level keys are setting names); unknown keys refused."""
    import tomllib

    try:
        data = tomllib.loads(path.read_text("utf-8"))
    except OSError as exc:
        raise ConfigFileError(f"config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"config file {path}: {exc}") from exc
    unknown = sorted(set(data) - set(Settings.model_fields))
    if unknown:
        raise ConfigFileError(f"config file {path}: unknown settings {', '.join(unknown)}")
    return data


def env_name(field: str) -> str:
    """The environment variable that sets a field."""
    return f"{ENV_PREFIX}{field.upper()}"


class _StoreAlone(StoreChoice, _Sources):
    """The ``store`` setting alone, read from where the service reads it."""


def chosen_store() -> str:
    """The backend the ``store`` setting chooses, the other settings unread (the dev stack
    needs no more, and a wrong other setting must not stop it); raises ValueError (pydantic's
    ValidationError, ConfigFileError) for an unknown store or an unreadable TOML file."""
    return _StoreAlone().store
