"""The house's size limits: no module over 400 lines, no class over 250 (issue 29).

A module past them is doing two jobs; split it where the jobs part, not at line 400."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "digest_stream"
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250


def test_no_module_is_over_the_limit() -> None:
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted([*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.lua")])
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_class_is_over_the_limit() -> None:
    long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    long[f"{path.relative_to(PACKAGE)}:{node.name}"] = lines
    assert not long, f"classes over {MAX_CLASS_LINES} lines: {long}"
