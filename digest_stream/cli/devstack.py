"""`digest-stream dev`: the local Kafka + store stack (developer tooling).

The store's words and servers are its backend's dev part (dev/parts.py); the help names the
default backend's (the `store` setting is read when a command runs, not at import).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

import click

from digest_stream.dev import stack as devstack
from digest_stream.dev.parts import default_part
from digest_stream.dev.secure import ENV_HELP as SECURE_ENV_HELP
from digest_stream.dev.secure import UP_HELP as SECURE_UP_HELP

T = TypeVar("T")
#: The backend the help speaks of.
_LABEL = default_part().label
_GROUP_HELP = f"A local Kafka + {_LABEL} (+ Schema Registry) stack on loopback, without Docker."
_UP_HELP = f"Start Kafka (KRaft) and {_LABEL} on 127.0.0.1; reuse what already runs."


@click.group(help=_GROUP_HELP)
def dev() -> None:
    """The local stack's commands."""


def _run_stack(action: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except devstack.StackError as exc:
        click.echo(f"digest-stream dev {action}: {exc}", err=True)
        sys.exit(1)


@dev.command("up", help=_UP_HELP)
@click.option("--cluster/--no-cluster", default=False, help=default_part().cluster_help)
@click.option("--kafka/--no-kafka", default=True, help="Start the Kafka broker.")
@click.option(
    "--registry/--no-registry",
    default=False,
    help="Also start a Schema Registry (Apicurio, Confluent-compatible API).",
)
@click.option("--secure/--no-secure", default=False, help=SECURE_UP_HELP)
def dev_up(cluster: bool, kafka: bool, registry: bool, secure: bool) -> None:
    """Start the stack; print its exports."""
    endpoints = _run_stack(
        "up",
        lambda: devstack.up(cluster=cluster, kafka=kafka, registry=registry, secure=secure),
    )
    for line in endpoints.exports(
        cluster or endpoints.store.cluster_running(),
        registry or devstack.registry_running(),
        secure or devstack.secure_running(),
    ):
        click.echo(line)


@dev.command("down")
def dev_down() -> None:
    """Stop exactly the processes `dev up` started."""
    _run_stack("down", devstack.down)


@dev.command("env")
@click.option("--secure", is_flag=True, help=SECURE_ENV_HELP)
def dev_env(secure: bool) -> None:
    """Print shell exports for the running stack (eval "$(digest-stream dev env)")."""
    if secure:
        if not devstack.secure_running():
            click.echo("digest-stream dev env: the secured stack is not running "
                       "(digest-stream dev up --secure)", err=True)  # fmt: skip
            sys.exit(1)
        lines = devstack.secure_exports()
    else:
        endpoints = _run_stack("env", devstack.Endpoints)
        lines = endpoints.exports(
            endpoints.store.cluster_running(),
            devstack.registry_running(),
            devstack.secure_running(),
        )
    for line in lines:
        click.echo(line)


@dev.command("status")
def dev_status() -> None:
    """Show which parts of the stack answer."""
    states = _run_stack("status", devstack.status)
    for name, ok in states.items():
        click.echo(f"{name:14} {'up' if ok else 'down'}")
    sys.exit(0 if _run_stack("status", lambda: devstack.ready(states)) else 1)
