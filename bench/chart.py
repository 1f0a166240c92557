"""The headline chart of docs/benchmarks.md: digest-stream against its peers, per shape.

    python -m bench.chart

Reads bench/results/catchup.json (scenario 7: the long runs and the 100,000-event catch-ups,
against Kafka Streams) and ingest.json (scenario 1: the ingest against Quix Streams) and draws
grouped horizontal bars, each group a shape, each row a series with its rate and its CPU per
event side by side. The SVG is written by hand (no plotting dependency), on a white
background so it reads on light and dark pages alike. A figure the results lack (a peer not
built, an older file without CPU) is left out, and a shape with no figure is no group.
`bench.run` redraws it with the table.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from bench.catchup_bench import SHAPES
from bench.common import RESULTS_DIR

CHART = Path(__file__).resolve().parents[1] / "docs" / "images" / "benchmarks-headline.svg"
OURS = "digest-stream"
GUARANTEES = ("at-least-once", "exactly-once")
#: One colour per series; a series not named here takes OTHER.
COLOURS = {
    OURS: "#1d4ed8",
    "Kafka Streams at-least-once": "#d97706",
    "Kafka Streams exactly-once": "#9ca3af",
    "Quix Streams": "#059669",
}
OTHER = "#7c3aed"
# The layout, in px: the series names' column, then the rates' and the CPU's columns (a bar
# at most *_BAR long, its value printed after it).
LEFT, NAMES, RATE_BAR, RATE_TEXT, CPU_BAR, CPU_TEXT = 16, 190, 190, 215, 150, 270
RATE_X = LEFT + NAMES
CPU_X = RATE_X + RATE_BAR + RATE_TEXT
WIDTH = CPU_X + CPU_BAR + CPU_TEXT
ROW, HEAD = 20, 24


@dataclass(frozen=True)
class Figure:
    """One measured value and the text printed after its bar."""

    value: float
    text: str


@dataclass(frozen=True)
class Row:
    """One series in one group: its rate and its CPU per event, either possibly unmeasured."""

    series: str
    rate: Figure | None
    cpu: Figure | None


@dataclass(frozen=True)
class Group:
    """The rows of one shape (or one scenario), under its label."""

    label: str
    rows: tuple[Row, ...]


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _number(value: Any) -> float | None:
    """A figure's value: a summary's median, or a plain number; None when absent."""
    if isinstance(value, dict):
        value = value.get("median")
    return float(value) if isinstance(value, int | float) else None


def _shape_text(shape: str, run: dict[str, Any]) -> str:
    """'1 per timeline', '20 per timeline, interleaved'; a key it cannot read, as it is."""
    if shape in SHAPES:
        per_timeline, interleaved = SHAPES[shape]
    elif isinstance(run.get("per_timeline"), int):
        per_timeline, interleaved = run["per_timeline"], bool(run.get("interleaved"))
    else:
        return shape
    return f"{per_timeline:,} per timeline" + (", interleaved" if interleaved else "")


def _order(shapes: dict[str, Any]) -> list[str]:
    """Scenario 7's shapes in their own order, then any other key the results hold."""
    return [s for s in SHAPES if s in shapes] + [s for s in shapes if s not in SHAPES]


def _rate(value: Any, versus: Any = None, peer: str = "at-least-once") -> Figure | None:
    rate = _number(value)
    if rate is None:
        return None
    ratio = _number(versus)
    return Figure(rate, f"{rate:,.0f}/s" + (f" · {ratio:.2f}x {peer}" if ratio else ""))


def _cpu(total: Any, redis: Any = None, versus: Any = None) -> Figure | None:
    value = _number(total)
    if value is None:
        return None
    text = f"{value:.2f}"
    if (redis_part := _number(redis)) is not None:
        text += f" (Redis {redis_part:.2f})"
    if (ratio := _number(versus)) is not None:
        text += f" · {ratio:.2f} of at-least-once"
    return Figure(value, text)


def _group(label: str, rows: list[Row]) -> list[Group]:
    """The group, or none when no row holds a figure."""
    kept = tuple(row for row in rows if row.rate or row.cpu)
    return [Group(label, kept)] if kept else []


def long_groups(long: dict[str, Any]) -> list[Group]:
    """The long runs (scenario 7L): one run each, digest-stream and Kafka Streams."""
    groups = []
    for shape in _order(long.get("shapes", {})):
        run = long["shapes"][shape]
        own = run.get("cpu_per_100k", {})
        rows = [
            Row(
                OURS,
                _rate(run.get("steady"), run.get("vs_kstreams")),
                _cpu(own.get("total"), own.get("redis"), run.get("cpu_vs_kstreams")),
            )
        ]
        peer = run.get("kstreams")
        if peer:
            name = f"Kafka Streams {peer.get('guarantee', 'at-least-once')}"
            rows.append(Row(name, _rate(peer.get("steady")), _cpu(peer.get("cpu_per_100k"))))
        label = f"{_shape_text(shape, run)}: {run['events']:,} events, long run (JVM warm)"
        groups += _group(label, rows)
    return groups


def catchup_groups(block: dict[str, Any]) -> list[Group]:
    """The 100,000-event catch-ups (scenarios 7, 7k, 7c): medians over the repetitions."""
    groups = []
    for shape in _order(block.get("shapes", {})):
        row = block["shapes"][shape]
        own = row.get("cpu_per_100k", {})
        rows = [
            Row(
                OURS,
                _rate(row.get("steady"), row.get("vs_kstreams", {}).get("at-least-once")),
                _cpu(
                    own.get("total"),
                    own.get("redis"),
                    row.get("cpu_vs_kstreams", {}).get("at-least-once"),
                ),
            )
        ]
        for guarantee in GUARANTEES:
            rows.append(
                Row(
                    f"Kafka Streams {guarantee}",
                    _rate(row.get("kstreams", {}).get(guarantee)),
                    _cpu(row.get("kstreams_cpu_per_100k", {}).get(guarantee)),
                )
            )
        label = f"{_shape_text(shape, row)}: {block['events']:,} events (the peer's JVM warms up)"
        groups += _group(label, rows)
    return groups


def ingest_groups(throughput: dict[str, Any]) -> list[Group]:
    """Scenario 1: the ingest alone against Quix Streams on one partition (rates only)."""
    rates = throughput.get("events_per_s", {})
    rows = [
        Row(OURS, _rate(rates.get("ingest"), throughput.get("ingest_vs_quix"), "Quix"), None),
        Row("Quix Streams", _rate(rates.get("quix")), None),
    ]
    timelines = throughput.get("timelines")
    per = f"{throughput['events'] // timelines} per timeline, interleaved: " if timelines else ""
    return _group(f"ingest alone, no digests, {per}{throughput['events']:,} events", rows)


def groups(results: Path = RESULTS_DIR) -> tuple[list[Group], list[dict[str, Any]]]:
    """The chart's groups from the results files, and the machine stamp of each run they come
    from (when it started, the cores)."""
    found: list[Group] = []
    machines: list[dict[str, Any]] = []
    catchup = _load(results, "catchup") or {}
    ingest = _load(results, "ingest") or {}
    for data, part, make in (
        (catchup, "long", long_groups),
        (catchup, "catchup", catchup_groups),
        (ingest, "throughput", ingest_groups),
    ):
        if part in data:
            more = make(data[part])
            found += more
            machine = data[part].get("machine") or data.get("machine") or {}
            if more and machine and machine not in machines:
                machines.append(machine)
    return found, machines


def _text(x: float, y: float, text: str, extra: str = "") -> str:
    return f"<text x='{x:.0f}' y='{y:.0f}'{' ' + extra if extra else ''}>{escape(text)}</text>"


def _bar(x: float, y: float, length: float, series: str, column: str, figure: Figure) -> str:
    colour = COLOURS.get(series, OTHER)
    tip = escape(f"{series}, {column}: {figure.text}")
    return (
        f"<rect class='bar' data-series={quoteattr(series)} data-column='{column}' "
        f"x='{x:.0f}' y='{y + 3:.0f}' width='{length:.1f}' height='{ROW - 6}' fill='{colour}'>"
        f"<title>{tip}</title></rect>\n" + _text(x + length + 5, y + 14, figure.text)
    )


def svg(found: list[Group], subtitle: str, caption: list[str]) -> str:
    """The SVG document: a title, a legend, the groups' bars in two columns, the caption."""
    series = list(dict.fromkeys(row.series for g in found for row in g.rows))
    rate_scale = RATE_BAR / max((r.rate.value for g in found for r in g.rows if r.rate), default=1)
    cpu_scale = CPU_BAR / max((r.cpu.value for g in found for r in g.rows if r.cpu), default=1)
    body = [
        _text(LEFT, 26, "digest-stream against its peers", "font-size='18' font-weight='bold'"),
        _text(LEFT, 46, subtitle, "fill='#4b5563'"),
    ]
    x = LEFT
    for name in series:  # the legend: one swatch per series
        body.append(
            f"<rect x='{x}' y='58' width='12' height='12' fill='{COLOURS.get(name, OTHER)}'/>"
        )
        body.append(_text(x + 17, 69, name))
        x += 32 + round(6.8 * len(name))
    y = 100.0
    body.append(_text(RATE_X, y, "events/s, steady (higher is better)", "font-weight='bold'"))
    body.append(_text(CPU_X, y, "CPU-s per 100,000 events (lower is better)", "font-weight='bold'"))
    for group in found:
        y += HEAD
        body.append(_text(LEFT, y, group.label, "font-weight='bold'"))
        y += 4
        for row in group.rows:
            body.append(_text(LEFT + 8, y + 14, row.series))
            if row.rate:
                body.append(
                    _bar(
                        RATE_X, y, max(row.rate.value * rate_scale, 1), row.series, "rate", row.rate
                    )
                )
            if row.cpu:
                body.append(
                    _bar(CPU_X, y, max(row.cpu.value * cpu_scale, 1), row.series, "cpu", row.cpu)
                )
            y += ROW
    y += 10
    for line in caption:
        y += 16
        body.append(_text(LEFT, y, line, "fill='#4b5563'"))
    height = round(y + 14)
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height}' "
        f"viewBox='0 0 {WIDTH} {height}' font-family='Helvetica, Arial, sans-serif' "
        f"font-size='12' fill='#111827'>\n"
        f"<rect width='100%' height='100%' fill='#ffffff'/>\n" + "\n".join(body) + "\n</svg>\n"
    )


def write(path: Path = CHART, results: Path = RESULTS_DIR) -> Path | None:
    """Draw the chart from the results into `path`; None (the file left alone) when the
    results hold no figure for it."""
    found, machines = groups(results)
    if not found:
        return None
    cores = sorted({str(m["nproc"]) for m in machines if m.get("nproc")})
    started = ", ".join(str(m["at"]) for m in machines if m.get("at")) or "at an unrecorded time"
    subtitle = "Backlogs of 200 B events read from Kafka, one digest-stream process" + (
        f", on {' and '.join(cores)} cores shared with Kafka and Redis" if cores else ""
    )
    caption = [
        f"bench/results of the run(s) started {started}: "
        "medians over make bench's repetitions; a long run is one run of each.",
        "CPU: digest-stream's service process plus its Redis server; the peer's JVM. "
        "docs/benchmarks.md says how each figure is measured.",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg(found, subtitle, caption), encoding="utf-8")
    return path


if __name__ == "__main__":
    drawn = write()
    print(drawn or "no catch-up or ingest results in bench/results: nothing drawn")
    sys.exit(0)
