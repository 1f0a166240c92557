"""The `digest-stream` console entry point: one click group, one module per area of commands."""

from __future__ import annotations

import logging
from typing import Any

import click

from digest_stream.cli.acls import acls_command
from digest_stream.cli.admin import delete, inspect, replay, stats
from digest_stream.cli.common import COMMAND_KEY, DEBUG_ENV, DEBUG_KEY, SETTINGS_KEY
from digest_stream.cli.config import config_group
from digest_stream.cli.control import CONTROL_COMMANDS
from digest_stream.cli.devstack import dev
from digest_stream.cli.service import run
from digest_stream.cli.streams import produce, tail, topics

#: Where the service's and the client's librdkafka lines go (digest_stream.kafka, .client).
LIBRDKAFKA_LOGGERS = ("digest_stream.kafka.librdkafka", "digest_stream.client.librdkafka")


class _Main(click.Group):
    """The group that turns any failure of a command into one line and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            if ctx.meta.get(DEBUG_KEY):
                raise
            from digest_stream.ops.failures import explain, one_line

            settings = ctx.meta.get(SETTINGS_KEY)
            found = explain(exc, settings)
            if found is None:
                line = f"{one_line(exc)} (--debug or {DEBUG_ENV}=1 shows the traceback)"
            else:
                line = found.line
            command = ctx.meta.get(COMMAND_KEY, f"digest-stream {ctx.invoked_subcommand}")
            click.echo(f"{command}: {line}", err=True)
            ctx.exit(1)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--debug",
    is_flag=True,
    envvar=DEBUG_ENV,
    help=f"Show a failure's traceback, not just its one line [env {DEBUG_ENV}=1].",
)
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Digest stream: Kafka events in, batched digests out, state in Redis."""
    ctx.meta[DEBUG_KEY] = debug
    if not debug:
        # A command's librdkafka lines would reach stderr through logging's last resort
        # (commands configure no logging): the failure's one line says what they would.
        # `run` logs them through its own handler (setup_logging), rate-limited.
        for name in LIBRDKAFKA_LOGGERS:
            logging.getLogger(name).addHandler(logging.NullHandler())


for command in (
    dev, run, topics, produce, tail, delete, replay, config_group, inspect, stats,
    *CONTROL_COMMANDS, acls_command,
):  # fmt: skip
    main.add_command(command)

__all__ = ["main"]
