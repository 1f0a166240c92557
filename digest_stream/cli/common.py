"""What every command shares: one flag per setting, loading settings, signals, logging."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar, get_origin

import click
from pydantic import ValidationError

from digest_stream.ops.config import describe_error
from digest_stream.settings import (
    CONFIG_ENV,
    ConfigFileError,
    Settings,
    config_file,
)

F = TypeVar("F", bound=Callable[..., Any])

#: Keys of the click context's meta (one dict for the whole invocation): the settings the
#: command loaded and its name, for the one line a failure prints; whether --debug was given.
SETTINGS_KEY = "digest_stream.settings"
COMMAND_KEY = "digest_stream.command"
DEBUG_KEY = "digest_stream.debug"
#: Set to 1 (or pass the global --debug) to see a failure's traceback instead of its line.
DEBUG_ENV = "DIGEST_STREAM_DEBUG"


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


def command_name(context: click.Context) -> str:
    """`digest-stream topics create`, whatever name the program was called by."""
    names: list[str] = []
    while context.parent is not None:
        names.append(context.info_name or "")
        context = context.parent
    return " ".join(["digest-stream", *reversed(names)])


def load_settings(flags: dict[str, Any]) -> Settings:
    """Settings from flags, env and the TOML file; invalid ones exit with one line each."""
    given = {
        k: _flag_value(k, v)
        for k, v in flags.items()
        if k in Settings.model_fields and v is not None
    }
    token = config_file.set(flags.get("config"))
    try:
        settings = Settings(**given)
        context = click.get_current_context(silent=True)
        if context is not None:
            context.meta[SETTINGS_KEY] = settings
            context.meta[COMMAND_KEY] = command_name(context)
        return settings
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


def check_kafka(
    settings: Settings, *, topics: tuple[str, ...] = (), groups: dict[str, str] | None = None
) -> None:
    """Stop the command with one line when Kafka is unreachable, refuses the credentials or
    the topics and groups (instead of librdkafka's silent retries)."""
    from digest_stream.ops import failures, preflight

    failure = preflight.check_kafka(settings, topics=topics, groups=groups)
    if failure is not None:
        raise failures.FailureError(failure)


def event_partitions(settings: Settings) -> list[int]:
    """The events topic's partitions; exits with one line when the topic is missing."""
    from confluent_kafka.admin import AdminClient

    from digest_stream.kafka import admin_config

    check_kafka(settings, topics=(settings.events_topic,))
    admin = AdminClient(admin_config(settings))
    topic = admin.list_topics(settings.events_topic, timeout=10).topics.get(settings.events_topic)
    if topic is None or topic.error is not None or not topic.partitions:
        click.echo(f"digest-stream: topic {settings.events_topic} not found", err=True)
        sys.exit(1)
    return sorted(topic.partitions)


def when(seconds: float | None) -> str:
    """A UTC timestamp with milliseconds, or "-"."""
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
