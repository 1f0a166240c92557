"""MemoryStore: the reference model, the executable spec both Redis setups are held to.

``store`` (MemoryStore) holds ``state`` (its partitions, timelines and open digests, and the
shared lookups) and hands each call to a part given that state: ``add`` (adding, with
``controls``), ``digests`` (open/close) and ``admin`` (inspect, admin, the fence, and
``expire``, which plays what a TTL or eviction does in Redis).
"""

from __future__ import annotations

from digest_stream.store.memory.store import MemoryStore

__all__ = ["MemoryStore"]
