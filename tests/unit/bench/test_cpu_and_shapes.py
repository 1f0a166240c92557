"""The catch-up bench's CPU accounting and backlog shapes (issue 27), without a broker."""

from __future__ import annotations

import os
import threading
import time

from bench.catchup_bench import SHAPES, _by_thread, backlog, shape_label, thread_text
from bench.common import CpuMeter, cpu_per_100k, process_cpu, thread_cpu
from digest_stream.ops.threads import name_os_thread


def test_process_cpu_counts_this_process_work_and_nothing_for_a_missing_pid() -> None:
    before = process_cpu(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # burn CPU, not wall time
        pass
    assert process_cpu(os.getpid()) - before >= 0.2
    assert process_cpu(2**22 + 1) == 0.0  # above pid_max's default: no such process


def test_meter_without_redis_samples_only_its_processes() -> None:
    meter = CpuMeter(lambda: [os.getpid()])
    sample = meter.sample()
    meter.close()
    assert list(sample) == ["process"]
    assert sample["process"] > 0


def test_cpu_per_100k_scales_each_part_and_adds_a_total() -> None:
    used = cpu_per_100k({"process": 1.0, "redis": 2.0}, {"process": 3.0, "redis": 2.5}, 50_000)
    assert used == {"process": 4.0, "redis": 1.0, "total": 5.0}


def test_interleaved_backlog_deals_the_same_events_round_robin() -> None:
    consecutive = [key for key, _ in backlog(60, 20, "t")]
    interleaved = [key for key, _ in backlog(60, 20, "t", interleaved=True)]
    assert consecutive[:20] == [b"t-0000000"] * 20
    assert interleaved[:4] == [b"t-0000000", b"t-0000001", b"t-0000002", b"t-0000000"]
    assert sorted(consecutive) == sorted(interleaved)  # 3 timelines of 20 either way


def test_shapes_read_as_events_per_timeline() -> None:
    assert shape_label("20i") == "20 event(s)/timeline, interleaved"
    assert shape_label("1000") == "1000 event(s)/timeline"
    assert set(SHAPES) == {"1", "20", "20i", "1000"}


def test_cpu_by_thread_names_the_thread_that_burned_it() -> None:
    def burn() -> None:
        name_os_thread()
        deadline = time.thread_time() + 0.3
        while time.thread_time() < deadline:  # this thread's CPU, not wall time
            pass

    worker = threading.Thread(target=burn, name="bench-burner")
    before = CpuMeter(lambda: [os.getpid()]).threads().get("bench-burner", 0.0)
    worker.start()
    while worker.is_alive() and "bench-burner" not in thread_cpu(os.getpid()):
        time.sleep(0.01)
    seen = 0.0
    while worker.is_alive():  # read while it lives: an ended thread is no longer listed
        seen = max(seen, thread_cpu(os.getpid()).get("bench-burner", 0.0))
        time.sleep(0.01)
    worker.join()
    assert seen - before >= 0.15
    assert thread_cpu(2**22 + 1) == {}


def test_threads_are_summarised_by_median_largest_first() -> None:
    runs = [{"digest-ingest": 2.0, "ingest-store_0": 1.0}, {"digest-ingest": 4.0}]
    assert _by_thread(runs) == {"digest-ingest": 3.0, "ingest-store_0": 0.5}
    assert thread_text({"digest-ingest": 3.0, "librdkafka": 0.01}) == "ingest 3.0"
