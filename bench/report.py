"""Regenerates the figures table of docs/benchmarks.md from bench/results/*.json.

    python -m bench.report

Only the text between the `bench-table` markers is replaced; the prose around it is kept. Run
as a module it also redraws the doc's headline chart (bench/chart.py).

The header names the main run: the top-level stamp of the first results file found (ingest,
latency, tick, memory), which an `--only` rerun leaves alone. Each scenario block carries its
own stamp (machine at its start, and the `--only` list of the run that produced it); the rows
of a block produced by an `--only` rerun say so, and a note under the header names the rerun.
A file written before blocks were stamped falls back to its top-level stamp, which is then
its last writer's, whichever scenarios that run redid; the header says so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench import chart
from bench.catchup_bench import shape_label, thread_text
from bench.common import RESULTS_DIR
from bench.peer_kstreams import CPU_TARGETS as KSTREAMS_CPU_TARGETS
from bench.peer_kstreams import TARGETS as KSTREAMS_TARGETS
from bench.peer_kstreams import target as kstreams_target

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS_DIR / f"{name}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


MODULES = {
    "ingest": "bench.ingest_bench",
    "latency": "bench.latency_bench",
    "catchup": "bench.catchup_bench",
}


class Runs:
    """Which run each part of the table comes from."""

    def __init__(self) -> None:
        self.reruns: list[str] = []  # notes under the header, one per rerun

    def mark(self, name: str, data: dict[str, Any], part: str) -> str:
        """The rows' suffix: empty for a block of the main run, " (rerun N)" for one from an
        `--only` rerun (which gets note N under the header)."""
        block = data[part]
        only = block.get("only") if "machine" in block else None
        if not only:
            return ""
        m = block["machine"]
        note = (
            f"`python -m {MODULES.get(name, name)} --only {','.join(only)}` started {m['at']} "
            f"(load average {m['loadavg'][0]} at start)"
        )
        if note not in self.reruns:
            self.reruns.append(note)
        return f" (rerun {self.reruns.index(note) + 1})"


def _unstamped(data: dict[str, Any]) -> bool:
    """A file of several scenario blocks written before blocks carried their own stamp."""
    blocks = [v for k, v in data.items() if k != "machine" and isinstance(v, dict)]
    return len(blocks) > 1 and not any("machine" in v for v in blocks)


def _cell(text: str, limit: int = 200) -> str:
    """Free text (an error message) made safe for one table cell."""
    flat = " ".join(text.split()).replace("|", "\\|")
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _ratio(r: dict[str, Any]) -> str:
    return f"**{r['median']}** [{r['min']}..{r['max']}]"


def _rate(r: dict[str, Any]) -> str:
    return f"{r['median']:,} [{r['min']:,}..{r['max']:,}]"


def table() -> str:
    """The Markdown of every figure found in bench/results."""
    rows = ["| # | figure | value | target | met |", "| --- | --- | --- | --- | --- |"]
    runs = Runs()
    ingest = _load("ingest")
    if ingest and "throughput" in ingest:
        t = ingest["throughput"]
        rerun = runs.mark("ingest", ingest, "throughput")
        reps = len(t["events_per_s"]["ingest"]["reps"])
        rows.append(
            f"| 1 | ingest events/s ({t['events']:,} events, {reps} reps){rerun} | "
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
                rows.append(
                    f"| {label[:2]} | {label[3:]}{rerun} | {_ratio(t[key])} | {target} | {ok} |"
                )
        for key, label in (
            ("registry_vs_plain", "ingest schema registry mode (our schema) / plain"),
            ("registry_v2_vs_plain", "ingest schema registry mode (evolved v2 schema) / plain"),
        ):
            if key in t:  # no target: the cost of the mode, measured (bench/registry_bench.py)
                rows.append(f"| 1d | {label}{rerun} | {_ratio(t[key])} | | |")
    latency = _load("latency")
    if latency:
        for key, label in (
            ("immediate", "2"),
            ("immediate_batch_timeout_5ms", "2"),
            ("immediate_10k", "2"),
            ("scheduled", "3"),
        ):
            if key in latency:
                r = latency[key]
                sent = r.get("probes", r.get("timelines", r["delivered"]))
                complete = r["delivered"] >= sent
                # Percentiles are over the delivered probes only: a missing probe fails the row.
                ok = "yes" if complete and r["p99_ms"] < r["target_p99_ms"] else "**no**"
                delivered = f"{r['delivered']:,} of {sent:,} delivered"
                if not complete:
                    delivered = f"**{delivered}**"
                background = r.get("background_timelines")
                if background and r.get("background_first_digests", background) < background:
                    delivered += (
                        f", background not settled ({r['background_first_digests']:,} of "
                        f"{background:,} first digests)"
                    )
                rows.append(
                    f"| {label} | {key.replace('_', ' ')}: p50 / p90 / p99 / max (ms), "
                    f"{delivered}{runs.mark('latency', latency, key)}"
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
        rerun = runs.mark("ingest", ingest, "scaling")
        for axis, label in (("batch_size", "batch size"), ("payload_bytes", "payload B")):
            for value, row in s[axis].items():
                rows.append(
                    f"| 6 | {label} {value}: ingest events/s, ingest / raw{rerun} | "
                    f"{_rate(row['ingest'])}, {_ratio(row['ingest_vs_raw'])} | | |"
                )
    prof = ingest.get("profile") if ingest else None
    rerun = runs.mark("ingest", ingest, "profile") if ingest and prof else ""
    if prof:
        top = prof["top_tottime"][:8]
        rows.append(
            f"| 6 | profile, top own time (share of Ingest.step){rerun} | "
            + "; ".join(f"`{e['function']}` {e['tottime_share']:.0%}" for e in top)
            + " | | |"
        )
        if prof.get("py_spy_error"):
            rows.append(f"| 6 | py-spy: no samples{rerun} | {_cell(prof['py_spy_error'])} | | |")
    spy = prof.get("py_spy") if prof else None
    if spy:
        for key, label in (
            ("share_of_step", "the ingest thread's wall time"),
            ("share_of_store_worker", "the store worker's busy time"),
        ):
            shares = sorted(spy.get(key, {}).items(), key=lambda item: item[1], reverse=True)
            if shares:
                rows.append(
                    f"| 6 | py-spy, {label}{rerun} | "
                    + "; ".join(f"{name} {share:.0%}" for name, share in shares)
                    + " | | |"
                )
    rows += _catchup_rows(runs)
    return _head(runs) + "\n".join(rows) + "\n"


def _catchup_rows(runs: Runs) -> list[str]:
    """Scenarios 7 and 8 (bench/catchup_bench.py): catch-up from cold, delivery, processes."""
    data = _load("catchup")
    if not data:
        return []
    rows = []
    if "catchup" in data:
        block = data["catchup"]
        rerun = runs.mark("catchup", data, "catchup")
        for shape, row in block["shapes"].items():
            least = block["targets"][shape]
            ok = "yes" if row["steady_vs_raw"]["median"] >= least else "**no**"
            rows.append(
                f"| 7 | catch-up from cold, {shape_label(shape)}, {block['events']:,} events: "
                f"events/s steady {_rate(row['steady'])}, from cold {_rate(row['from_cold'])}, "
                f"raw {_rate(row['raw'])}{rerun} | catch-up / raw "
                f"{_ratio(row['steady_vs_raw'])} | >= {least} | {ok} |"
            )
            if "split" in row:  # written since the split runs were added
                rows.append(
                    f"| 7 | the same, roles split over two processes (ingest,scheduler + "
                    f"delivery): events/s steady {_rate(row['split'])}{rerun} | split / raw "
                    f"{_ratio(row['split_vs_raw'])}, split / one process "
                    f"{_ratio(row['split_vs_one'])} | | |"
                )
            for guarantee, targets in block.get("kstreams_targets", {}).items():
                text, least = kstreams_target(targets[shape])
                r = row["vs_kstreams"][guarantee]
                ok = "yes" if r["median"] >= least else "**no**"
                rows.append(
                    f"| 7k | the same backlog through Kafka Streams {guarantee} (session "
                    f"windows, suppress, RocksDB): events/s steady "
                    f"{_rate(row['kstreams'][guarantee])}{rerun} | digest-stream / Kafka "
                    f"Streams {_ratio(r)} | {text} | {ok} |"
                )
            if "cpu_per_100k" in row:  # written since CPU was measured
                rows.append(_cpu_row(block, shape, row, rerun))
        if "kstreams_missing" in block:
            missing = _cell(block["kstreams_missing"])
            rows.append(f"| 7k | Kafka Streams peer not run{rerun} | {missing} | | |")
    if "long" in data:
        rows += _long_rows(data["long"], runs.mark("catchup", data, "long"))
    if "processes" in data:
        block = data["processes"]
        rerun = runs.mark("catchup", data, "processes")
        rows.append(
            f"| 7 | catch-up, 20 events/timeline, 1 vs 2 processes: events/s "
            f"{_rate(block['one'])} vs {_rate(block['two'])}{rerun} | "
            f"2 / 1 {_ratio(block['two_vs_one'])} | | |"
        )
    if "delivery" in data:
        block = data["delivery"]
        rerun = runs.mark("catchup", data, "delivery")
        ok = "yes" if block["steady"]["median"] >= block["target_digests_per_s"] else "**no**"
        rows.append(
            f"| 8 | delivery, {block['digests']:,} new timelines (a digest each): digests/s "
            f"{_rate(block['steady'])} (from cold {_rate(block['from_cold'])}) vs bare "
            f"idempotent produce {_rate(block['bare_produce'])} msgs/s{rerun} | "
            f"delivery / bare {_ratio(block['steady_vs_bare'])} | "
            f">= {block['target_digests_per_s']:,} digests/s | {ok} |"
        )
        if "end_to_end" in block:  # written since the end-to-end runs were added
            least = block["target_end_to_end_vs_bare"]
            for label, row in (
                ("direct_leading_edge off", block["end_to_end"]),
                ("direct_leading_edge (the default)", block["end_to_end_direct"]),
            ):
                ok = "yes" if row["steady_vs_bare"]["median"] >= least else "**no**"
                rows.append(
                    f"| 8e | the same backlog end to end (all roles, one process), {label}: "
                    f"digests/s steady {_rate(row['steady'])}, from cold "
                    f"{_rate(row['from_cold'])}{rerun} | end to end / bare "
                    f"{_ratio(row['steady_vs_bare'])} | >= {least} | {ok} |"
                )
    return rows


def _cpu_row(block: dict[str, Any], shape: str, row: dict[str, Any], rerun: str) -> str:
    """CPU-seconds per 100,000 events over the steady window: digest-stream's service and Redis
    beside the Kafka Streams peer's JVM, and ours / at-least-once's against its target."""
    own = row["cpu_per_100k"]
    figure = (
        f"| 7c | CPU-seconds per 100,000 events, {shape_label(shape)} (steady window): "
        f"digest-stream service {_rate(own['process'])} + Redis {_rate(own['redis'])} = "
        f"{_rate(own['total'])}"
    )
    threads = row.get("cpu_threads_per_100k")
    if threads:  # written since the service names its threads
        figure += f" (service by thread: {thread_text(threads)})"
    theirs = row.get("kstreams_cpu_per_100k", {})
    figure += "".join(f"; Kafka Streams {g} {_rate(v)}" for g, v in theirs.items())
    if "cpu_vs_kstreams" not in row:
        return f"{figure}{rerun} | | | |"
    r = row["cpu_vs_kstreams"]["at-least-once"]
    least = block["cpu_targets"][shape]
    ok = "yes" if r["median"] <= least else "**no**"
    return (
        f"{figure}{rerun} | digest-stream / Kafka Streams at-least-once {_ratio(r)} | "
        f"<= {least} | {ok} |"
    )


def _long_rows(block: dict[str, Any], rerun: str) -> list[str]:
    """Scenario 7's long runs: backlogs that amortise the JVM's warm-up (and at 20 per timeline
    span several of at-least-once's 30 s commits); one process against one stream thread (7L),
    then two processes against two stream threads on the same backlogs (7N)."""
    rows = [
        _long_row("7L", shape, run, rerun, "one run each")
        for shape, run in block.get("shapes", {}).items()
    ]
    for shape, run in block.get("two_processes", {}).items():
        gained = run.get("vs_one", {})
        note = f"{run['processes']} digest-stream processes (all roles, one group)"
        if "kstreams" in run:
            note += f" against {run['kstreams']['threads']} Kafka Streams stream threads"
        if gained:
            note += (
                " (two / one on the same backlog: "
                + ", ".join(f"{side} {value}" for side, value in gained.items())
                + ")"
            )
        rows.append(_long_row("7N", shape, run, rerun, note))
    return rows


def _long_row(label: str, shape: str, run: dict[str, Any], rerun: str, how: str) -> str:
    """One long run's row: both rates and CPU per event, ours / theirs against the targets."""
    own = run["cpu_per_100k"]
    figure = (
        f"| {label} | long catch-up, {run['events']:,} events at {shape_label(shape)}, {how}: "
        f"digest-stream steady {run['steady']:,}/s (CPU-s per 100k events: service "
        f"{own['process']} + Redis {own['redis']} = {own['total']}"
    )
    threads = run.get("cpu_threads_per_100k")
    figure += f"; service by thread: {thread_text(threads)})" if threads else ")"
    if "kstreams" not in run:
        missing = _cell(run.get("kstreams_missing", ""))
        return f"{figure}; Kafka Streams not run: {missing}{rerun} | | | |"
    peer = run["kstreams"]
    cache = f", record cache {peer['cache_bytes'] >> 20} MB" if "cache_bytes" in peer else ""
    text, least = kstreams_target(KSTREAMS_TARGETS["at-least-once"][shape])
    most = KSTREAMS_CPU_TARGETS[shape]
    rate_ok = "yes" if run["vs_kstreams"] >= least else "**no**"
    cpu_ok = "yes" if run["cpu_vs_kstreams"] <= most else "**no**"
    return (
        f"{figure}; Kafka Streams at-least-once {peer['steady']:,}/s over "
        f"{peer['steady_seconds']} s (CPU-s per 100k {peer['cpu_per_100k']}{cache}){rerun} | "
        f"digest-stream / Kafka Streams **{run['vs_kstreams']}**, CPU "
        f"**{run['cpu_vs_kstreams']}** | rate {text}, CPU <= {most} | "
        f"rate {rate_ok}, CPU {cpu_ok} |"
    )


def _head(runs: Runs) -> str:
    """The main run's stamp, and a note per rerun whose rows the table marks."""
    for name in ("ingest", "latency", "tick", "memory"):
        data = _load(name)
        if data and "machine" in data:
            break
    else:
        return ""
    m = data["machine"]
    where = (
        f"on {m['nproc']} cores of `{m['cpu']}` (load average {m['loadavg'][0]} at start), "
        f"Python {m['python']}, Redis {m['redis']}, Kafka {m['kafka']} (local stack)."
    )
    if _unstamped(data):
        head = (
            f"Stamp of {name}.json: {m['at']} {where} The file predates per-scenario stamps, "
            "so this is its last writer's stamp, which may be a rerun of only some of its "
            "scenarios (`--only`); see 'Which run a row comes from' in the doc."
        )
    else:
        head = f"Main run: started {m['at']} {where}"
    notes = "".join(f"\n\nRerun {i}: {note}." for i, note in enumerate(runs.reruns, 1))
    return head + notes + "\n\n"


def write() -> Path:
    """Replace the table in docs/benchmarks.md."""
    text = DOC.read_text()
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    DOC.write_text(f"{before}{START}\n{table()}{END}{after}")
    return DOC


if __name__ == "__main__":
    print(write())
    print(chart.write() or "no catch-up or ingest results: chart left as it was")
    sys.exit(0)
