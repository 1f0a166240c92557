"""`digest-stream config`: inspect the effective configuration."""

from __future__ import annotations

import json
from typing import Any

import click

from digest_stream.cli.common import load_settings, settings_options


@click.group("config")
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
