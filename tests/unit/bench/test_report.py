"""bench/report.py regenerates only the table of docs/benchmarks.md: the markers stay, each
once and in order, and the prose around them is kept."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench import report


def test_the_doc_has_the_table_markers_once_and_in_order() -> None:
    text = report.DOC.read_text()
    assert text.count(report.START) == 1
    assert text.count(report.END) == 1
    assert text.index(report.START) < text.index(report.END)


def test_regenerating_the_table_keeps_the_prose_around_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "benchmarks.md"
    shutil.copy(report.DOC, doc)
    before, rest = doc.read_text().split(report.START)
    after = rest.split(report.END)[1]
    monkeypatch.setattr(report, "DOC", doc)
    monkeypatch.setattr(report, "RESULTS_DIR", tmp_path / "no-results")
    report.write()
    text = doc.read_text()
    assert text.startswith(before + report.START + "\n")
    assert text.endswith(report.END + after)
