"""Service settings: environment (prefix DIGEST_STREAM_), validated once at start."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from digest_stream.store.base import InvalidArgument, TimelinePolicy

ENV_PREFIX = "DIGEST_STREAM_"


class Settings(BaseSettings):
    """Every knob of the service; each field is also an env var and a CLI flag."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", validate_default=True, frozen=True
    )

    # -- connections
    kafka_bootstrap_servers: str = Field(
        "127.0.0.1:9092", description="Kafka bootstrap servers (host:port, comma-separated)."
    )
    kafka_config: dict[str, str] = Field(
        default_factory=dict,
        description="Extra librdkafka properties for every client, as JSON (e.g. SASL/SSL).",
    )
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="Redis URL (redis:// or rediss://)."
    )
    redis_cluster: bool = Field(
        False, description="Treat redis_url as a seed node of a Redis Cluster."
    )
    namespace: str = Field(
        "d", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description="Redis key namespace."
    )

    # -- topics and groups
    events_topic: str = Field("digests.events", description="Input topic of Avro Events.")
    schedule_topic: str = Field("digests.schedule", description="Topic of ScheduleEntries.")
    output_topic: str = Field("digests.output", description="Topic the Digests go to.")
    dlq_topic: str = Field("digests.dlq", description="Dead-letter topic for bad input.")
    group_id: str = Field("digest-stream", description="Consumer group of ingest+scheduler.")
    delivery_group_id: str = Field(
        "digest-stream-delivery", description="Consumer group of the delivery role."
    )

    # -- digest semantics (seconds)
    minimum_delay: float = Field(300.0, ge=0, description="Cool-down after a digest.")
    increment_delay: float = Field(30.0, ge=0, description="Delay added by each new event.")
    maximum_delay: float = Field(1800.0, ge=0, description="Cap on delay after a delivery.")
    ttl: float = Field(3600.0, gt=0, description="TTL of every Redis key (> maximum_delay).")
    capacity: int | None = Field(
        None, ge=1, description="Max records per timeline (oldest dropped); unset = no limit."
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
    batch_size: int = Field(1000, ge=1, description="Max events consumed per batch.")
    batch_timeout: float = Field(0.05, ge=0, description="Max seconds to wait filling a batch.")
    max_event_bytes: int = Field(
        256_000, ge=100, description="Larger input values go to the DLQ as oversize."
    )
    max_event_age: float | None = Field(
        None, gt=0, description="Drop events older than this many seconds; unset = keep all."
    )
    on_state_loss: Literal["replay", "continue"] = Field(
        "replay",
        description="When Redis lost a partition's fence: replay from earliest, or continue.",
    )

    # -- delivery
    max_attempts: int = Field(5, ge=1, description="Publish attempts before dead-lettering.")
    retry_backoff_initial: float = Field(0.1, gt=0, description="First retry delay (s).")
    retry_backoff_max: float = Field(5.0, gt=0, description="Cap on retry delay (s).")
    max_message_bytes: int = Field(
        1_000_000, ge=10_000, description="Largest digest message; bigger ones are split."
    )

    @model_validator(mode="after")
    def _check_policy(self) -> Settings:
        # The one cross-field rule, worded with env names since it has no single field.
        if self.ttl <= self.maximum_delay:
            raise ValueError(
                f"{env_name('ttl')} ({self.ttl}) must exceed "
                f"{env_name('maximum_delay')} ({self.maximum_delay})"
            )
        try:
            self.policy()
        except InvalidArgument as exc:
            raise ValueError(str(exc)) from exc
        return self

    def policy(self) -> TimelinePolicy:
        """The default timeline policy these settings describe."""
        return TimelinePolicy(
            minimum_delay=self.minimum_delay,
            increment_delay=self.increment_delay,
            maximum_delay=self.maximum_delay,
            ttl=self.ttl,
            capacity=self.capacity,
        )


def env_name(field: str) -> str:
    """The environment variable that sets a field."""
    return f"{ENV_PREFIX}{field.upper()}"


def describe_error(error: ValidationError) -> list[str]:
    """One clear line per invalid setting, naming its env var."""
    lines = []
    for item in error.errors():
        loc = item.get("loc") or ()
        msg = str(item.get("msg", "")).removeprefix("Value error, ")
        if loc:
            lines.append(f"invalid setting {env_name(str(loc[0]))}: {msg}")
        else:
            lines.append(f"invalid settings: {msg}")
    return lines


def settings_table() -> str:
    """The README's configuration table, generated from the model so it cannot drift."""
    rows = ["| env var | default | description |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        value = field.get_default(call_default_factory=True)
        default = "" if value is None else f"`{value}`"
        rows.append(f"| `{env_name(name)}` | {default} | {field.description or ''} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(settings_table())
