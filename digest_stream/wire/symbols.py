"""Each DigestReason's Avro enum index, read from schemas/digest.avsc (not copied by hand).

The Avro binary of an enum is its symbol's position in the schema, so the hand-laid bytes
(``digest_bytes``) and the sizes (``split``) take the position from the schema itself; a
DigestReason the schema lacks (or a symbol the enum lacks) stops the import, not a digest.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Final

from digest_stream.vocabulary import DigestReason


def enum_symbols(schema: Any, name: str) -> list[str]:
    """The symbols of the enum type ``name`` declared anywhere in ``schema``."""
    if isinstance(schema, dict):
        if schema.get("type") == "enum" and schema.get("name") == name:
            return list(schema["symbols"])
        values: list[Any] = list(schema.values())
    elif isinstance(schema, list):
        values = schema
    else:
        return []
    for value in values:
        found = enum_symbols(value, name)
        if found:
            return found
    return []


def _reason_index() -> dict[DigestReason, int]:
    text = resources.files("digest_stream.wire").joinpath("schemas", "digest.avsc").read_text()
    symbols = enum_symbols(json.loads(text), "DigestReason")
    if sorted(symbols) != sorted(DigestReason):
        raise RuntimeError(
            f"schemas/digest.avsc's DigestReason symbols {symbols} are not the enum's "
            f"{[reason.value for reason in DigestReason]}"
        )
    return {DigestReason(symbol): index for index, symbol in enumerate(symbols)}


#: Each reason's position among the schema's symbols: its Avro encoding.
REASON_INDEX: Final = _reason_index()
