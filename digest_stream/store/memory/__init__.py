"""MemoryStore: the reference model, the executable spec both Redis setups are held to.

``store`` (MemoryStore) writes each operation once over ``state`` (a partition's fence,
schedule, timelines and open digests, and their lookups); ``add`` applies an add's batch in
offset order (with ``controls``: flush, cancel). ``MemoryStore.expire`` plays what a TTL or
eviction does in Redis.
"""

from __future__ import annotations

from digest_stream.store.memory.store import MemoryStore

__all__ = ["MemoryStore"]
