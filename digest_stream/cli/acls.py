"""`digest-stream acls`: the Kafka ACLs a principal needs, for the configured names."""

from __future__ import annotations

from typing import Any

import click

from digest_stream.cli.common import load_settings, settings_options
from digest_stream.ops.acls import (
    RUN_ROLES,
    Names,
    acls,
    kafka_acls_lines,
    needs,
    strimzi_kafkauser,
)
from digest_stream.settings import Settings

#: `--for` values beyond the keys of ops.acls.needs(): the service, and everything.
GROUPS = {"run": RUN_ROLES}


def names_of(settings: Settings) -> Names:
    """The ACLs' resources: the settings' topics and groups (literal names)."""
    return Names(
        events=settings.events_topic,
        schedule=settings.schedule_topic,
        output=settings.output_topic,
        dlq=settings.dlq_topic,
        group=settings.group_id,
        delivery_group=settings.delivery_group_id,
    )


def _uses(chosen: tuple[str, ...], table: dict[str, Any]) -> list[str]:
    if "all" in chosen:
        return list(table)
    return [use for c in chosen for use in GROUPS.get(c, (c,))]


@click.command("acls")
@click.option(
    "--principal", default="User:digest-stream", show_default=True, help="Who gets the ACLs."
)
@click.option(
    "--for",
    "uses",
    multiple=True,
    default=("run",),
    show_default=True,
    type=click.Choice(["run", "all", *needs(names_of(Settings.model_construct()))]),
    help="The role(s) or command(s) to cover (repeatable): run = the service (ingest and "
    "delivery), all = every role, command and client.",
)
@click.option(
    "--format",
    "fmt",
    default="kafka-acls",
    show_default=True,
    type=click.Choice(["kafka-acls", "strimzi", "table"]),
    help="kafka-acls.sh command lines, a Strimzi KafkaUser, or a table of what each needs and why.",
)
@click.option(
    "--cluster", default="my-cluster", show_default=True, help="Strimzi: the Kafka cluster's name."
)
@settings_options
def acls_command(
    principal: str, uses: tuple[str, ...], fmt: str, cluster: str, **flags: Any
) -> None:
    """Print the Kafka ACLs the principal needs for the configured topics and groups."""
    settings = load_settings(flags)
    names = names_of(settings)
    table = needs(names)
    chosen = _uses(uses, table)
    if fmt == "table":
        click.echo(f"{'use':22} {'resource':6} {'name':32} {'operation':9} why")
        for use in chosen:
            for need in table[use]:
                click.echo(f"{use:22} {need.resource:6} {need.name:32} {need.operation:9} "
                           f"{need.why}")  # fmt: skip
        return
    merged = acls(names, chosen)
    if fmt == "strimzi":
        user = principal.removeprefix("User:")
        click.echo(strimzi_kafkauser(merged, user, cluster), nl=False)
        return
    for line in kafka_acls_lines(merged, principal):
        click.echo(line)
