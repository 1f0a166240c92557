"""The Redis store's settings section: its URL, cluster mode, TLS files and library loading.

The fields join the service's settings flat (``store/backends.py`` lists the section), so
each keeps the env var users set today (``DIGEST_STREAM_REDIS_URL`` and the rest).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from digest_stream.store.backend import BackendSection, StoreBackend
from digest_stream.store.redis.backend import REDIS

#: The TLS files of a rediss:// connection, in the order the lines name them.
TLS_FILES = ("redis_ssl_ca_certs", "redis_ssl_certfile", "redis_ssl_keyfile")


class RedisSection(BackendSection):
    """The settings of the Redis store (``store=redis``)."""

    backend: ClassVar[StoreBackend] = REDIS

    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="Redis URL (redis:// or rediss://)."
    )
    redis_cluster: bool = Field(
        False, description="Treat redis_url as a seed node of a Redis Cluster."
    )
    redis_ssl_ca_certs: str | None = Field(
        None,
        description="CA bundle (PEM file) that verifies the Redis server's certificate "
        "(rediss:// only); unset = the system's CAs.",
    )
    redis_ssl_certfile: str | None = Field(
        None,
        description="Client certificate (PEM file) for a Redis that requires mutual TLS "
        "(rediss:// only); its key in the same file or in redis_ssl_keyfile.",
    )
    redis_ssl_keyfile: str | None = Field(
        None, description="Private key (PEM file) of redis_ssl_certfile."
    )
    redis_load_library: bool = Field(
        True, description="Load the Functions library at start; false = only check its version."
    )

    @model_validator(mode="after")
    def _tls_files_need_tls(self) -> RedisSection:
        """Refuse TLS files for a plaintext URL (they would be ignored) and a key without
        its certificate."""
        # The settings' env prefix, so the line names the variables an operator sets.
        prefix = str(self.model_config.get("env_prefix", ""))

        def env(name: str) -> str:
            return f"{prefix}{name.upper()}"

        given = [env(name) for name in TLS_FILES if getattr(self, name)]
        if given and not self.redis_url.startswith("rediss://"):
            raise ValueError(
                f"{', '.join(given)} set, but {env('redis_url')} is not rediss://: "
                "use rediss:// to connect with TLS"
            )
        if self.redis_ssl_keyfile and not self.redis_ssl_certfile:
            raise ValueError(
                f"{env('redis_ssl_keyfile')} needs {env('redis_ssl_certfile')} "
                "(the client certificate it belongs to)"
            )
        return self
