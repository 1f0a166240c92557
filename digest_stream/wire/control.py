"""Control messages on the events topic: flush or cancel a timeline, in order with its events.

A control message is a message of the events topic keyed by its timeline, like an event, so
it lands on the timeline's partition and the partition's owner applies it between the events
before and after it. Its value is

    MAGIC | UTF-8 JSON {"op": "flush" | "cancel", "record": <record id>}   ("record" optional)

MAGIC starts with byte 0xFF. An Avro Event never starts with an odd byte (its first field, the
id, is a non-empty string whose length is an even zig-zag varint) and a schema-registry framed
value starts with 0x00, so no event can be taken for a control message: the ingest spends one
`startswith` per message on telling them apart. A consumer that only knows Events sees an
undecodable value (a service older than this feature dead-letters it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final, Literal

MAGIC: Final = b"\xffDSC"
"""The first bytes of every control message value."""

Operation = Literal["flush", "cancel"]
OPERATIONS: Final[tuple[Operation, ...]] = ("flush", "cancel")
MAX_CONTROL_BYTES: Final = 4096


@dataclass(frozen=True, slots=True)
class Control:
    """One control message: flush the timeline, or cancel its pending records (one, or all)."""

    op: Operation
    record: str | None = None


def encode(control: Control) -> bytes:
    """The value of a control message."""
    body: dict[str, str] = {"op": control.op}
    if control.record is not None:
        body["record"] = control.record
    return MAGIC + json.dumps(body, separators=(",", ":")).encode("utf-8")


def decode(value: bytes) -> Control:
    """Parse a control message value (starting with MAGIC); ValueError when malformed."""
    if len(value) > MAX_CONTROL_BYTES:
        raise ValueError(f"control message is {len(value)} bytes, over {MAX_CONTROL_BYTES}")
    try:
        body = json.loads(value[len(MAGIC) :].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"control message is not UTF-8 JSON: {exc}") from exc
    if not isinstance(body, dict) or body.get("op") not in OPERATIONS:
        raise ValueError(f"control message op must be one of {OPERATIONS}, got {body!r}")
    record = body.get("record")
    if record is not None and (not isinstance(record, str) or body["op"] != "cancel"):
        raise ValueError("control message record must be a record id, and only for cancel")
    op: Operation = body["op"]
    return Control(op, record)
