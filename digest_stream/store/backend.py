"""What one store backend declares to the service (issue 38: each backend owns its words).

A backend lives in ``store/<name>/`` and hands the service one ``StoreBackend``: how to
connect it, which of its client's exceptions are its errors, the one line that explains each
failure to an operator (which of them mean "wait"), what /readyz says when its nodes run
other server-side code, the settings whose values are secrets, the module of ``dev/`` that
runs its servers in the local stack; and one ``BackendSection``, its
settings (plain pydantic fields, so each is an env var, a TOML key and a flag like any other).
``store/backends.py`` lists the sections; the ``store`` setting chooses among their backends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from pydantic import BaseModel

from digest_stream.store.base import DigestStore, Readiness
from digest_stream.store.errors import BackendError, LibraryVersionMismatch
from digest_stream.store.policy import PolicyResolver, TimelinePolicy

#: What a failure means to whoever meets it: a setting to fix (authentication, authorization,
#: tls, library), no answer (unreachable, timeout), or a store that refuses calls for a while
#: and ends it by itself or by an operator's hand (refusing: the service waits).
FailureKind = Literal[
    "authentication", "authorization", "tls", "unreachable", "timeout", "library", "refusing"
]

#: How the service spells a setting for an operator (its env var, ``settings.env_name``).
SettingName = Callable[[str], str]


@dataclass(frozen=True)
class Explained:
    """A backend's failure as one line naming the cause and the setting to check."""

    kind: FailureKind
    line: str


class StoreSettings(Protocol):
    """What every backend reads of the service's settings besides its own section."""

    @property
    def store(self) -> str:
        """The backend chosen (a ``StoreBackend.name``)."""

    @property
    def namespace(self) -> str:
        """Every key of the store is in this namespace."""

    def policy(self) -> TimelinePolicy:
        """The default timeline policy."""
        ...

    def resolver(self) -> PolicyResolver:
        """timeline -> its policy."""
        ...


class StoreBackend(Protocol):
    """One backend, as the service, ops and the CLI see it (``store.backends`` finds it)."""

    #: The ``store`` setting's value that chooses it.
    name: str
    #: Its name in the lines an operator reads ("Redis").
    label: str
    #: The module of its part of the local stack (``digest-stream dev``), by name: ``dev/``
    #: sits above the store, so the store names it and imports nothing of it.
    dev_part: str

    def connect(self, settings: StoreSettings) -> DigestStore:
        """The store of the settings, connected and checked; raises the store's errors."""
        ...

    def backend_error(self, error: BaseException) -> BackendError | None:
        """The store's error for an exception of this backend's client; None for others."""
        ...

    def explain(
        self,
        error: BackendError,
        top: BaseException,
        settings: StoreSettings | None,
        setting: SettingName,
    ) -> Explained | None:
        """The failure behind one of this backend's errors (``top``: what was raised, its
        causes included); None when it is a bug rather than a failure to explain."""
        ...

    def library_mismatch(
        self, error: LibraryVersionMismatch, settings: StoreSettings | None, setting: SettingName
    ) -> Explained:
        """The line for server-side code that is missing or differs, with its fix."""
        ...

    def outage(self, error: BaseException | None) -> str:
        """What a role logs while it waits out an outage it has no better line for."""
        ...

    def unready(self, readiness: Readiness) -> str:
        """The problem /readyz lists when nodes run other server-side code (``wrong``)."""
        ...

    def secret_urls(self, settings: StoreSettings) -> dict[str, str]:
        """The settings of its section that are URLs whose password must not show (name ->
        value): ``config show`` masks them, the logs scrub their passwords."""
        ...


class BackendSection(BaseModel):
    """A backend's settings section: its fields join the service's settings (flat, so
    ``DIGEST_STREAM_<FIELD>`` as for any setting); ``backend`` is the backend it configures."""

    backend: ClassVar[StoreBackend]
