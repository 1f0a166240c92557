"""The `digest-stream` console entry point."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, TypeVar, get_origin

import click
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from pydantic import ValidationError

from digest_stream.dev import stack as devstack
from digest_stream.settings import (
    CONFIG_ENV,
    ConfigFileError,
    Settings,
    config_file,
    describe_error,
)

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def settings_options(command: F) -> F:
    """Add one --flag per setting (flags win over env), generated from the model."""
    for name, info in reversed(list(Settings.model_fields.items())):
        flag = "--" + name.replace("_", "-")
        help_text = f"{info.description} [env DIGEST_STREAM_{name.upper()}]"
        command = click.option(flag, name, default=None, help=help_text)(command)
    return click.option(
        "--config",
        "config",
        default=None,
        type=click.Path(dir_okay=False, path_type=Path),
        help=f"TOML settings file (flags > env > file > defaults) [env {CONFIG_ENV}]",
    )(command)


def _flag_value(name: str, value: Any) -> Any:
    # Flags arrive as text; dict and list settings take JSON, like their env vars.
    if isinstance(value, str) and name in _JSON_FIELDS:
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value  # validation then names the setting
    return value


_JSON_FIELDS = {
    name
    for name, info in Settings.model_fields.items()
    if get_origin(info.annotation) in (dict, list)
}


def on_stop_signals(action: Callable[[signal.Signals], None]) -> None:
    """Run action(signal) on SIGTERM and SIGINT (graceful stop of any long command)."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        action(signal.Signals(signum))

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def stop_flag() -> threading.Event:
    """An event set by SIGTERM/SIGINT, for loops that check it."""
    stop = threading.Event()
    on_stop_signals(lambda _signal: stop.set())
    return stop


def load_settings(flags: dict[str, Any]) -> Settings:
    """Settings from flags, env and the TOML file; invalid ones exit with one line each."""
    given = {
        k: _flag_value(k, v)
        for k, v in flags.items()
        if k in Settings.model_fields and v is not None
    }
    token = config_file.set(flags.get("config"))
    try:
        return Settings(**given)
    except ConfigFileError as exc:
        click.echo(f"digest-stream: {exc}", err=True)
        sys.exit(2)
    except ValidationError as exc:
        for line in describe_error(exc):
            click.echo(f"digest-stream: {line}", err=True)
        sys.exit(2)
    finally:
        config_file.reset(token)


def setup_logging(settings: Settings) -> None:
    """Log lines on stderr in the configured format, with the settings' secrets scrubbed."""
    from digest_stream.ops import logs
    from digest_stream.ops.config import secret_values

    logs.setup(settings.log_level, settings.log_format, secret_values(settings))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Digest stream: Kafka events in, batched digests out, state in Redis."""


@main.group()
def dev() -> None:
    """A local Kafka + Redis stack on loopback, without Docker."""


def _run_stack(action: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except devstack.StackError as exc:
        click.echo(f"digest-stream dev {action}: {exc}", err=True)
        sys.exit(1)


@dev.command("up")
@click.option("--cluster/--no-cluster", default=False, help="Also start a 3-master Redis Cluster.")
@click.option("--kafka/--no-kafka", default=True, help="Start the Kafka broker.")
def dev_up(cluster: bool, kafka: bool) -> None:
    """Start Kafka (KRaft) and Redis on 127.0.0.1; reuse what already runs."""
    endpoints = _run_stack("up", lambda: devstack.up(cluster=cluster, kafka=kafka))
    for line in endpoints.exports(cluster or devstack.cluster_running()):
        click.echo(line)


@dev.command("down")
def dev_down() -> None:
    """Stop exactly the processes `dev up` started."""
    _run_stack("down", devstack.down)


@dev.command("env")
def dev_env() -> None:
    """Print shell exports for the running stack (eval "$(digest-stream dev env)")."""
    for line in devstack.Endpoints().exports(devstack.cluster_running()):
        click.echo(line)


@dev.command("status")
def dev_status() -> None:
    """Show which parts of the stack answer."""
    states = devstack.status()
    for name, ok in states.items():
        click.echo(f"{name:14} {'up' if ok else 'down'}")
    sys.exit(0 if states["kafka"] and states["redis"] else 1)


# --------------------------------------------------------------------------- service


@main.command()
@click.option(
    "--roles",
    default="ingest,scheduler,delivery",
    show_default=True,
    help="Comma-separated subset of ingest,scheduler,delivery.",
)
@settings_options
def run(roles: str, **flags: Any) -> None:
    """Run the service until SIGTERM/SIGINT, then stop gracefully."""
    from digest_stream.app import STOP_TIMEOUT, App, parse_roles

    settings = load_settings(flags)
    setup_logging(settings)
    try:
        chosen = parse_roles(roles)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--roles") from exc
    app = App(settings, roles=chosen)

    def graceful(received: signal.Signals) -> None:
        logging.getLogger("digest_stream").info(
            "%s: finishing in-flight batches, committing, leaving the groups", received.name
        )
        app.stop()

    on_stop_signals(graceful)
    try:
        app.start()
    except Exception as exc:
        click.echo(f"digest-stream run: cannot start: {exc}", err=True)
        sys.exit(1)
    # Poll, not app.wait(timeout): its False means both "no stop yet" and "roles still alive
    # after STOP_TIMEOUT", and only the second must end the process.
    while not app.stopping:
        time.sleep(STOP_POLL)
    finished = app.wait()  # each role gets STOP_TIMEOUT to finish its batch and leave
    _dump_metrics(app)
    if not finished:
        click.echo(
            f"digest-stream run: roles still running {STOP_TIMEOUT:.0f}s after the stop; "
            "exiting without them",
            err=True,
        )
        _exit_now(1)
    if app.failed is not None:
        click.echo(f"digest-stream run: stopped after an error: {app.failed}", err=True)
        sys.exit(1)


#: Seconds between checks of whether `run` was asked to stop (or a role failed).
STOP_POLL = 0.2


def _exit_now(code: int) -> NoReturn:
    """End the process at once, whatever its threads do: a hung role must not keep it alive."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


#: Test hook (not a setting): a path where `run` writes its counters (Prometheus text format)
#: when it stops, so fault-injection tests can account for drops across process lifetimes.
METRICS_DUMP_ENV = "DIGEST_STREAM_TEST_METRICS_FILE"


def _dump_metrics(app: Any) -> None:
    path = os.environ.get(METRICS_DUMP_ENV)
    if not path:
        return
    from prometheus_client import Counter, generate_latest

    # Only the declared counters: live gauges (lag, per-partition stats) need open clients.
    counters = [m for m in vars(app.metrics).values() if isinstance(m, Counter)]

    class _Counters:
        def collect(self) -> Any:
            for counter in counters:
                yield from counter.collect()

    with open(path, "wb") as out:
        out.write(generate_latest(_Counters()))


# --------------------------------------------------------------------------- topics


@main.group()
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


# --------------------------------------------------------------------------- users' side


@main.command()
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
    stop = stop_flag()
    started = time.monotonic()
    sent = 0
    filler = b"x" * max(0, payload_size - 40)
    with EventProducer(
        settings.kafka_bootstrap_servers, topic=settings.events_topic, **settings.kafka_config
    ) as producer:
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


@main.command()
@click.option("--group", default=None, help="Consumer group (default: a fresh one).")
@click.option("--from-beginning/--from-now", default=False, show_default=True)
@click.option("--duration", default=0.0, help="Stop after this many seconds (0 = until ^C).")
@click.option(
    "--max", "max_digests", default=0, help="Stop after this many digests (0 = no limit)."
)
@settings_options
def tail(
    group: str | None, from_beginning: bool, duration: float, max_digests: int, **flags: Any
) -> None:
    """Print digests as they arrive: timeline, records, dropped, latency."""
    from digest_stream.client import DigestReader

    settings = load_settings(flags)
    stop = stop_flag()
    overrides: dict[str, Any] = {
        **settings.kafka_config,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
    }
    deadline = time.monotonic() + duration if duration > 0 else None
    shown = 0
    click.echo(f"{'time':8}  {'timeline':24} {'records':>7} {'dropped':>7} {'part':>5}  "
               f"{'latency':>9}  digest id")  # fmt: skip
    with DigestReader(
        settings.kafka_bootstrap_servers,
        group or f"digest-stream-tail-{uuid.uuid4().hex[:8]}",
        topic=settings.output_topic,
        **overrides,
    ) as reader:
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            digest = reader.poll(0.5)
            if digest is None:
                continue
            # Latency: from the newest record's event time to now (what a user waits).
            latency = time.time() - digest.end / 1000
            at = datetime.now(UTC).strftime("%H:%M:%S")
            click.echo(
                f"{at:8}  {digest.timeline[:24]:24} {len(digest.records):>7} {digest.dropped:>7} "
                f"{digest.part:>2}/{digest.parts:<2}  {latency * 1000:>7.0f}ms  {digest.id}"
            )
            shown += 1
            if max_digests and shown >= max_digests:
                break


# --------------------------------------------------------------------------- operators


@main.command()
@click.argument("timeline")
@click.option("--partition", type=int, default=None, help="Input partition (default: search).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@settings_options
def delete(timeline: str, partition: int | None, yes: bool, **flags: Any) -> None:
    """Delete one timeline: its pending records, open digest and schedule entries."""
    from digest_stream.app import connect_store
    from digest_stream.ops.admin import find_timeline

    settings = load_settings(flags)
    store = connect_store(settings)
    candidates = [partition] if partition is not None else _partitions(settings)
    found = find_timeline(store, candidates, timeline)
    if not found:
        click.echo(f"timeline {timeline} has no state (absent); nothing to delete")
        return
    for p, info in found.items():
        click.echo(
            f"timeline {timeline}: partition {p}, {info.state}, {info.pending} pending records, "
            f"open digest {info.open_digest or '-'} ({info.open_records} records)"
        )
    if not yes:
        click.confirm(f"Delete timeline {timeline}? Its records are lost", abort=True)
    for p in found:
        store.delete(p, timeline)
    click.echo(f"deleted timeline {timeline}")


@main.command()
@click.option("--partition", type=int, required=True, help="Input partition to replay.")
@click.option("--from", "from_offset", type=int, required=True, help="First offset to apply.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@settings_options
def replay(partition: int, from_offset: int, yes: bool, **flags: Any) -> None:
    """Replay an input partition from an offset: reset the fence and the group's offset.

    The ingest group must be inactive (every instance stopped).
    """
    from digest_stream.app import connect_store
    from digest_stream.ops.admin import AdminError, apply_replay, plan_replay

    settings = load_settings(flags)
    store = connect_store(settings)
    try:
        plan = plan_replay(settings, partition, from_offset, store)
        click.echo(plan.describe())
        if not yes:
            click.confirm("Go ahead?", abort=True)
        apply_replay(settings, plan, store)
    except AdminError as exc:
        click.echo(f"digest-stream replay: {exc}", err=True)
        sys.exit(1)
    click.echo(f"partition {partition} replays from offset {from_offset} at the next start")


@main.group("config")
def config_group() -> None:
    """Inspect the effective configuration."""


@config_group.command("show")
@click.option("--json", "as_json", is_flag=True, help="One JSON object of the values (no sources).")
@settings_options
def config_show(as_json: bool, **flags: Any) -> None:
    """Print the effective settings (secrets masked) and, as TOML, where each one came from."""
    from digest_stream.ops.config import masked_settings, setting_sources, to_toml

    settings = load_settings(flags)
    values = masked_settings(settings)
    if as_json:
        click.echo(json.dumps(values, indent=2, sort_keys=True))
        return
    sources = setting_sources(settings, flags)
    click.echo(to_toml(values, sources))


def _partitions(settings: Settings) -> list[int]:
    from digest_stream.kafka import admin_config

    admin = AdminClient(admin_config(settings))
    topic = admin.list_topics(settings.events_topic, timeout=10).topics.get(settings.events_topic)
    if topic is None or topic.error is not None or not topic.partitions:
        click.echo(f"digest-stream: topic {settings.events_topic} not found", err=True)
        sys.exit(1)
    return sorted(topic.partitions)


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


@main.command()
@click.argument("timeline")
@click.option("--partition", type=int, default=None, help="Input partition (default: search).")
@settings_options
def inspect(timeline: str, partition: int | None, **flags: Any) -> None:
    """Show one timeline's state, due time, pending records and open digest."""
    from digest_stream.app import connect_store
    from digest_stream.ops.admin import find_timeline

    settings = load_settings(flags)
    store = connect_store(settings)
    candidates = [partition] if partition is not None else _partitions(settings)
    found = find_timeline(store, candidates, timeline)
    if not found:
        click.echo(f"timeline {timeline} has no state (absent)")
    # Normally one partition; more after the events topic was repartitioned.
    for p, info in found.items():
        click.echo(f"timeline       {info.timeline}")
        click.echo(f"partition      {p}")
        click.echo(f"state          {info.state}")
        click.echo(f"due            {_when(info.due)}")
        click.echo(f"last delivery  {_when(info.last_delivery)}")
        click.echo(f"pending        {info.pending} records")
        click.echo(f"open digest    {info.open_digest or '-'} ({info.open_records} records)")
        click.echo(f"dropped        {info.dropped}")


@main.command()
@settings_options
def stats(**flags: Any) -> None:
    """Per input partition: waiting and ready timelines, oldest due time, fence."""
    from digest_stream.app import connect_store

    settings = load_settings(flags)
    store = connect_store(settings)
    now = time.time()
    click.echo(f"{'partition':>9} {'waiting':>8} {'ready':>6} {'oldest due':>26} "
               f"{'overdue':>9} {'fence':>10}")  # fmt: skip
    totals = [0, 0]
    for p in _partitions(settings):
        s = store.stats(p)
        totals[0] += s.waiting
        totals[1] += s.ready
        overdue = f"{max(0.0, now - s.oldest_due):.1f}s" if s.oldest_due is not None else "-"
        fence = "-" if s.applied_offset is None else str(s.applied_offset)
        click.echo(f"{p:>9} {s.waiting:>8} {s.ready:>6} {_when(s.oldest_due):>26} "
                   f"{overdue:>9} {fence:>10}")  # fmt: skip
    click.echo(f"{'total':>9} {totals[0]:>8} {totals[1]:>6}")


if __name__ == "__main__":
    main()
