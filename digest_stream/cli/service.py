"""`digest-stream run`: the service until a stop signal, then a graceful, bounded stop."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from typing import Any, NoReturn

import click

from digest_stream.cli.common import (
    DEBUG_KEY,
    load_settings,
    on_stop_signals,
    settings_options,
    setup_logging,
)


@click.command()
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
    from digest_stream.ops.failures import one_line

    settings = load_settings(flags)
    setup_logging(settings)
    try:
        chosen = parse_roles(roles)
    except ValueError as exc:
        # One line, not click's usage block: the refusal is about the deployment, not syntax.
        click.echo(f"digest-stream run: --roles {roles}: {exc}", err=True)
        sys.exit(2)
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
        if click.get_current_context().meta.get(DEBUG_KEY):
            raise
        click.echo(f"digest-stream run: cannot start: {one_line(exc, settings)}", err=True)
        sys.exit(1)
    # Poll, not app.wait(timeout): its False means both "no stop yet" and "roles still alive
    # after STOP_TIMEOUT", and only the second must end the process.
    while not app.stopping:
        time.sleep(STOP_POLL)
    finished = app.wait()  # each role gets STOP_TIMEOUT to finish its batch and leave
    if not finished:
        click.echo(
            f"digest-stream run: roles still running {STOP_TIMEOUT:.0f}s after the stop; "
            "exiting without them",
            err=True,
        )
        _exit_now(1)
    if app.failed is not None:
        line = one_line(app.failed, settings)
        click.echo(f"digest-stream run: stopped after an error: {line}", err=True)
        sys.exit(1)


#: Seconds between checks of whether `run` was asked to stop (or a role failed).
STOP_POLL = 0.2


def _exit_now(code: int) -> NoReturn:
    """End the process at once, whatever its threads do: a hung role must not keep it alive."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
