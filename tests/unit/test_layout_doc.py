"""design.md §2a (the code layout) is checked against the tree: every module of the package is
named there, and every module or folder it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "digest_stream"


def _layout() -> str:
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## 2a.", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1]  # the tree block


def _modules() -> list[Path]:
    kinds = ("*.py", "*.lua")
    return sorted(
        path.relative_to(PACKAGE)
        for kind in kinds
        for path in PACKAGE.rglob(kind)
        if path.name != "__init__.py" and path.name != "__main__.py"
    )


def test_every_module_of_the_package_is_named_in_the_layout() -> None:
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", _layout()))
    missing = [str(m) for m in _modules() if m.stem not in words]
    assert not missing, f"design.md §2a does not name: {missing}"


def test_every_file_the_layout_names_exists() -> None:
    names = {path.name for path in PACKAGE.rglob("*") if "__pycache__" not in path.parts}
    named = set(re.findall(r"\b([a-z_]+\.(?:py|lua))\b", _layout()))
    named |= set(re.findall(r"^ +([a-z_]+)/ ", _layout(), re.MULTILINE))  # the tree's folders
    absent = sorted(name for name in named if name not in names)
    assert not absent, f"design.md §2a names what the tree does not have: {absent}"
