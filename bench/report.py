"""Regenerates the figures table of docs/benchmarks.md from bench/results/*.json.

    python -m bench.report

Only the text between the `bench-table` markers is replaced; the prose around it is kept.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS_DIR / f"{name}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _ratio(r: dict[str, Any]) -> str:
    return f"**{r['median']}** [{r['min']}..{r['max']}]"


def _rate(r: dict[str, Any]) -> str:
    return f"{r['median']:,} [{r['min']:,}..{r['max']:,}]"


def table() -> str:
    """The Markdown of every figure found in bench/results."""
    rows = ["| # | figure | value | target | met |", "| --- | --- | --- | --- | --- |"]
    machine: dict[str, Any] | None = None
    ingest = _load("ingest")
    if ingest:
        machine = ingest["machine"]
        t = ingest["throughput"]
        reps = len(t["events_per_s"]["ingest"]["reps"])
        rows.append(
            f"| 1 | ingest events/s ({t['events']:,} events, {reps} reps) | "
            + ", ".join(f"{k} {_rate(v)}" for k, v in t["events_per_s"].items())
            + " | | |"
        )
        targets: tuple[tuple[str, str, str, float], ...] = (
            ("ingest_vs_raw", "1a ingest / raw consume+decode", ">= 0.60", 0.6),
            ("ingest_vs_seed", "1b ingest / seed-style store", ">= 5", 5.0),
            ("ingest_vs_quix", "1c ingest / Quix Streams", "> 1", 1.0 + 1e-9),
        )
        for key, label, target, least in targets:
            if key in t:
                ok = "yes" if t[key]["median"] >= least else "**no**"
                rows.append(f"| {label[:2]} | {label[3:]} | {_ratio(t[key])} | {target} | {ok} |")
    latency = _load("latency")
    if latency:
        for key, label in (
            ("immediate", "2"),
            ("immediate_batch_timeout_5ms", "2"),
            ("scheduled", "3"),
        ):
            if key in latency:
                r = latency[key]
                ok = "yes" if r["p99_ms"] < r["target_p99_ms"] else "**no**"
                rows.append(
                    f"| {label} | {key.replace('_', ' ')}: p50 / p90 / p99 / max (ms), "
                    f"{r['delivered']:,} samples"
                    f" | {r['p50_ms']} / {r['p90_ms']} / **{r['p99_ms']}** / "
                    f"{r['max_ms']} | p99 < {r['target_p99_ms']} | {ok} |"
                )
    memory = _load("memory")
    if memory:
        check = memory.get("memory_usage_check", {})
        for shape, row in memory["per_timeline"].items():
            ok = "yes" if row["ratio"] <= 0.5 else "**no**"
            rows.append(
                f"| 4 | memory per record beyond payload, {shape} record(s)/timeline: "
                f"store {row['store_bytes']} B vs seed-style {row['seed_style_bytes']} B "
                f"(MEMORY USAGE check: {check.get(shape, '-')}) | "
                f"**{row['ratio']}** [{min(row['ratio_reps'])}..{max(row['ratio_reps'])}] "
                f"| <= 0.5 | {ok} |"
            )
    tick = _load("tick")
    if tick:
        for total, row in tick["sizes"].items():
            rows.append(
                f"| 5 | tick ms, {int(total):,} waiting: 1% due ({row['due_1pct']['due']:,}) / "
                f"1,000 due / none due | {row['due_1pct']['ms']['median']} / "
                f"{row['due_1000']['ms']['median']} / {row['due_0']['ms']['median']} "
                f"({row['due_1pct']['us_per_due']} us per due) | | |"
            )
        g = tick["growth_total_x10"]
        ok = "yes" if g["due_1000"] < 2 and g["due_0"] < 2 else "**no**"
        rows.append(
            f"| 5 | x10 waiting: cost growth at 1% due / 1,000 due / none due | "
            f"{g['due_1pct']} / **{g['due_1000']}** / **{g['due_0']}** | "
            "with due, not total (~10 / ~1 / ~1) | " + ok + " |"
        )
    if ingest and "scaling" in ingest:
        s = ingest["scaling"]
        for axis, label in (("batch_size", "batch size"), ("payload_bytes", "payload B")):
            for value, row in s[axis].items():
                rows.append(
                    f"| 6 | {label} {value}: ingest events/s, ingest / raw | "
                    f"{_rate(row['ingest'])}, {_ratio(row['ingest_vs_raw'])} | | |"
                )
    if ingest and "profile" in ingest:
        top = ingest["profile"]["top_tottime"][:8]
        rows.append(
            "| 6 | profile, top own time (share of Ingest.step) | "
            + "; ".join(f"`{e['function']}` {e['tottime_share']:.0%}" for e in top)
            + " | | |"
        )
    spy = ingest["profile"].get("py_spy") if ingest and "profile" in ingest else None
    if spy:
        for key, label in (
            ("share_of_step", "the ingest thread's wall time"),
            ("share_of_store_worker", "the store worker's busy time"),
        ):
            shares = sorted(spy.get(key, {}).items(), key=lambda item: item[1], reverse=True)
            if shares:
                rows.append(
                    f"| 6 | py-spy, {label} | "
                    + "; ".join(f"{name} {share:.0%}" for name, share in shares)
                    + " | | |"
                )
    head = ""
    if machine:
        head = (
            f"Produced {machine['at']} on {machine['nproc']} cores of `{machine['cpu']}` "
            f"(load average {machine['loadavg'][0]} at start), Python {machine['python']}, "
            f"Redis {machine['redis']}, Kafka {machine['kafka']} (local stack).\n\n"
        )
    return head + "\n".join(rows) + "\n"


def write() -> Path:
    """Replace the table in docs/benchmarks.md."""
    text = DOC.read_text()
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    DOC.write_text(f"{before}{START}\n{table()}{END}{after}")
    return DOC


if __name__ == "__main__":
    print(write())
    sys.exit(0)
