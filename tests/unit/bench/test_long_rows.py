"""The catch-up bench's long runs (issue 37): their shapes and sizes, the N-against-N rows, and
how the headline and the report's table show them, without a broker."""

from __future__ import annotations

from typing import Any

import pytest

from bench.catchup_bench import (
    LONG,
    LONG_EVENTS,
    PAIRED,
    SHAPES,
    TWO,
    kstreams_headline,
    long_counts,
    vs_one,
)
from bench.report import _long_rows

AT = "2026-12-02T00:00:00Z"


def _run(shape: str, processes: int, ours: int, theirs: int | None) -> dict[str, Any]:
    """A long run's row as long_run writes it (theirs None: the peer not built)."""
    per_timeline, interleaved = SHAPES[shape]
    run: dict[str, Any] = {
        "events": 1_500_000 if per_timeline == 20 else 500_000,
        "per_timeline": per_timeline,
        "interleaved": interleaved,
        "processes": processes,
        "steady": ours,
        "steady_seconds": 20.0,
        "from_cold": ours // 2,
        "cpu_per_100k": {"process": 1.5, "redis": 1.0, "total": 2.5},
        "cpu_threads_per_100k": {"digest-ingest": 1.0, "librdkafka": 0.01},
    }
    if theirs is None:
        return run | {"kstreams_missing": "kstreams-peer.jar not built"}
    return run | {
        "kstreams": {
            "guarantee": "at-least-once",
            "threads": processes,
            "cache_bytes": 512 << 20,
            "steady": theirs,
            "steady_seconds": 30.0,
            "cpu_per_100k": 5.0,
        },
        "vs_kstreams": round(ours / theirs, 3),
        "cpu_vs_kstreams": 0.5,
    }


def _block() -> dict[str, Any]:
    shapes = {"1": _run("1", 1, 60_000, 30_000), "20i": _run("20i", 1, 50_000, 40_000)}
    shapes["20"] = _run("20", 1, 90_000, 40_000)
    two = {"1": _run("1", TWO, 90_000, 40_000), "20i": _run("20i", TWO, 70_000, 60_000)}
    for shape, run in two.items():
        run["vs_one"] = vs_one(run, shapes[shape])
    return {"shapes": shapes, "two_processes": two, "machine": {"at": AT}}


def test_long_runs_cover_one_and_twenty_interleaved_and_pair_both() -> None:
    assert LONG["1"][0] == 500_000
    assert LONG["20i"][0] == 1_500_000
    assert SHAPES["20i"] == (20, True)
    assert set(LONG) <= set(SHAPES)
    assert set(PAIRED) <= set(LONG)
    assert PAIRED == ("1", "20i")
    assert TWO == 2


def test_long_counts_take_the_test_size_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LONG_EVENTS, raising=False)
    assert long_counts(False) == {shape: full for shape, (full, _) in LONG.items()}
    assert long_counts(True) == {shape: short for shape, (_, short) in LONG.items()}
    monkeypatch.setenv(LONG_EVENTS, "20000")
    assert set(long_counts(False).values()) == {20_000}


def test_vs_one_is_what_the_second_process_or_thread_bought_each_side() -> None:
    block = _block()
    assert block["two_processes"]["1"]["vs_one"] == {"digest-stream": 1.5, "kstreams": 1.333}
    alone = vs_one(_run("1", TWO, 90_000, None), _run("1", 1, 60_000, None))
    assert alone == {"digest-stream": 1.5}


def test_headline_shows_every_long_run_without_the_catchup_block() -> None:
    # An `--only long` run's result holds no "catchup" block: its long lines still print.
    lines = kstreams_headline({"long": _block()})
    assert len(lines) == 5
    one, pair = lines[0], lines[3]
    assert one.startswith("catch-up / KStreams ALOS, long 1/tl ")
    assert "2.0  target >= 2" in one
    assert "60,000 vs 30,000 events/s" in one
    assert "CPU-s per 100k 1.5 + Redis 1.0 vs 5.0, ours / theirs 0.5, target <= 0.5" in one
    assert pair.startswith("catch-up / KStreams ALOS, long 1/tl, 2 procs / 2 threads ")
    assert "long 20i/tl, 2 procs / 2 threads" in lines[4]


def test_report_rows_of_one_against_one_and_two_against_two() -> None:
    rows = _long_rows(_block(), "")
    assert [row.split(" | ")[0] for row in rows] == ["| 7L"] * 3 + ["| 7N"] * 2
    assert "1,500,000 events at 20 event(s)/timeline, interleaved, one run each" in rows[1]
    assert "service by thread: ingest 1.0)" in rows[0]  # librdkafka's 0.01 left out
    assert "record cache 512 MB" in rows[0]
    two = rows[3]
    assert "2 digest-stream processes (all roles, one group) against 2 Kafka Streams" in two
    assert "(two / one on the same backlog: digest-stream 1.5, kstreams 1.333)" in two
    assert two.endswith(
        "| digest-stream / Kafka Streams **2.25**, CPU **0.5** | rate >= 2, CPU <= 0.5 | "
        "rate yes, CPU yes |"
    )
    assert rows[4].endswith("| rate **no**, CPU yes |")  # 70,000 / 60,000 is under twice


def test_report_rows_without_the_peer_and_from_an_older_file() -> None:
    missing = {"shapes": {"1": _run("1", 1, 60_000, None)}, "two_processes": {}}
    (row,) = _long_rows(missing, " (rerun 1)")
    assert "Kafka Streams not run: kstreams-peer.jar not built (rerun 1) | | | |" in row
    # Written before issue 37: no interleaved shape, no threads, cache or N-against-N rows.
    old = _run("20", 1, 90_000, 40_000)
    for key in ("interleaved", "processes", "cpu_threads_per_100k"):
        del old[key]
    del old["kstreams"]["threads"], old["kstreams"]["cache_bytes"]
    (row,) = _long_rows({"shapes": {"20": old}}, "")
    assert "1,500,000 events at 20 event(s)/timeline, one run each" in row
    assert "(CPU-s per 100k 5.0)" in row
    assert "rate yes, CPU yes |" in row
