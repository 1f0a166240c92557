"""Security checks: nothing evaluates or unpickles input; the Lua library is closed and guarded;
namespaces on one Redis are isolated from each other."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
import redis

import digest_stream
from digest_stream.store import InvalidState, NewRecord, RedisStore
from digest_stream.store.keys import (
    digest_key,
    fence_key,
    partition_tag,
    ready_key,
    timeline_key,
    waiting_key,
)
from tests.support import unique

PACKAGE = Path(digest_stream.__file__).parent
LUA = resources.files("digest_stream.store").joinpath("digests.lua").read_text()

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
            assert stripped.startswith(("local ", "redis.register_function", "#!lua")), stripped
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


def test_redis_refuses_a_library_that_creates_globals(redis_client: redis.Redis) -> None:
    # The runtime guard the static check relies on: Redis 7 functions cannot create globals.
    name = unique("probe").replace("-", "_")
    code = (
        f"#!lua name={name}\n"
        "redis.register_function('" + name + "_f', function(keys, args) leaked = 1 return 1 end)"
    )
    redis_client.function_load(code)
    try:
        with pytest.raises(redis.ResponseError, match=r"(?i)global|readonly table"):
            redis_client.fcall(f"{name}_f", 0)
    finally:
        redis_client.function_delete(name)


# ------------------------------------------------------------------ namespace isolation


@pytest.fixture
def two_stores(redis_client: redis.Redis) -> Iterator[tuple[RedisStore, RedisStore]]:
    first, second = unique("nsa"), unique("nsb")
    yield RedisStore(redis_client, namespace=first), RedisStore(redis_client, namespace=second)
    for ns in (first, second):
        for key in list(redis_client.scan_iter(match=f"{{{ns}:*", count=1000)):
            redis_client.delete(key)


def test_two_namespaces_on_one_redis_never_see_each_other(
    two_stores: tuple[RedisStore, RedisStore], redis_client: redis.Redis
) -> None:
    a, b = two_stores
    now = 1_700_000_000.0
    result = a.add(0, [NewRecord("shared", "r1", now, b"secret-a", offset=5)], now)
    assert result.ready == ["shared"]
    # b sees no timeline, no schedule, no fence, and cannot open or delete a's timeline.
    info = b.inspect(0, "shared")
    assert (info.state, info.pending, info.open_digest) == ("absent", 0, None)
    assert b.stats(0).ready == 0
    assert b.stats(0).applied_offset is None
    assert b.applied_offset(0) is None
    assert b.schedule(0, now + 10_000) == []
    with pytest.raises(InvalidState):
        b.open(0, "shared", "0" * 32, now)
    assert b.delete(0, "shared") is False
    # b's writes with the same names land in b only.
    b.add(0, [NewRecord("shared", "r1", now, b"secret-b", offset=1)], now)
    opened_a = a.open(0, "shared", "a" * 32, now)
    opened_b = b.open(0, "shared", "b" * 32, now)
    assert [r.payload for r in opened_a.records] == [b"secret-a"]
    assert [r.payload for r in opened_b.records] == [b"secret-b"]
    assert a.applied_offset(0) == 5
    assert b.applied_offset(0) == 1
    # b closing a's digest id is a no-op in a.
    assert b.close(0, "shared", opened_a.id, now) is False
    assert a.inspect(0, "shared").open_digest == opened_a.id
    # Every key each store wrote carries its own namespace tag.
    for store, ns in ((a, a.namespace), (b, b.namespace)):
        del store
        keys = list(redis_client.scan_iter(match=f"*{ns}*", count=1000))
        assert keys
        assert all(k.startswith(f"{{{ns}:".encode()) for k in keys), keys


def test_lua_refuses_keys_of_two_namespaces_in_one_call(
    two_stores: tuple[RedisStore, RedisStore], redis_client: redis.Redis
) -> None:
    a, b = two_stores
    ta, tb = partition_tag(a.namespace, 0), partition_tag(b.namespace, 0)
    now = 1_700_000_000.0
    a.add(0, [NewRecord("t", "r", now, b"p", offset=0)], now)
    mixed = [timeline_key(ta, "t"), digest_key(tb, "t"), waiting_key(ta), ready_key(tb)]
    with pytest.raises(redis.ResponseError, match="invalid_argument"):
        redis_client.execute_command("FCALL", "ds_open", 4, *mixed, "t", "c" * 32, now, 3600)
    with pytest.raises(redis.ResponseError, match="invalid_argument"):
        redis_client.execute_command(
            "FCALL", "ds_add", 3, fence_key(ta), waiting_key(tb), ready_key(ta),
            now, 3600, 16, "", "", 0,
        )  # fmt: skip
    assert a.inspect(0, "t").pending == 1
    assert b.inspect(0, "t").pending == 0
