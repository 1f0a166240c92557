"""RedisStore: the production store, over the Redis Functions library (single node or cluster).

``store`` (RedisStore: adding and the schedule) stands on ``calls`` (the client, the library
check, one FCALL), ``digests`` (open/close, one call per partition) and ``admin`` (inspect,
admin, the fence); ``routing`` sends a call to the node of its slot, ``replies`` decodes what
the library answers.
"""

from __future__ import annotations

from digest_stream.store.redis.store import RedisStore

__all__ = ["RedisStore"]
