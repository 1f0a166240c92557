"""The store worker: one partition batch's store call runs here while the next batch is decoded.

At most one batch is in flight (one worker thread), so per-partition order holds. The worker
makes one attempt per partition; every failure is handed back to the role thread, which retries
(serving the group) or gives up, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from digest_stream.ops.threads import name_os_thread
from digest_stream.store.base import AddResult, NewRecord


@dataclass
class Batch:
    """One partition's decoded batch, ready for its store call."""

    partition: int
    records: list[NewRecord]
    first: int  # the batch's first and last offsets (dead letters included)
    last: int
    now: float
    expected: int | None = None  # the fence it was sent with
    topic: str | None = None  # the topic id it was sent with (None: not known)
    nonce: str | None = None  # the leading edge: open quiet timelines' digests (leading.py)
    result: AddResult | None = None
    error: BaseException | None = None


class StoreWorker:
    """Runs a list of batches' store calls on one thread; the role thread collects them."""

    def __init__(self, call: Callable[[Batch], AddResult]) -> None:
        self._call = call
        self._pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ingest-store", initializer=name_os_thread
        )
        self._in_flight: Future[list[Batch]] | None = None

    @property
    def busy(self) -> bool:
        """A list of batches was submitted and not collected yet."""
        return self._in_flight is not None

    def submit(self, batches: list[Batch]) -> None:
        """Start the store calls of these batches (the previous ones must be collected)."""
        assert self._in_flight is None, "collect() the batch in flight first"
        if batches:
            self._in_flight = self._pool.submit(self._run, batches)

    def collect(self) -> list[Batch]:
        """Wait for the calls in flight and return their batches (empty when none)."""
        if self._in_flight is None:
            return []
        future, self._in_flight = self._in_flight, None
        return future.result()

    def shutdown(self) -> None:
        """Stop the thread once the call in flight is done."""
        self._pool.shutdown(wait=True)

    def _run(self, batches: list[Batch]) -> list[Batch]:
        for batch in batches:
            try:
                batch.result = self._call(batch)
            except BaseException as exc:  # handled or re-raised on the role thread
                batch.error = exc
                break  # the partitions after it are stored on the role thread, in order
        return batches
