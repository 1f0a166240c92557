"""design.md's control and timeline-state tables, written from ``vocabulary``'s declarations
(a unit test keeps them in sync): ``python -m digest_stream.ops.doc_tables [docs/design.md]``
rewrites them in place, between their ``<!-- name:start -->`` and ``<!-- name:end -->``
markers."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from digest_stream.vocabulary import (
    CONTROL_MESSAGES,
    CONTROL_SPECS,
    STATE_DOCS,
    Argument,
    ControlSpec,
)


def _message(spec: ControlSpec) -> str:
    """The control message's JSON, as design.md writes it."""
    argument = {Argument.NONE: "", Argument.NAME: ', "{}": name', Argument.TIME: ', "{}": seconds'}
    return f'`{{"op": "{spec.sent_as}"{argument[spec.argument].format(spec.field)}}}`'


def _command(spec: ControlSpec) -> str:
    """How the CLI sends it (cli/control.py's control_command)."""
    usage = f"digest-stream {spec.sent_as} TIMELINE"
    if spec.argument is not Argument.NONE:
        bare = any(s.argument is Argument.NONE for s in CONTROL_MESSAGES[spec.sent_as])
        name = spec.field.upper()
        if bare:
            usage += f" --{spec.field} {name}"
        elif spec.argument is Argument.TIME:
            usage += f" {name}` or `--for DURATION"
        else:
            usage += f" {name}"
    return f"`{usage}`" + (" (asks first; `--yes`)" if spec.confirm else "")


def _client(spec: ControlSpec) -> str:
    """How EventProducer sends it."""
    if not spec.client:
        return "no"
    argument = "" if spec.argument is Argument.NONE else f", {spec.field}"
    return f'`control("{spec.sent_as}", timeline{argument})`'


def control_table() -> str:
    """One row per control: its message, what it does, its command and its client call."""
    rows = [
        "| control | message | what it does | CLI | EventProducer |",
        "| --- | --- | --- | --- | --- |",
    ]
    for spec in CONTROL_SPECS.values():
        rows.append(
            f"| `{spec.control}` | {_message(spec)} | {spec.does} | {_command(spec)} "
            f"| {_client(spec)} |"
        )
    return "\n".join(rows)


def state_table() -> str:
    """One row per timeline state, as ``inspect`` shows it."""
    rows = ["| state | meaning |", "| --- | --- |"]
    rows += [f"| `{state}` | {doc} |" for state, doc in STATE_DOCS.items()]
    return "\n".join(rows)


#: The tables by marker name.
TABLES: dict[str, Callable[[], str]] = {"control-table": control_table, "state-table": state_table}


def rewrite(text: str) -> str:
    """``text`` with every table between its markers written afresh; ValueError: a marker
    pair is missing."""
    for name, table in TABLES.items():
        pattern = re.compile(rf"(<!-- {name}:start -->\n)(?:.*?\n)?(<!-- {name}:end -->)", re.S)
        found = pattern.search(text)
        if found is None:
            raise ValueError(f"no <!-- {name}:start --> ... <!-- {name}:end --> markers")
        rows = f"{found.group(1)}{table()}\n{found.group(2)}"
        text = text[: found.start()] + rows + text[found.end() :]
    return text


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/design.md")
    path.write_text(rewrite(path.read_text()))
