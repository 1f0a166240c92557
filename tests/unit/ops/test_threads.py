"""OS-level thread names (ops/threads.py): what `top -H` and /proc show."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from digest_stream.ops.threads import name_os_thread


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="names threads on Linux")
def test_a_thread_gets_its_python_name_cut_to_fifteen_bytes() -> None:
    seen: list[str] = []

    def run() -> None:
        name_os_thread()
        comm = Path(f"/proc/self/task/{threading.get_native_id()}/comm")
        seen.append(comm.read_text().strip())
        name_os_thread("ingest-store_0")
        seen.append(comm.read_text().strip())

    worker = threading.Thread(target=run, name="digest-scheduler-long")
    worker.start()
    worker.join()
    assert seen == ["digest-schedule", "ingest-store_0"]
