"""Kafka-side commands: create the topics, send sample events, print digests as they arrive."""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import click
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from digest_stream.cli.common import check_kafka, load_settings, settings_options, stop_flag
from digest_stream.ops.acls import TAIL_GROUP_PREFIX


@contextlib.contextmanager
def _registry_errors_as_one_line(command: str) -> Iterator[None]:
    """A schema registry that refuses our schema or cannot answer: one line and exit 1."""
    from digest_stream.wire.registry import RegistryUnavailable, SchemaRefused

    try:
        yield
    except (SchemaRefused, RegistryUnavailable) as exc:
        click.echo(f"digest-stream {command}: {exc}", err=True)
        sys.exit(1)


@click.group()
def topics() -> None:
    """Manage the service's Kafka topics."""


@topics.command("create")
@click.option("--partitions", default=8, show_default=True, help="Partitions of each topic.")
@click.option("--replication-factor", default=1, show_default=True)
@settings_options
def topics_create(partitions: int, replication_factor: int, **flags: Any) -> None:
    """Create the events, schedule, output and DLQ topics (existing ones are kept)."""
    settings = load_settings(flags)
    from digest_stream.kafka import admin_config

    check_kafka(settings)  # a wrong password is named now, not after 30 s of timeouts
    admin = AdminClient(admin_config(settings))
    names = [settings.events_topic, settings.schedule_topic, settings.output_topic,
             settings.dlq_topic]  # fmt: skip
    wanted = [NewTopic(n, num_partitions=partitions, replication_factor=replication_factor)
              for n in names]  # fmt: skip
    failed = False
    for name, future in admin.create_topics(wanted, request_timeout=30).items():
        try:
            future.result()
            click.echo(f"created {name} ({partitions} partitions)")
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                click.echo(f"exists  {name}")
            else:
                click.echo(f"failed  {name}: {error.str()}", err=True)
                failed = True
    sys.exit(1 if failed else 0)


@click.command()
@click.option("--timelines", default=10, show_default=True, help="Distinct timelines.")
@click.option("--count", default=100, show_default=True, help="Events to send (0 = forever).")
@click.option("--rate", default=20.0, show_default=True, help="Events per second (0 = no limit).")
@click.option("--payload-size", default=200, show_default=True, help="Payload bytes per event.")
@click.option("--prefix", default="demo", show_default=True, help="Timeline name prefix.")
@settings_options
def produce(
    timelines: int, count: int, rate: float, payload_size: int, prefix: str, **flags: Any
) -> None:
    """Send sample events, spread over timelines, at a steady rate."""
    from digest_stream.client import EventProducer

    settings = load_settings(flags)
    check_kafka(settings, topics=(settings.events_topic,))
    stop = stop_flag()
    started = time.monotonic()
    sent = 0
    filler = b"x" * max(0, payload_size - 40)
    with _registry_errors_as_one_line("produce"):
        producer = EventProducer(
            settings.kafka_bootstrap_servers,
            topic=settings.events_topic,
            schema_registry_url=settings.schema_registry_url,
            schema_registry_config=settings.schema_registry_config,
            partitioner=settings.partitioner,
            **settings.kafka_config,
        )
    with producer:
        while not stop.is_set() and (count == 0 or sent < count):
            timeline = f"{prefix}:{sent % timelines}"
            body = f'{{"n":{sent},"at":{time.time():.3f}}}'.encode() + filler
            producer.send(timeline, uuid.uuid4().hex, body[:payload_size] or b"{}")
            sent += 1
            if sent % 1000 == 0:
                click.echo(f"sent {sent} events", err=True)
            if rate > 0:
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        producer.flush()
    click.echo(f"sent {sent} events to {settings.events_topic} over {timelines} timelines")


#: tail's consumer group unless --group names one: fresh each run, so it reads from now (or
#: from the beginning) without taking partitions from anyone. A prefixed group ACL must cover
#: it, or pass --group.
TAIL_GROUP = f"{TAIL_GROUP_PREFIX}<hex>"


@click.command()
@click.option(
    "--group",
    default=None,
    help=f"Consumer group (default: a fresh {TAIL_GROUP}; with Kafka ACLs, one they allow).",
)
@click.option("--from-beginning/--from-now", default=False, show_default=True)
@click.option("--duration", default=0.0, help="Stop after this many seconds (0 = until ^C).")
@click.option(
    "--max", "max_digests", default=0, help="Stop after this many digests (0 = no limit)."
)
@settings_options
def tail(
    group: str | None, from_beginning: bool, duration: float, max_digests: int, **flags: Any
) -> None:
    """Print digests as they arrive: timeline, records, total, dropped, reason, latency."""
    group_given = group is not None
    from digest_stream.client import DigestReader, RegistryUnavailable
    from digest_stream.ops.failures import FailureError, KafkaScope, explain

    settings = load_settings(flags)
    group = group or TAIL_GROUP.replace("<hex>", uuid.uuid4().hex[:8])
    setting = "--group" if group_given else f"--group (tail's default is {TAIL_GROUP})"
    scope = KafkaScope(topic=settings.output_topic, group=group, group_setting=setting)
    check_kafka(settings, topics=(settings.output_topic,), groups={group: setting})
    stop = stop_flag()
    overrides: dict[str, Any] = {
        **settings.kafka_config,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
    }
    deadline = time.monotonic() + duration if duration > 0 else None
    shown = 0
    avro = settings.output_format == "avro"
    # total: the records the digest stood for (dropped ones included); reason: why it went out.
    click.echo(f"{'time':8}  {'timeline':24} {'records':>7} {'total':>7} {'dropped':>7} "
               f"{'part':>5}  {'reason':9} {'latency':>9}  digest id")  # fmt: skip
    with DigestReader(
        settings.kafka_bootstrap_servers,
        group,
        topic=settings.output_topic,
        # JSON digests are never framed: the registry (if any) is the events' only
        schema_registry_url=settings.schema_registry_url if avro else None,
        schema_registry_config=settings.schema_registry_config,
        output_format=settings.output_format,
        **overrides,
    ) as reader:
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            try:
                digest = reader.poll(0.5)
            except RegistryUnavailable as exc:
                click.echo(f"digest-stream tail: {exc}; retrying", err=True)
                stop.wait(1.0)
                continue
            except KafkaException as exc:
                # The reader raises what waiting does not cure (authorization, fatal errors).
                failure = explain(exc, settings, scope)
                if failure is None:
                    raise
                raise FailureError(failure) from exc
            if digest is None:
                continue
            # Latency: from the newest record's event time to now (what a user waits).
            latency = time.time() - digest.end / 1000
            at = datetime.now(UTC).strftime("%H:%M:%S")
            total = "-" if digest.total is None else str(digest.total)  # older producers
            reason = "-" if digest.reason is None else digest.reason.value
            click.echo(
                f"{at:8}  {digest.timeline[:24]:24} {len(digest.records):>7} {total:>7} "
                f"{digest.dropped:>7} {digest.part:>2}/{digest.parts:<2}  {reason:9} "
                f"{latency * 1000:>7.0f}ms  {digest.id}"
            )
            shown += 1
            if max_digests and shown >= max_digests:
                break
