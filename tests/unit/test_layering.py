"""The package's floors hold: no import runs back up, and no two modules import each other.

Imports are read from the source (ast), function-local ones included, so a cycle hidden
inside a function body shows up as well as one at module level.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import digest_stream

PACKAGE = Path(digest_stream.__file__).parent
ROOT = PACKAGE.name

#: Parts of the package and the parts above them that they must never import.
LOWER_FLOORS = {
    "store": ("roles", "app", "cli", "ops", "wire", "settings", "client", "dev"),
    "wire": ("roles", "app", "cli", "ops", "store", "settings", "client", "dev"),
    "ops": ("roles", "app", "cli"),
    "roles": ("app", "cli"),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imported(module: str, path: Path) -> Iterator[str]:
    """The package's modules that ``module`` imports anywhere in its body."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from pkg import sub` names the submodule; `from pkg import name` the package.
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            if name == ROOT or name.startswith(f"{ROOT}."):
                # `import a.b.name` of something not a module: its closest module.
                target = name
                while target not in MODULES:
                    target = target.rpartition(".")[0]
                if target != module:
                    yield target


GRAPH = {module: set(_imported(module, path)) for module, path in MODULES.items()}


def _part(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def test_the_graph_is_read() -> None:
    # A parser that found nothing would pass every check below.
    assert "digest_stream.store.errors" in GRAPH["digest_stream.store.calendar"]
    assert "digest_stream.store.policy" in GRAPH["digest_stream.settings"]


def test_no_import_runs_back_up() -> None:
    upward = [
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        for target in sorted(targets)
        if _part(target) in LOWER_FLOORS.get(_part(module), ())
    ]
    assert upward == []


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph, as the modules along it; None when it has none."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(module: str) -> list[str] | None:
        path.append(module)
        on_path.add(module)
        for target in sorted(graph.get(module, ())):
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target not in done:
                found = visit(target)
                if found:
                    return found
        path.pop()
        on_path.discard(module)
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done:
            found = visit(module)
            if found:
                return found
    return None


def test_no_import_cycle() -> None:
    cycle = _cycle(GRAPH)
    assert cycle is None, " -> ".join(cycle or ())


def test_a_cycle_is_found() -> None:
    # The check above is only as good as its search: a hidden cycle must not slip by.
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


#: The roles are peers: each imports the shared pieces (roles.publish, roles.runner, ...), never
#: another role's internals (issue 26: the ingest's leading edge once imported delivery's build,
#: publish and report, a second delivery with weaker rules).
PEER_ROLES = ("ingest", "delivery")


def test_no_role_imports_another_roles_internals() -> None:
    def role(module: str) -> str | None:
        parts = module.split(".")
        return (
            parts[2] if len(parts) > 2 and parts[1] == "roles" and parts[2] in PEER_ROLES else None
        )

    crossing = [
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        for target in sorted(targets)
        if role(module) is not None and role(target) not in (None, role(module))
    ]
    assert crossing == []
    # the rule is live: the leading edge and delivery both publish through roles.publish
    assert "digest_stream.roles.publish" in GRAPH["digest_stream.roles.ingest.lead"]
    assert "digest_stream.roles.publish" in GRAPH["digest_stream.roles.delivery.retries"]


def _third_party(path: Path) -> Iterator[str]:
    """The top-level names of what a module imports from outside the package."""
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module.split(".")[0]


#: The one part of the package that may import redis-py: the Redis store (issue 29, item 3).
REDIS_STORE = f"{ROOT}.store.redis"


def _inside(module: str, part: str) -> bool:
    return module == part or module.startswith(f"{part}.")


def test_only_the_redis_store_imports_redis() -> None:
    # Everything else speaks the store's Protocol and errors, so another backend touches
    # store/ alone. tests/ and bench/ are outside the package and may use redis-py.
    importing = sorted(
        module
        for module, path in MODULES.items()
        if "redis" in set(_third_party(path)) and not _inside(module, REDIS_STORE)
    )
    assert importing == []
    # the check is live: the Redis store's modules are seen importing it
    assert "redis" in set(_third_party(MODULES[f"{REDIS_STORE}.routing"]))


#: Outside the store, only the dev stack reaches into store/redis/ (its readiness ping, the
#: library loaded as admin and the ACL line of the secured stack); the service, its roles,
#: ops and the CLI get a store from ``store.connect`` and name no backend.
REACHING_INTO_REDIS = (f"{ROOT}.dev",)


def test_the_service_names_no_store_backend() -> None:
    reaching = [
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        for target in sorted(targets)
        if _inside(target, REDIS_STORE)
        and not _inside(module, f"{ROOT}.store")
        and not any(_inside(module, allowed) for allowed in REACHING_INTO_REDIS)
    ]
    assert reaching == []
    # the check is live: the dev stack is seen reaching in
    assert f"{REDIS_STORE}.client" in GRAPH[f"{ROOT}.dev.redis"]


def test_the_vocabulary_sits_below_store_and_wire() -> None:
    # One enum per vocabulary, imported by both floors: it must import nothing of the package.
    assert GRAPH["digest_stream.vocabulary"] == set()
    assert "digest_stream.vocabulary" in GRAPH["digest_stream.store.limits"]
    assert "digest_stream.vocabulary" in GRAPH["digest_stream.wire.models"]


#: Where a backend's own words belong (issue 38, item 1): the Redis store's package; the list
#: of backends, which names each one's settings section (store/backends.py); the Redis part
#: of the dev stack (dev/redis.py, which the backend names as its ``dev_part``) and the
#: secured stack's TLS Redis (dev/secure.py). The stack itself (dev/stack.py, dev/parts.py)
#: and the CLI's `dev` commands speak of the store's part, whichever backend it is.
REDIS_WORDS_AT_HOME = (
    REDIS_STORE,
    f"{ROOT}.store.backends",
    f"{ROOT}.dev.redis",
    f"{ROOT}.dev.secure",
)

#: The names outside those homes that keep the word because users rely on them: the metric
#: alerts and dashboards read (docs/operations.md, Metrics) and /healthz's deprecated field.
#: Each is a string the service writes, not a name of its code.
REDIS_NAMES_KEPT_FOR_USERS = frozenset(
    {
        "digest_redis_errors",  # the counter (Prometheus adds _total): deploy/ alerts on it
        "digest_redis_errors_total",
        "waiting_for_redis",  # /healthz, deprecated alias of waiting_for_store
    }
)

#: A string that is a name (a metric, a JSON field, a setting), not a sentence.
_NAME_LIKE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _names(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """Every name a module spells (line, name): its own module path, what it defines and
    binds, the attributes and keywords it uses, what it imports, and its name-like strings."""
    yield 0, module
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield line, node.name
        elif isinstance(node, ast.arg):
            yield line, node.arg
        elif isinstance(node, ast.Name):
            yield line, node.id
        elif isinstance(node, ast.Attribute):
            yield line, node.attr
        elif isinstance(node, ast.keyword) and node.arg:
            yield line, node.arg
        elif isinstance(node, ast.alias):
            yield line, node.name
            if node.asname:
                yield line, node.asname
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield line, node.module
        elif isinstance(node, ast.Global | ast.Nonlocal):
            yield from ((line, name) for name in node.names)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _NAME_LIKE.match(node.value)
        ):
            yield line, node.value


def redis_names() -> list[str]:
    """Each name with "redis" in it outside the Redis words' homes, as module:line name."""
    return sorted(
        {
            f"{module}:{line} {name}"
            for module, path in MODULES.items()
            if not any(_inside(module, home) for home in REDIS_WORDS_AT_HOME)
            for line, name in _names(module, path)
            if "redis" in name.lower() and name not in REDIS_NAMES_KEPT_FOR_USERS
        }
    )


def test_only_the_redis_store_speaks_of_redis() -> None:
    # Roles, ops, the CLI, the settings and the store's neutral modules speak of "the store":
    # a second backend then needs store/<new>/ and its section in the backends' list
    # (store/backends.py), nothing else. tests/ and bench/ are outside the package.
    assert redis_names() == []


def test_the_redis_names_rule_is_live() -> None:
    # the rule sees names of every sort, and the homes are exempt, not unread
    path = MODULES[f"{REDIS_STORE}.errors"]
    seen = {name for _line, name in _names(f"{REDIS_STORE}.errors", path)}
    assert {"redis", "translate", "REDIS_DOWN", "BACKEND"} <= seen
    dev = f"{ROOT}.dev.redis"
    assert any("redis" in name for _line, name in _names(dev, MODULES[dev]))


#: The dev stack's backend-neutral modules: they reach a backend's servers only through its
#: part (dev/parts.py), so a second backend adds dev/<name>.py and touches none of them.
NEUTRAL_DEV = (f"{ROOT}.dev.stack", f"{ROOT}.dev.parts", f"{ROOT}.cli.devstack")


def test_the_dev_stack_reaches_a_backend_only_through_its_part() -> None:
    # No import of a backend's dev module (the store's part is loaded by the name its
    # StoreBackend gives) nor of a backend's store package.
    backend_modules = (f"{ROOT}.dev.redis", REDIS_STORE)
    reaching = [
        f"{module} imports {target}"
        for module in NEUTRAL_DEV
        for target in sorted(GRAPH[module])
        if any(_inside(target, part) for part in backend_modules)
    ]
    assert reaching == []
    # the rule is live: the stack is read, and it imports the parts' protocol
    assert f"{ROOT}.dev.parts" in GRAPH[f"{ROOT}.dev.stack"]
    assert f"{ROOT}.dev.parts" in GRAPH[f"{ROOT}.cli.devstack"]
    assert not any(_inside(module, home) for module in NEUTRAL_DEV for home in REDIS_WORDS_AT_HOME)
