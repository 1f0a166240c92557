"""RedisStore: the production store, over the Redis Functions library (single node or cluster).

``adapter`` (RedisStore) holds its parts and hands each call to one: ``calls`` (the client,
the library check, one FCALL), ``writes`` (adding, the schedule), ``digests`` (open/close,
one call per partition) and ``admin`` (inspect, admin, the fence); ``errors`` turns redis-py's
exceptions into the store's, ``client`` builds the client of the settings; ``routing`` sends
a call to the node of its slot, ``replies`` decodes what the library answers; ``keys``,
``library`` and ``lua/`` are the server side.
"""

from __future__ import annotations

from digest_stream.store.redis.adapter import RedisStore

__all__ = ["RedisStore"]
