"""The Lua library as assembled by store/redis/library.py: the name, the constants, then the parts
in their fixed order, each once; no part redefines a constant or reads a name declared later."""

from __future__ import annotations

import math
import re
from importlib import resources

import pytest

from digest_stream.store import limits
from digest_stream.store.base import CONTROLS
from digest_stream.store.policy import PACKED
from digest_stream.store.redis import library, protocol
from digest_stream.vocabulary import CONTROL_SPECS, Control, State

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
        f"local COOLING_MARGIN = {limits.COOLING_MARGIN!r}",
        f"local INDEX_ROTATE_AFTER = {limits.INDEX_ROTATE_AFTER!r}",
        f"local INLINE_MAX_RECORDS = {limits.INLINE_MAX_RECORDS}",
        f"local DIGEST_ID_LENGTH = {limits.DIGEST_ID_LENGTH}",
        f"local OPEN_NONCE_LENGTH = {limits.OPEN_NONCE_LENGTH}",
        f"local SCHEDULE_REPLY_TTL = {limits.SCHEDULE_REPLY_TTL!r}",
        "local CAUSES = {" + causes + "}",
        "local CONTROL_ARGUMENTS = {"
        + ", ".join(
            f"{{'{s.argument}', '{s.field + ' id' if s.argument == 'name' else s.field}'}}"
            for s in CONTROL_SPECS.values()
        )
        + "}",
        "local STATES = {" + ", ".join(f"{s.name.lower()} = '{s}'" for s in State) + "}",
        "local POLICY_FIELDS = {"
        + ", ".join(f"{{'{spec.name}', '{spec.kind.packed}'}}" for spec in PACKED)
        + "}",
        f"local ADD_NUMBERING = '{protocol.ADD_NUMBERING}'",
        *(
            f"local {name} = {library.lua_literal(value)}"
            for name, value in protocol.lua_constants().items()
        ),
    ]
    head = library.SOURCE[: _first_part_at()]
    lines = [line for line in head.splitlines() if line and not line.startswith("--")]
    assert lines == expected
    assert library.SOURCE.startswith(expected[0] + "\n")


def _files() -> list[tuple[str, str]]:
    """Every Lua file in the order the library joins them: (name, text)."""
    return [
        *((name, library.part_source(name)) for name in library.PARTS),
        *((name, library.command_source(name)) for name in library.COMMANDS),
    ]


def test_the_files_follow_in_their_order_each_once() -> None:
    folder = resources.files("digest_stream.store.redis").joinpath("lua")
    shipped = {entry.name.removesuffix(".lua") for entry in folder.iterdir() if entry.is_file()}
    assert sorted(library.PARTS) == sorted(shipped)  # every part listed, and only once
    commands = {entry.name.removesuffix(".lua") for entry in folder.joinpath("commands").iterdir()}
    assert sorted(library.COMMANDS) == sorted(commands)  # a file per command, no other
    texts = [text for _, text in _files()]
    # the control handlers' table right after the part that defines them
    at = library.PARTS.index(library.HANDLERS_PART)
    handlers = "local CONTROL_HANDLERS = {" + ", ".join(f"controls.{c}" for c in CONTROLS) + "}\n"
    joined = [*texts[:at], texts[at] + handlers, *texts[at + 1 :]]
    assert library.SOURCE[_first_part_at() :] == "\n".join(joined) + "\n" + library.registrations()
    for name, text in zip(library.PARTS, texts, strict=False):
        assert text.startswith(f"-- {name}.lua: "), f"{name}.lua opens without its header"
    for name, text in zip(library.COMMANDS, texts[len(library.PARTS) :], strict=True):
        assert text.startswith(f"-- {name}: "), f"commands/{name}.lua opens without its header"
    for _, text in _files():
        assert library.SOURCE.count(text) == 1
        # the registrations close the library: nothing runs after them
        assert "register_function" not in text
    assert library.SOURCE.endswith(library.registrations())


def _header(text: str) -> list[str]:
    """A file's opening comment (up to its first line of code), each line without its ``--``."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line[3:])
    return lines


def _header_field(text: str, label: str) -> str | None:
    """One field of a file's header (``label: ...`` and its indented continuation lines)."""
    found: list[str] | None = None
    for line in _header(text):
        if found is not None and line.startswith("  "):
            found.append(line.strip())
        elif found is not None:
            break
        elif line.startswith(f"{label}: "):
            found = [line.removeprefix(f"{label}: ").strip()]
    return None if found is None else " ".join(found)


def test_each_command_file_lists_its_keys_argv_and_reply_as_the_protocol_declares() -> None:
    for command in protocol.COMMANDS:
        text = library.command_source(command.function)
        where = f"commands/{command.function}.lua"
        assert _header_field(text, "KEYS") == (", ".join(command.key_names) or "none"), where
        assert _header_field(text, "ARGV") == command.render_args(), where
        assert _header_field(text, "Reply") == command.reply.render(), where
        assert re.search(rf"^local function {command.callback}\(", text, re.MULTILINE), where
        registered = f"function_name = '{command.function}', callback = {command.callback}"
        assert registered in library.SOURCE


def _own_names(code: str) -> set[str]:
    """Names a file declares for itself: locals, function parameters, loop variables."""
    own = set(re.findall(r"\blocal\s+function\s+(\w+)", code))
    for group in re.findall(r"\blocal\s+(?!function)([\w\s,]+?)\s*(?:=|\n)", code):
        own |= {name.strip() for name in group.split(",") if name.strip()}
    for group in re.findall(r"\bfunction\s*[\w.]*\s*\(([^)]*)\)", code):
        own |= {name.strip() for name in group.split(",") if name.strip()}
    for group in re.findall(r"\bfor\s+([\w\s,]+?)\s+(?:=|in)\b", code):
        own |= {name.strip() for name in group.split(",") if name.strip()}
    return own


def _needs(text: str) -> dict[str, str]:
    """A file's ``Needs:`` header: each name and where it says it comes from (``Python``: a
    constant Python writes; else the part that declares it). ``nothing``: none."""
    field = _header_field(text, "Needs")
    assert field is not None, "no Needs: line"
    if field == "nothing.":
        return {}
    needs: dict[str, str] = {}
    for group in field.rstrip(".").split(";"):
        found = re.fullmatch(r"\s*([\w\s,]+?)\s*\((\w+)\)\s*", group)
        assert found is not None, f"Needs group {group!r} is not 'names (owner)'"
        for name in found.group(1).split(","):
            needs[name.strip()] = found.group(2)
    return needs


def test_each_files_needs_are_what_it_reads_of_the_files_before_it() -> None:
    # "Needs:" names each name a file reads from outside it, with the file (or Python's
    # constants) declaring it: checked both ways, so the header cannot go stale.
    declared: dict[str, str] = {name: "Python" for name in library.LUA_CONSTANTS}
    for name, text in _files():
        code = _code(text)
        needs = _needs(text)
        for needed, owner in needs.items():
            assert declared.get(needed) == owner, (
                f"{name}: needs {needed} ({owner}), declared by {declared.get(needed)}"
            )
        read = set(re.findall(r"(?<![.\w])([A-Za-z_]\w*)\b(?!\s*=[^=])", code))
        outside = {used for used in read - _own_names(code) if used in declared}
        assert outside == set(needs), (
            f"{name}: reads {sorted(outside - set(needs))} not in its Needs; "
            f"Needs lists {sorted(set(needs) - outside)} it does not read"
        )
        for local in _top_level_locals(text):
            declared[local] = name
        if name == library.HANDLERS_PART:
            declared["CONTROL_HANDLERS"] = name  # written after it by the assembler


def test_no_part_defines_a_constant_python_writes() -> None:
    for name, text in _files():
        code = _code(text)
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
    assert len(names) > 100  # the count is read (library 27 holds 188)
    assert len(names) < LUA_MAX_LOCALS


def test_each_part_reads_only_names_declared_before_it() -> None:
    # A local read before its declaration is compiled as a global read: nil, or an error in
    # Redis. So a part may use the names of the parts before it, never of the parts after it.
    files = _files()
    names = [name for name, _ in files]
    declared_by = {local: name for name, text in files for local in _top_level_locals(text)}
    for index, (part, text) in enumerate(files):
        code = _code(text)
        later = {name for name, owner in declared_by.items() if owner in names[index + 1 :]}
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


def _source_line(pattern: str) -> re.Match[str]:
    """The library's line matching ``pattern`` (one whole line)."""
    found = re.search(pattern, library.SOURCE, re.MULTILINE)
    assert found is not None, f"no line {pattern!r} in the library"
    return found


def test_the_head_read_range_is_its_length() -> None:
    # An add reads the first HEAD_READ bytes of each inline container: GETRANGE's bounds are
    # literals (as text: a number argument is formatted on every call), kept to that length.
    length = _source_line(r"^local HEAD_READ = (\d+)$")
    bounds = _source_line(r"^local HEAD_READ_FIRST, HEAD_READ_LAST = '(\d+)', '(\d+)'$")
    assert (int(bounds.group(1)), int(bounds.group(2))) == (0, int(length.group(1)) - 1)


def test_every_control_has_its_handler_or_the_library_is_not_assembled() -> None:
    # A control declared in vocabulary.py without its controls.<value> in controls.lua would
    # be a nil in CONTROL_HANDLERS: refused when the library is assembled instead.
    part = library.part_source(library.HANDLERS_PART)
    for control in Control:
        assert re.search(rf"^    function controls\.{control}\(", part, re.MULTILINE)
    without = part.replace("function controls.flush(", "function controls.flushed(")
    with pytest.raises(ValueError, match=r"defines no controls\.flush"):
        library.handler_table(without)
