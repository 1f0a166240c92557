"""Control messages on the events topic: flush or cancel a timeline, in order with its events.

A control message is a message of the events topic keyed by its timeline, like an event, so
it lands on the timeline's partition and the partition's owner applies it between the events
before and after it. Its value is

    MAGIC | UTF-8 JSON {"op": <op>, <field>: <argument>}   (the argument only when it has one)

with the ops, fields and argument kinds that ``vocabulary.CONTROL_SPECS`` declares (today
``{"op": "flush" | "cancel", "record": <record id>}``, "record" optional for cancel).

MAGIC starts with byte 0xFF. An Avro Event never starts with an odd byte (its first field, the
id, is a non-empty string whose length is an even zig-zag varint) and a schema-registry framed
value starts with 0x00, so no event can be taken for a control message: the ingest spends one
`startswith` per message on telling them apart. A consumer that only knows Events sees an
undecodable value (a service older than this feature dead-letters it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Final

from digest_stream.vocabulary import CONTROL_MESSAGES, Argument, ControlSpec, control_of

MAGIC: Final = b"\xffDSC"
"""The first bytes of every control message value."""

#: A control message's ``op``: one of OPERATIONS.
Operation = str
OPERATIONS: Final[tuple[Operation, ...]] = tuple(CONTROL_MESSAGES)
MAX_CONTROL_BYTES: Final = 4096
#: Every argument's key, of any control.
_FIELDS: Final = frozenset(s.field for specs in CONTROL_MESSAGES.values() for s in specs if s.field)


@dataclass(frozen=True, slots=True)
class Control:
    """One control message: its op and its argument (a cancel's record id; None: none)."""

    op: Operation
    argument: str | float | None = None

    @property
    def record(self) -> str | None:
        """The argument when it is a name (a cancel's record id)."""
        return self.argument if isinstance(self.argument, str) else None

    @property
    def spec(self) -> ControlSpec:
        """The control it is (its op and whether it has an argument)."""
        return control_of(self.op, self.argument is not None)


def encode(control: Control) -> bytes:
    """The value of a control message."""
    spec = control.spec
    body: dict[str, str | float] = {"op": control.op}
    if control.argument is not None:
        body[spec.field] = control.argument
    return MAGIC + json.dumps(body, separators=(",", ":")).encode("utf-8")


def decode(value: bytes) -> Control:
    """Parse a control message value (starting with MAGIC); ValueError when malformed."""
    if len(value) > MAX_CONTROL_BYTES:
        raise ValueError(f"control message is {len(value)} bytes, over {MAX_CONTROL_BYTES}")
    try:
        body = json.loads(value[len(MAGIC) :].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"control message is not UTF-8 JSON: {exc}") from exc
    if not isinstance(body, dict) or not isinstance(body.get("op"), str):
        raise ValueError(f"control message op must be one of {OPERATIONS}, got {body!r}")
    op = body["op"]
    fields = {s.field for s in CONTROL_MESSAGES.get(op, ()) if s.field}
    # Another control's argument is refused; keys no control declares are ignored.
    if any(body.get(field) is not None for field in _FIELDS - fields):
        raise ValueError(f"control message {op} takes no {sorted(_FIELDS - fields)}: {body!r}")
    argument = next((body[field] for field in fields if body.get(field) is not None), None)
    spec = control_of(op, argument is not None)
    if argument is not None and not is_argument(spec.argument, argument):
        raise ValueError(f"control message {spec.field} must be a {spec.argument}: {argument!r}")
    return Control(op, argument)


def is_argument(kind: Argument, argument: object) -> bool:
    """Whether a decoded argument is of its kind (a name: text; a time: a finite number >= 0)."""
    if kind is Argument.TIME:
        return (
            isinstance(argument, (int, float))
            and not isinstance(argument, bool)
            and math.isfinite(argument)
            and argument >= 0
        )
    return isinstance(argument, str)
