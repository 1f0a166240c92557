"""The wire protocol's declaration (store/redis/protocol.py): what Python packs is what the Lua's
formats, written from the same declaration, read back; keys and arguments follow it."""

from __future__ import annotations

import re
import struct

import pytest

from digest_stream.store.redis import keys, protocol

#: Python's struct letter for each item of a Lua ``struct`` format the protocol uses.
_PYTHON = {"B": "B", "H": "H", "I4": "I", "I8": "Q", "d": "d"}


def lua_unpack(lua_format: str, data: bytes, position: int = 0) -> tuple[list[object], int]:
    """One entry read as Redis's Lua ``struct.unpack`` reads ``lua_format`` (big-endian; ``c0``
    takes the preceding count as the length of a string)."""
    assert lua_format.startswith(">")
    values: list[object] = []
    for item in re.findall(r"I4|I8|c0|[BHd]", lua_format[1:]):
        if item == "c0":
            length = values.pop()
            assert isinstance(length, int)
            values.append(data[position : position + length])
            position += length
        else:
            (value,) = struct.unpack_from(">" + _PYTHON[item], data, position)
            values.append(value)
            position += struct.calcsize(">" + _PYTHON[item])
    return values, position


@pytest.mark.parametrize(
    ("packed", "values"),
    [
        (protocol.TIMELINE, (3, "user:42")),
        (protocol.RECORD, (2, "r-1", 1_700_000_000.25, 2.0**53, b"\x00payload\xff")),
        (protocol.CONTROL, (5, 17.0, 2, 1, "t", "id")),
        (protocol.CONTROL, (0, 0.0, 1, 3, "tl", "")),
    ],
)
def test_what_python_packs_the_lua_format_reads_back(
    packed: protocol.Packed, values: tuple[object, ...]
) -> None:
    data = packed.pack(*values) + packed.pack(*values)  # entries follow each other
    expected = [value.encode() if isinstance(value, str) else value for value in values]
    first, position = lua_unpack(packed.lua_format, data)
    second, end = lua_unpack(packed.lua_format, data, position)
    assert first == expected == second
    assert end == len(data)


def test_the_hot_paths_structs_are_the_declarations_heads() -> None:
    # store.py packs a record from these two structs with the id and payload between them
    head, tail = protocol.RECORD.heads
    record = head.pack(1, 2) + b"ab" + tail.pack(3.0, 4.0, 1) + b"p"
    assert record == protocol.RECORD.pack(1, "ab", 3.0, 4.0, b"p")
    assert [s.format for s in protocol.CONTROL.heads] == [">IdBIH", ">H"]


def test_commands_are_declared_once_each_with_their_keys() -> None:
    functions = [command.function for command in protocol.COMMANDS]
    assert len(functions) == len(set(functions))
    assert all(function.startswith("ds_") for function in functions)
    tag = keys.partition_tag("d", 7)
    assert keys.command_keys(protocol.DS_ADD, tag) == ["{d:7}:o", "{d:7}:w", "{d:7}:r"]
    assert keys.command_keys(protocol.DS_OPEN, tag, "x") == [
        "{d:7}:t:x",
        "{d:7}:d:x",
        "{d:7}:w",
        "{d:7}:r",
    ]
    assert keys.command_keys(protocol.DS_VERSION, tag) == []
    assert {kind for layout in protocol.KEY_LAYOUTS.values() for kind in layout} <= set(
        protocol.KEY_SUFFIXES
    )


def test_fixed_arguments_go_in_their_declared_order_and_no_other() -> None:
    args = protocol.DS_MAINTENANCE.arguments(
        limit="5", now="2.0", partition_ttl="9.0", deadline="1"
    )
    assert args == ["1", "2.0", "9.0", "5"]
    with pytest.raises(TypeError):
        protocol.DS_MAINTENANCE.arguments(now="2.0")
    with pytest.raises(TypeError):
        protocol.DS_FENCE_SET.arguments(offset="", topic_id="", extra="")


def test_the_lua_constants_hold_reply_positions_from_one() -> None:
    constants = protocol.lua_constants()
    assert constants["ADD_REPLY"] == {
        name: index for index, name in enumerate(protocol.ADD_REPLY.fields, start=1)
    }
    assert constants["TARGET_FORMAT"] == ">I4Hc0Hc0"
    assert constants["ADD_ARGS"] == {
        name: index for index, name in enumerate((*protocol.ADD_HEAD, "policies"), start=1)
    }
    assert constants["RECORD_FORMAT"] == ">I4Hc0ddI4c0"
