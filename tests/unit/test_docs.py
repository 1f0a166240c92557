"""The documents hold together: every document README.md and docs/ link to exists and has
content, every image they show is an SVG that draws on its own background, and
docs/reliability.md has a row for every chaos scenario. A merge once emptied
docs/reliability.md while every other document still sent readers to it."""

from __future__ import annotations

import ast
import re
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The documents whose links are followed.
SOURCES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
#: A markdown link's target, or a document named in backticks (`docs/store.md`).
LINK = re.compile(r"\]\(([^)\s]+)\)|`((?:docs/)?[\w./-]+\.md)`")
#: Fewer words than this is a stub, not a document.
MIN_WORDS = 50


def _linked(source: Path) -> set[Path]:
    """The local files a document links to or names, resolved."""
    found: set[Path] = set()
    for match in LINK.finditer(source.read_text()):
        target = (match.group(1) or match.group(2)).split("#", 1)[0]
        if not target or re.match(r"^[a-z]+:", target):  # http:, mailto: ...
            continue
        for base in (source.parent, ROOT):
            path = (base / target).resolve()
            if path.exists():
                found.add(path)
                break
        else:
            found.add((source.parent / target).resolve())
    return found


def test_every_linked_document_exists_and_has_content() -> None:
    problems = []
    for source in SOURCES:
        for path in sorted(_linked(source)):
            where = f"{source.relative_to(ROOT)} -> {path}"
            if not path.exists():
                problems.append(f"{where}: missing")
            elif path.suffix == ".md" and len(path.read_text().split()) < MIN_WORDS:
                problems.append(f"{where}: empty or a stub")
    assert not problems, "\n".join(problems)


def test_the_documents_are_linked_and_have_content() -> None:
    # Every document of docs/ is reachable, so the check above covers each of them.
    reached = set().union(*(_linked(source) for source in SOURCES))
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert doc.resolve() in reached, f"{doc.name} is linked from no document"
        assert len(doc.read_text().split()) >= MIN_WORDS, f"{doc.name} is empty or a stub"


def test_every_image_is_shown_and_is_an_svg_on_a_white_background() -> None:
    # docs/images/ holds charts drawn by bench/chart.py; a page in dark mode shows them as
    # drawn, so each paints its own white background first.
    reached = set().union(*(_linked(source) for source in SOURCES))
    images = sorted((ROOT / "docs" / "images").glob("*"))
    assert images, "docs/images/ is empty: the headline chart of docs/benchmarks.md is missing"
    for image in images:
        assert image.resolve() in reached, f"{image.name} is shown by no document"
        assert image.suffix == ".svg", f"{image.name}: only SVG charts are kept in docs/images/"
        root = ET.parse(image).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg", f"{image.name} is not an SVG"
        background = root.find("{http://www.w3.org/2000/svg}rect")
        assert background is not None, f"{image.name} draws no background"
        assert (background.get("width"), background.get("fill")) == ("100%", "#ffffff")
    shown = {path for path in reached if path.suffix == ".svg"}
    assert (ROOT / "docs" / "images" / "benchmarks-headline.svg").resolve() in shown


def _parametrize_ids(decorator: ast.expr) -> list[str] | None:
    """The ids of a @pytest.mark.parametrize with literal values; None for other decorators."""
    if not (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr == "parametrize"
    ):
        return None
    values = decorator.args[1]
    assert isinstance(values, ast.List | ast.Tuple), "a scenario's parameters must be literal"
    ids = []
    for value in values.elts:
        if isinstance(value, ast.Constant):
            ids.append(str(value.value))
            continue
        assert isinstance(value, ast.Call), f"parameter at line {value.lineno} is not literal"
        named = [kw.value for kw in value.keywords if kw.arg == "id"]
        assert named, f"pytest.param at line {value.lineno} has no id"
        assert isinstance(named[0], ast.Constant), f"pytest.param at line {value.lineno}"
        ids.append(str(named[0].value))
    return ids


def _scenarios() -> set[str]:
    """Every full chaos scenario, as pytest names it (`test_chaos_11_redis_refusing[OOM]`)."""
    names: set[str] = set()
    for path in sorted((ROOT / "tests" / "chaos").glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_chaos_")):
                continue
            ids = [
                found
                for decorator in node.decorator_list
                if (found := _parametrize_ids(decorator)) is not None
            ]
            if not ids:
                names.add(node.name)
            for params in ids:
                names.update(f"{node.name}[{one}]" for one in params)
    return names


def _table_rows() -> set[str]:
    """The scenarios named in docs/reliability.md's figures table (`...[id]` continues the
    row above's test)."""
    text = (ROOT / "docs" / "reliability.md").read_text()
    named: set[str] = set()
    current = ""
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 4:
            continue
        test = re.search(r"`((?:test_chaos_\w+|\.\.\.)(?:\[[\w-]+\])?)`", cells[2])
        if test is None:
            continue
        name = test.group(1)
        if name.startswith("..."):
            name = current + name[3:]
        else:
            current = name.split("[", 1)[0]
        figures = cells[3].replace(",", "")
        assert re.match(r"^\d", figures), f"{name}: no figure in its row ({cells[3]!r})"
        named.add(name)
    return named


def test_reliability_has_a_row_for_every_chaos_scenario() -> None:
    scenarios = _scenarios()
    assert len(scenarios) > 20, f"found only {sorted(scenarios)}"
    rows = _table_rows()
    missing = sorted(scenarios - rows)
    assert not missing, f"docs/reliability.md's table has no row for: {missing}"
    gone = sorted(rows - scenarios)
    assert not gone, f"docs/reliability.md's table names scenarios tests/chaos lacks: {gone}"
