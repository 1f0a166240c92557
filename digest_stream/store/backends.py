"""The store's backends: connecting the one the settings name, and telling its client's
errors (the one module above ``store/redis/`` that knows which backends there are)."""

from __future__ import annotations

from digest_stream.store.base import DigestStore
from digest_stream.store.errors import BackendError
from digest_stream.store.redis import errors as redis_errors
from digest_stream.store.redis import library
from digest_stream.store.redis.client import RedisSettings, connect_redis

#: What connecting a store reads of the service's settings (today: the Redis store's).
StoreSettings = RedisSettings

#: The name and version of the server-side code the store needs (the Functions library), for
#: the lines that tell an operator how to load it.
SERVER_CODE: tuple[str, str] = (library.NAME, library.VERSION)


def connect(settings: StoreSettings) -> DigestStore:
    """The store of the settings, connected and checked (the Redis one: its Functions
    library loaded where allowed and verified); raises the store's errors."""
    return connect_redis(settings)


def backend_error(error: BaseException) -> BackendError | None:
    """The store's error for an exception its backend's client raised (one that escaped the
    store, or was met before it: a test, a tool); None when it is none of the backend's."""
    if isinstance(error, BackendError):
        return error
    return redis_errors.backend_error(error)
