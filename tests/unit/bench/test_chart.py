"""The headline chart of docs/benchmarks.md (bench/chart.py), drawn from results files without
a broker: a valid SVG with one bar per figure and every label, whatever peer the results lack.

The fixture (results_20261127/) holds the figures of the 2026-11-27 12:31 UTC `make bench`
that docs/benchmarks.md's table shows, in the layout bench/results/*.json has."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from bench import chart

FIXTURE = Path(__file__).resolve().parent / "results_20261127"
SVG = "{http://www.w3.org/2000/svg}"


def _draw(results: Path, out: Path) -> ET.Element:
    drawn = chart.write(out / "chart.svg", results)
    assert drawn is not None
    return ET.fromstring(drawn.read_text(encoding="utf-8"))


def _bars(root: ET.Element) -> list[ET.Element]:
    return [rect for rect in root.iter(f"{SVG}rect") if rect.get("class") == "bar"]


def _texts(root: ET.Element) -> list[str]:
    return [text.text or "" for text in root.iter(f"{SVG}text")]


def _figures(results: Path) -> int:
    """The figures the fixture holds, counted from the JSON itself (not through bench.chart)."""
    catchup = json.loads((results / "catchup.json").read_text())
    count = 0
    for run in catchup["long"]["shapes"].values():
        count += 2  # digest-stream's rate and CPU
        if "kstreams" in run:
            count += 2
    for row in catchup["catchup"]["shapes"].values():
        count += 2 + len(row.get("kstreams", {})) + len(row.get("kstreams_cpu_per_100k", {}))
    rates = json.loads((results / "ingest.json").read_text())["throughput"]["events_per_s"]
    return count + len({"ingest", "quix"} & set(rates))


def _copy(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    shutil.copytree(FIXTURE, results)
    return results


def _edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_the_chart_is_an_svg_with_one_bar_per_figure_on_a_white_background(
    tmp_path: Path,
) -> None:
    root = _draw(FIXTURE, tmp_path)
    assert root.tag == f"{SVG}svg"
    assert float(root.get("width", 0)) > 0
    assert float(root.get("height", 0)) > 0
    background = next(root.iter(f"{SVG}rect"))
    assert (background.get("width"), background.get("fill")) == ("100%", "#ffffff")
    bars = _bars(root)
    assert len(bars) == _figures(FIXTURE) == 34
    assert all(float(bar.get("width", 0)) > 0 for bar in bars)
    # The longest bar of each column is its largest value: the scale is the column's own.
    for column, most in (("rate", chart.RATE_BAR), ("cpu", chart.CPU_BAR)):
        widths = [float(b.get("width", 0)) for b in bars if b.get("data-column") == column]
        assert max(widths) == most


def test_the_chart_names_every_shape_series_and_value(tmp_path: Path) -> None:
    texts = _texts(_draw(FIXTURE, tmp_path))
    for label in (
        "1 per timeline: 500,000 events, long run (JVM warm)",
        "20 per timeline: 1,500,000 events, long run (JVM warm)",
        "20 per timeline, interleaved: 100,000 events (the peer's JVM warms up)",
        "1,000 per timeline: 100,000 events (the peer's JVM warms up)",
        "ingest alone, no digests, 10 per timeline, interleaved: 50,000 events",
    ):
        assert label in texts
    for series in chart.COLOURS:
        assert series in texts, f"{series} has no legend entry"
    # Each figure's value is printed beside its bar, ours with the ratio to the fair peer.
    for value in (
        "22,162/s · 1.12x at-least-once",
        "19,856/s",
        "6.18 (Redis 2.64) · 0.73 of at-least-once",
        "8.45",
        "30,512/s · 2.02x at-least-once",
        "7,169/s",
        "19.79",
        "48,654/s · 2.66x Quix",
    ):
        assert value in texts
    assert any("2026-11-27T12:31:30Z" in text for text in texts), "the caption names the run"


def test_a_peer_missing_from_the_results_leaves_its_bars_out(tmp_path: Path) -> None:
    results = _copy(tmp_path)

    def no_kafka_streams(data: dict[str, Any]) -> None:
        # As catchup_bench writes it when the peer is not built.
        data["catchup"]["kstreams_missing"] = "not built"
        for row in data["catchup"]["shapes"].values():
            for key in ("kstreams", "vs_kstreams", "kstreams_cpu_per_100k", "cpu_vs_kstreams"):
                del row[key]
        for run in data["long"]["shapes"].values():
            for key in ("kstreams", "vs_kstreams", "cpu_vs_kstreams"):
                del run[key]
            run["kstreams_missing"] = "not built"

    _edit(results / "catchup.json", no_kafka_streams)

    def no_quix(data: dict[str, Any]) -> None:  # as ingest_bench writes it without the peer
        throughput = data["throughput"]
        del throughput["events_per_s"]["quix"], throughput["ingest_vs_quix"]
        throughput["quix_missing"] = "not found"

    _edit(results / "ingest.json", no_quix)
    root = _draw(results, tmp_path)
    bars = _bars(root)
    assert {bar.get("data-series") for bar in bars} == {chart.OURS}
    assert len(bars) == 2 * 6 + 1  # rate and CPU per shape, the ingest's rate
    texts = _texts(root)
    assert "22,162/s" in texts  # no ratio without the peer
    assert not any("Kafka Streams" in text or "Quix" in text for text in texts)


def test_results_without_cpu_or_a_long_run_still_draw_what_they_hold(tmp_path: Path) -> None:
    results = _copy(tmp_path)

    def older(data: dict[str, Any]) -> None:  # a file from before CPU and the long runs
        del data["long"]
        for row in data["catchup"]["shapes"].values():
            for key in ("cpu_per_100k", "kstreams_cpu_per_100k", "cpu_vs_kstreams"):
                del row[key]

    _edit(results / "catchup.json", older)
    (results / "ingest.json").unlink()
    bars = _bars(_draw(results, tmp_path))
    assert len(bars) == 4 * 3  # three rates per shape, no CPU
    assert {bar.get("data-column") for bar in bars} == {"rate"}


def test_a_shape_the_chart_does_not_know_is_drawn_under_its_own_key(tmp_path: Path) -> None:
    results = _copy(tmp_path)

    def two_processes(data: dict[str, Any]) -> None:
        run = dict(data["long"]["shapes"]["1"])
        del run["per_timeline"]
        data["long"]["shapes"]["1x2"] = run

    _edit(results / "catchup.json", two_processes)
    texts = _texts(_draw(results, tmp_path))
    assert "1x2: 500,000 events, long run (JVM warm)" in texts


def test_no_results_draw_nothing_and_leave_the_chart_alone(tmp_path: Path) -> None:
    out = tmp_path / "chart.svg"
    out.write_text("kept")
    assert chart.write(out, tmp_path / "empty") is None
    assert out.read_text() == "kept"
