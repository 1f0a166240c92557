"""`digest-stream dev`: the local Kafka + Redis stack (developer tooling)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

import click

from digest_stream.dev import stack as devstack

T = TypeVar("T")


@click.group()
def dev() -> None:
    """A local Kafka + Redis (+ Schema Registry) stack on loopback, without Docker."""


def _run_stack(action: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except devstack.StackError as exc:
        click.echo(f"digest-stream dev {action}: {exc}", err=True)
        sys.exit(1)


@dev.command("up")
@click.option("--cluster/--no-cluster", default=False, help="Also start a 3-master Redis Cluster.")
@click.option("--kafka/--no-kafka", default=True, help="Start the Kafka broker.")
@click.option(
    "--registry/--no-registry",
    default=False,
    help="Also start a Schema Registry (Apicurio, Confluent-compatible API).",
)
@click.option(
    "--secure/--no-secure",
    default=False,
    help="Also start a secured Kafka (SASL_SSL, SCRAM, ACLs) and a TLS-only Redis with ACL "
    "users (ports 19192 and 16380; `dev env --secure` prints their settings).",
)
def dev_up(cluster: bool, kafka: bool, registry: bool, secure: bool) -> None:
    """Start Kafka (KRaft) and Redis on 127.0.0.1; reuse what already runs."""
    endpoints = _run_stack(
        "up",
        lambda: devstack.up(cluster=cluster, kafka=kafka, registry=registry, secure=secure),
    )
    for line in endpoints.exports(
        cluster or devstack.cluster_running(),
        registry or devstack.registry_running(),
        secure or devstack.secure_running(),
    ):
        click.echo(line)


@dev.command("down")
def dev_down() -> None:
    """Stop exactly the processes `dev up` started."""
    _run_stack("down", devstack.down)


@dev.command("env")
@click.option(
    "--secure",
    is_flag=True,
    help="The settings of the secured stack instead: SASL_SSL Kafka as the service's user, "
    "rediss:// Redis as the README's ACL user, the library loaded by admin.",
)
def dev_env(secure: bool) -> None:
    """Print shell exports for the running stack (eval "$(digest-stream dev env)")."""
    if secure:
        if not devstack.secure_running():
            click.echo("digest-stream dev env: the secured stack is not running "
                       "(digest-stream dev up --secure)", err=True)  # fmt: skip
            sys.exit(1)
        lines = devstack.secure_exports()
    else:
        lines = devstack.Endpoints().exports(
            devstack.cluster_running(), devstack.registry_running(), devstack.secure_running()
        )
    for line in lines:
        click.echo(line)


@dev.command("status")
def dev_status() -> None:
    """Show which parts of the stack answer."""
    states = devstack.status()
    for name, ok in states.items():
        click.echo(f"{name:14} {'up' if ok else 'down'}")
    sys.exit(0 if states["kafka"] and states["redis"] else 1)
