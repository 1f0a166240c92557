"""What a RedisStore raises when redis-py raises an error: for fakes of the store."""

from __future__ import annotations

import redis

from digest_stream.store.errors import BackendError
from digest_stream.store.redis.errors import translate


def raised(error: redis.RedisError) -> BackendError:
    """The store's exception for ``error``, as RedisStore raises it (chained to it)."""
    try:
        raise translate(error) from error
    except BackendError as translated:
        return translated


def unreachable() -> BackendError:
    """A Redis that cannot be reached, as the store reports it."""
    return raised(redis.ConnectionError("unreachable (test)"))
