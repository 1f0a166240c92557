"""Security checks read from the source: nothing evaluates or unpickles input; the Lua library
declares only locals and evaluates nothing (what Redis enforces at runtime is checked in
tests/integration/store/test_security.py)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import digest_stream
from digest_stream.store.redis import library

PACKAGE = Path(digest_stream.__file__).parent
LUA = library.SOURCE

# Modules that turn bytes into code or arbitrary objects.
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "jsonpickle"}
UNSAFE_CALLS = {"eval", "exec", "compile", "__import__"}
UNSAFE_ATTRIBUTES = {
    ("yaml", "load"),
    ("yaml", "unsafe_load"),
    ("yaml", "full_load"),
    ("pickle", "loads"),
    ("marshal", "loads"),
}


def _sources() -> list[Path]:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) >= 10, files
    return files


def _offences(path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in UNSAFE_MODULES:
                    yield f"{where}: import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in UNSAFE_MODULES:
                yield f"{where}: from {node.module} import ..."
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in UNSAFE_CALLS:
                yield f"{where}: {func.id}()"
            if isinstance(func, ast.Attribute):
                if (
                    func.attr in UNSAFE_CALLS
                    and isinstance(func.value, ast.Name)
                    and func.value.id in {"builtins", "__builtins__"}
                ):
                    yield f"{where}: builtins.{func.attr}()"
                if isinstance(func.value, ast.Name) and (func.value.id, func.attr) in (
                    UNSAFE_ATTRIBUTES
                ):
                    yield f"{where}: {func.value.id}.{func.attr}()"
            for keyword in node.keywords:
                if keyword.arg == "shell" and not (
                    isinstance(keyword.value, ast.Constant) and keyword.value.value is False
                ):
                    yield f"{where}: subprocess with shell="
        elif isinstance(node, ast.Name) and node.id in {"pickle", "marshal"}:
            yield f"{where}: uses {node.id}"


def test_no_code_path_unpickles_or_evaluates_input() -> None:
    offences = [o for path in _sources() for o in _offences(path)]
    assert offences == []


def test_the_scan_catches_what_it_looks_for(tmp_path: Path) -> None:
    # The scanner itself must see through the usual spellings.
    bad = tmp_path / "probe.py"
    bad.write_text(
        "import pickle\nfrom marshal import loads\nimport yaml\n"
        "def f(b):\n    eval(b)\n    yaml.load(b)\n    __import__('os')\n"
    )
    found = list(_offences(bad))
    assert len(found) == 5, found


def test_lua_library_evaluates_nothing_and_declares_only_locals() -> None:
    code = _strip_lua_comments(LUA)
    for forbidden in ("loadstring", "load(", "dofile", "loadfile", "setfenv", "getfenv",
                      "rawset", "_G", "setmetatable"):  # fmt: skip
        assert forbidden not in code, forbidden
    declared = _lua_locals(code)
    # Statements `name = ...` (table constructor fields end their line with a comma).
    assigned = {
        m.group(1)
        for m in re.finditer(
            r"(?m)^\s*([A-Za-z_]\w*)\s*(?:,\s*[A-Za-z_]\w*\s*)*=[^=][^\n]*[^,\s{]\s*$", code
        )
    }
    assigned |= {m.group(1) for m in re.finditer(r"(?m)^\s*function\s+([A-Za-z_]\w*)", code)}
    globals_ = assigned - declared
    assert globals_ == set(), f"Lua assigns names it never declared local: {sorted(globals_)}"
    # At the top level, only local declarations and the function registrations.
    depth = 0
    for line in code.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if depth == 0:
            # (a `do` block scopes locals the top level has no room for: Lua's 200)
            assert stripped.startswith(("local ", "redis.register_function", "#!lua")) or (
                stripped == "do"
            ), stripped
        depth += len(re.findall(r"\b(function|do|then|repeat)\b", stripped))
        depth -= len(re.findall(r"\b(end|until)\b", stripped))
        depth -= len(re.findall(r"\belseif\b", stripped))  # 'elseif ... then' opens nothing new


def _strip_lua_comments(code: str) -> str:
    code = re.sub(r"--\[\[.*?\]\]", "", code, flags=re.S)
    code = re.sub(r"--[^\n]*", "", code)
    return re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "''", code)


def _lua_locals(code: str) -> set[str]:
    names: set[str] = set()
    for m in re.finditer(r"\blocal\s+function\s+([A-Za-z_]\w*)", code):
        names.add(m.group(1))
    for m in re.finditer(r"\blocal\s+([A-Za-z_][\w\s,]*?)(?:=|\n|$)", code):
        names.update(n.strip() for n in m.group(1).split(",") if n.strip())
    for m in re.finditer(r"\bfunction\s*[\w.:]*\s*\(([^)]*)\)", code):
        names.update(n.strip() for n in m.group(1).split(",") if n.strip() not in {"", "..."})
    for m in re.finditer(r"\bfor\s+([\w\s,]+?)\s+(?:=|in)\b", code):
        names.update(n.strip() for n in m.group(1).split(","))
    return names
