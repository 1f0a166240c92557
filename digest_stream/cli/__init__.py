"""The `digest-stream` console entry point: one click group, one module per area of commands."""

from __future__ import annotations

import click

from digest_stream.cli.acls import acls_command
from digest_stream.cli.admin import delete, inspect, replay, stats
from digest_stream.cli.config import config_group
from digest_stream.cli.control import cancel, flush
from digest_stream.cli.devstack import dev
from digest_stream.cli.service import run
from digest_stream.cli.streams import produce, tail, topics


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Digest stream: Kafka events in, batched digests out, state in Redis."""


for command in (
    dev, run, topics, produce, tail, delete, replay, config_group, inspect, stats, flush, cancel,
    acls_command,
):  # fmt: skip
    main.add_command(command)

__all__ = ["main"]
