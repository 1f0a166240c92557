"""The Lua library as assembled by store/redis/library.py: the name, the constants, then the parts
in their fixed order, each once; no part redefines a constant or reads a name declared later."""

from __future__ import annotations

import math
import re
from importlib import resources

import pytest

from digest_stream.store import limits
from digest_stream.store.base import CONTROLS
from digest_stream.store.redis import library

#: Lua 5.1 allows 200 local variables per function, the library's top level included.
LUA_MAX_LOCALS = 200


def _code(lua: str) -> str:
    """Lua without comments, its strings emptied (so neither hides nor fakes a name)."""
    lua = re.sub(r"--[^\n]*", "", lua)
    return re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "''", lua)


def _top_level_locals(lua: str) -> list[str]:
    """Names declared by the top-level ``local`` statements (unindented, as the library is)."""
    names: list[str] = []
    for line in _code(lua).splitlines():
        if found := re.match(r"local\s+function\s+(\w+)", line):
            names.append(found.group(1))
        elif found := re.match(r"local\s+([\w\s,]+?)\s*(?:=|$)", line):
            names += [name.strip() for name in found.group(1).split(",")]
    return names


def _first_part_at() -> int:
    return library.SOURCE.index(library.part_source(library.PARTS[0]))


def test_the_source_opens_with_its_name_then_pythons_constants() -> None:
    causes = ", ".join(f"{reason.lower()} = '{letter}'" for reason, letter in limits.CAUSES.items())
    expected = [
        f"#!lua name={library.NAME}",
        f"local LIBRARY_VERSION = '{library.VERSION}'",
        f"local MAX_NAME_BYTES = {limits.MAX_NAME_BYTES}",
        f"local MAX_OFFSET = {limits.MAX_OFFSET}",
        f"local MAX_TOPIC_ID_BYTES = {limits.MAX_TOPIC_ID_BYTES}",
        f"local MAX_TTL = {limits.MAX_TTL}",
        f"local MAX_SLICE = {limits.MAX_SLICE}",
        f"local FLUSH_AT_FLOOR = {limits.FLUSH_AT_FLOOR!r}",
        f"local INLINE_MAX_RECORDS = {limits.INLINE_MAX_RECORDS}",
        "local CAUSES = {" + causes + "}",
        "local CONTROL_CODES = {" + ", ".join(f"'{c}'" for c in CONTROLS) + "}",
        "local CONTROLS = {" + ", ".join(f"{c.name.lower()} = '{c}'" for c in CONTROLS) + "}",
    ]
    head = library.SOURCE[: _first_part_at()]
    lines = [line for line in head.splitlines() if line and not line.startswith("--")]
    assert lines == expected
    assert library.SOURCE.startswith(expected[0] + "\n")


def test_the_parts_follow_in_their_order_each_once() -> None:
    folder = resources.files("digest_stream.store.redis").joinpath("lua")
    shipped = {entry.name.removesuffix(".lua") for entry in folder.iterdir()}
    assert sorted(library.PARTS) == sorted(shipped)  # every part listed, and only once
    parts = [library.part_source(name) for name in library.PARTS]
    assert library.SOURCE[_first_part_at() :] == "\n".join(parts)
    for name, text in zip(library.PARTS, parts, strict=True):
        assert text.startswith(f"-- {name}.lua: "), f"{name}.lua opens without its header"
        assert library.SOURCE.count(text) == 1, name
    # the command table closes the library: nothing runs after the registrations
    assert library.PARTS[-1] == "commands"
    assert all("register_function" not in text for text in parts[:-1])


def test_no_part_defines_a_constant_python_writes() -> None:
    for name in library.PARTS:
        code = _code(library.part_source(name))
        for constant in library.LUA_CONSTANTS:
            assert not re.search(rf"^\s*local\s+{constant}\b", code, re.MULTILINE), (
                f"{name}.lua declares {constant}"
            )
            assert not re.search(rf"(?<![.\w]){constant}\s*=[^=]", code), (
                f"{name}.lua assigns {constant}"
            )
    for constant in library.LUA_CONSTANTS:
        assert len(re.findall(rf"^local {constant} = ", library.SOURCE, re.MULTILINE)) == 1


def test_top_level_locals_stay_under_the_lua_limit() -> None:
    names = _top_level_locals(library.SOURCE)
    assert len(names) == len(set(names)), "a top-level local declared twice"
    assert len(names) > 100  # the count is read (the library holds ~126)
    assert len(names) < LUA_MAX_LOCALS


def test_each_part_reads_only_names_declared_before_it() -> None:
    # A local read before its declaration is compiled as a global read: nil, or an error in
    # Redis. So a part may use the names of the parts before it, never of the parts after it.
    declared_by = {
        name: part
        for part in library.PARTS
        for name in _top_level_locals(library.part_source(part))
    }
    for index, part in enumerate(library.PARTS):
        code = _code(library.part_source(part))
        later = {name for name, owner in declared_by.items() if owner in library.PARTS[index + 1 :]}
        # identifiers read: not a field (.name) nor a table key or assignment target (name =)
        read = set(re.findall(r"(?<![.\w])([A-Za-z_]\w*)\b(?!\s*=[^=])", code))
        own = set(re.findall(r"\blocal\s+(?:function\s+)?(\w+)", code))
        assert (read & later) - own == set(), f"{part}.lua reads names of later parts"


def test_lua_literals_are_exact_or_refused() -> None:
    assert library.lua_literal(2**53) == "9007199254740992"
    assert library.lua_literal(0.1) == "0.1"
    assert library.lua_literal(("a", "b_c")) == "{'a', 'b_c'}"
    assert library.lua_literal({"x": 1, "y": "z"}) == "{x = 1, y = 'z'}"
    for bad in (True, math.inf, math.nan, "it's", {"not a name": 1}, [1], None):
        with pytest.raises(TypeError):
            library.lua_literal(bad)


def test_the_padded_count_pattern_matches_its_width() -> None:
    # The append rewrites an inline container's count in place: the pattern that recognises a
    # padded count (a literal: the library's load cannot call string functions) must match
    # exactly WRITTEN_WIDTH digits, the width format_written pads to.
    width = re.search(r"^local WRITTEN_WIDTH = (\d+)$", library.SOURCE, re.MULTILINE)
    pattern = re.search(r"^local PADDED_WRITTEN = '\^((?:%d)+)\|'$", library.SOURCE, re.MULTILINE)
    assert width is not None
    assert pattern is not None
    assert pattern.group(1) == "%d" * int(width.group(1))
