"""RedisStore: the production store, over the Redis Functions library (single node or cluster).

``store`` (RedisStore) writes each operation once: its arguments checked and packed
(``packing``, ``policy_wire``), one call through ``calls`` (the transport: the client, the
library check, one FCALL, the many-target calls pipelined), its reply read (``replies``);
``errors`` turns redis-py's exceptions into the store's, ``client`` builds the client of the
settings; ``routing`` sends a call to the node of its slot; ``protocol``, ``keys``,
``library`` and ``lua/`` are the server side.
"""

from __future__ import annotations

from digest_stream.store.redis.store import RedisStore

__all__ = ["RedisStore"]
