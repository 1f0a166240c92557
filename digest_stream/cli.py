"""The `digest-stream` console entry point."""

from __future__ import annotations

import sys

import click

from digest_stream import devstack


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Digest stream: Kafka events in, batched digests out, state in Redis."""


@main.group()
def dev() -> None:
    """A local Kafka + Redis stack on loopback, without Docker."""


def _run_stack(action: str, fn: object) -> None:
    try:
        assert callable(fn)
        fn()
    except devstack.StackError as exc:
        click.echo(f"digest-stream dev {action}: {exc}", err=True)
        sys.exit(1)


@dev.command("up")
@click.option("--cluster/--no-cluster", default=False, help="Also start a 3-master Redis Cluster.")
@click.option("--kafka/--no-kafka", default=True, help="Start the Kafka broker.")
def dev_up(cluster: bool, kafka: bool) -> None:
    """Start Kafka (KRaft) and Redis on 127.0.0.1; reuse what already runs."""
    _run_stack("up", lambda: devstack.up(cluster=cluster, kafka=kafka))
    for line in devstack.Endpoints().exports(cluster or devstack.cluster_running()):
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


if __name__ == "__main__":
    main()
