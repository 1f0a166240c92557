"""The store's backends: the list of them (each one's settings section), connecting the one
the ``store`` setting names, and telling their clients' errors.

This is the one module outside ``store/<backend>/`` that names a backend: a new one is its
package and its section added to ``StoreSections``' bases.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from digest_stream.store.backend import BackendSection, StoreBackend, StoreSettings
from digest_stream.store.base import DigestStore
from digest_stream.store.errors import BackendError
from digest_stream.store.redis.section import RedisSection

#: The backend a service runs on unless the ``store`` setting names another.
DEFAULT_STORE = RedisSection.backend.name


class StoreChoice(BaseModel):
    """The setting that chooses the backend (first of the settings: the rest depend on it)."""

    store: str = Field(
        DEFAULT_STORE,
        description="The store backend: redis (the production store; its settings are the "
        "redis_* ones).",
    )

    @field_validator("store")
    @classmethod
    def _known_store(cls, value: str) -> str:
        if value not in backends():
            raise ValueError(f"unknown store {value!r}: one of {', '.join(sorted(backends()))}")
        return value


class StoreSections(RedisSection, StoreChoice):
    """Every backend's settings section (one base each, before ``StoreChoice``): the
    service's settings take them all (``settings.Settings``)."""


def backends() -> dict[str, StoreBackend]:
    """Every backend a section above brings, by the ``store`` value that chooses it."""
    return {
        section.backend.name: section.backend
        for section in StoreSections.__mro__
        if isinstance(section, type)
        and issubclass(section, BackendSection)
        and "backend" in vars(section)
    }


def backend_of(settings: StoreSettings | None) -> StoreBackend:
    """The backend the settings choose (the default one without settings)."""
    return backends()[settings.store if settings is not None else DEFAULT_STORE]


def backend_raising(error: BackendError, settings: StoreSettings | None) -> StoreBackend:
    """The backend that raised ``error`` (by its ``backend`` label), which words its line;
    the one the settings choose when no backend has that label."""
    for backend in backends().values():
        if backend.label == error.backend:
            return backend
    return backend_of(settings)


def secret_urls(settings: StoreSettings) -> dict[str, str]:
    """Every section's URLs whose password must not show (setting name -> value): the
    backends not chosen too, since their settings still hold what the environment set."""
    found: dict[str, str] = {}
    for backend in backends().values():
        found.update(backend.secret_urls(settings))
    return found


def connect(settings: StoreSettings) -> DigestStore:
    """The store the settings choose, connected and checked (the Redis one: its Functions
    library loaded where allowed and verified); raises the store's errors."""
    return backend_of(settings).connect(settings)


def backend_error(error: BaseException) -> BackendError | None:
    """The store's error for an exception a backend's client raised (one that escaped the
    store, or was met before it: a test, a tool); None when it is none of the backends'."""
    if isinstance(error, BackendError):
        return error
    for backend in backends().values():
        found = backend.backend_error(error)
        if found is not None:
            return found
    return None
