"""The Redis store as a backend of the service (``store=redis``, the default): what
``store.backends`` asks of it, answered from this package."""

from __future__ import annotations

from digest_stream.store.backend import Explained, SettingName, StoreSettings
from digest_stream.store.base import DigestStore, Readiness
from digest_stream.store.errors import BackendError, LibraryVersionMismatch
from digest_stream.store.redis import errors, explain
from digest_stream.store.redis.client import RedisSettings, connect_redis


def _section(settings: StoreSettings) -> RedisSettings:
    """The settings, seen with the Redis section they carry (``store/backends.py`` joins it
    to the service's settings, so they always do)."""
    if not isinstance(settings, RedisSettings):
        raise TypeError(f"settings without the Redis section: {type(settings).__name__}")
    return settings


class RedisBackend:
    """The Redis store: connecting it, its errors and their lines, its secrets, its dev part."""

    name = "redis"
    label = errors.BACKEND
    dev_part = "digest_stream.dev.redis"

    def connect(self, settings: StoreSettings) -> DigestStore:
        """The Redis store of the settings, its Functions library loaded and checked."""
        return connect_redis(_section(settings))

    def backend_error(self, error: BaseException) -> BackendError | None:
        """The store's error for a redis-py exception; None for any other."""
        return errors.backend_error(error)

    def explain(
        self,
        error: BackendError,
        top: BaseException,
        settings: StoreSettings | None,
        setting: SettingName,
    ) -> Explained | None:
        """The line for one of this store's errors (see ``store/redis/explain.py``)."""
        return explain.explain(
            error, top, None if settings is None else _section(settings), setting
        )

    def library_mismatch(
        self, error: LibraryVersionMismatch, settings: StoreSettings | None, setting: SettingName
    ) -> Explained:
        """The line for a Functions library that is missing or differs."""
        redis = None if settings is None else _section(settings)
        return explain.library_mismatch(error, redis, setting)

    def outage(self, error: BaseException | None) -> str:
        """A role's line while it waits out an outage no better line explains."""
        return explain.outage(error)

    def unready(self, readiness: Readiness) -> str:
        """The /readyz problem when primaries run another Functions library (or none)."""
        return f"Functions library version mismatch (need {readiness.expected}): {readiness.wrong}"

    def secret_urls(self, settings: StoreSettings) -> dict[str, str]:
        """The URL whose password ``config show`` masks and the logs scrub."""
        return {"redis_url": _section(settings).redis_url}


REDIS = RedisBackend()
