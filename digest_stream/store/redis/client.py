"""The redis-py client of the settings, and the RedisStore over it (``store.connect``)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import redis
from redis.cluster import RedisCluster

from digest_stream.store.backend import StoreSettings
from digest_stream.store.redis.errors import translated
from digest_stream.store.redis.routing import RedisClient
from digest_stream.store.redis.store import RedisStore

# Redis socket timeouts: long enough for a 10,000-record digest, short enough to notice an outage.
REDIS_SOCKET_TIMEOUT = 10.0
REDIS_CONNECT_TIMEOUT = 2.0


@runtime_checkable
class RedisSettings(StoreSettings, Protocol):
    """What connecting the Redis store reads of the service's settings (``store.connect``):
    its section (``store/redis/section.py``) besides what every backend reads."""

    @property
    def redis_url(self) -> str:
        """redis:// or rediss:// URL."""

    @property
    def redis_cluster(self) -> bool:
        """The URL names one node of a Redis Cluster."""

    @property
    def redis_ssl_ca_certs(self) -> str | None:
        """CA file for rediss://."""

    @property
    def redis_ssl_certfile(self) -> str | None:
        """Client certificate for rediss://."""

    @property
    def redis_ssl_keyfile(self) -> str | None:
        """Client key for rediss://."""

    @property
    def redis_load_library(self) -> bool:
        """Load the Functions library where it is missing or differs."""


def redis_client(settings: RedisSettings) -> RedisClient:
    """A Redis (or Redis Cluster) client for the settings."""
    options = redis_options(settings)
    if settings.redis_cluster:
        return RedisCluster.from_url(settings.redis_url, **options)
    return redis.Redis.from_url(settings.redis_url, health_check_interval=30, **options)


def redis_options(settings: RedisSettings) -> dict[str, object]:
    """The client options besides the URL: timeouts, and the TLS files for rediss://."""
    options: dict[str, object] = {
        "socket_timeout": REDIS_SOCKET_TIMEOUT,
        "socket_connect_timeout": REDIS_CONNECT_TIMEOUT,
    }
    # rediss:// only (the settings refuse them otherwise): redis-py's plain connection class
    # takes no ssl_* arguments.
    tls = {
        "ssl_ca_certs": settings.redis_ssl_ca_certs,
        "ssl_certfile": settings.redis_ssl_certfile,
        "ssl_keyfile": settings.redis_ssl_keyfile,
    }
    options.update({name: value for name, value in tls.items() if value})
    return options


@translated
def connect_redis(settings: RedisSettings) -> RedisStore:
    """The Redis store of the settings, with its Functions library loaded and checked."""
    return RedisStore(
        redis_client(settings),  # a cluster client connects here: its errors are translated
        namespace=settings.namespace,
        policy=settings.policy(),
        resolver=settings.resolver(),  # per-timeline-prefix overrides
        load_library=settings.redis_load_library,
    )


def answers(url: str, *, cluster_formed: bool = False, timeout: float = 1.0) -> bool:
    """Whether the Redis at ``url`` answers PING (and, with ``cluster_formed``, says its
    cluster is formed); False on any redis-py error (the dev stack's readiness check)."""
    try:
        with redis.Redis.from_url(url, socket_timeout=timeout) as client:
            if not client.ping():
                return False
            if cluster_formed:
                # redis-py parses CLUSTER INFO into a dict of str -> str.
                info = client.execute_command("CLUSTER INFO")
                return isinstance(info, dict) and info.get("cluster_state") == "ok"
            return True
    except redis.RedisError:
        return False


@translated
def load_library(url: str) -> None:
    """Load (or replace) the Functions library on the Redis at ``url`` (an administrator's
    URL, as production recommends) and check it."""
    client = redis.Redis.from_url(url)
    try:
        RedisStore(client, namespace="d", load_library=True)
    finally:
        client.close()
