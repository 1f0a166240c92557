"""The store's errors: refused calls, and a backend that cannot serve (for now, or at all).

The roles decide how long to wait (``roles.retry``); only the store knows which of its
backend's failures are "unavailable for now" and which are a bug, so its adapter says so by
the class it raises (``StoreUnavailable`` or ``BackendError``). Each carries a ``kind`` and the
facts an operator's one line needs (``ops.failures``), so nothing above the store reads the
backend's own exceptions.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal


class StoreError(Exception):
    """Base class of every error the store raises."""


class InvalidArgument(StoreError, ValueError):
    """An argument was refused before (or by) the server-side guard."""


class InvalidState(StoreError):
    """The operation is not allowed in the timeline's current state (e.g. open when not READY)."""


class LibraryVersionMismatch(StoreError):
    """The server-side code the backend runs is not the one this code expects."""


#: How a backend failed a call, in what it means to the caller (each backend maps its own
#: replies onto these: for Redis, ``store/redis/errors.py``):
#: - authentication: it refused the credentials;
#: - authorization: it refused a command (``command``, in the backend's own words), one its
#:   server-side code calls (``in_library``), or the keys (neither);
#: - library_missing: its server-side code is missing or differs, and the credentials may not
#:   load it (``command``: the refused loading command);
#: - tls, unreachable, timeout: no connection, or no answer in time (``connecting``: while
#:   connecting); TLS is often told only by the causes (ssl errors) the error chains to;
#: - busy, starting, full, read_only, failing_over, moving: reachable but refusing for a
#:   while (running a long operation, loading its data at start, out of memory for writes, a
#:   copy that takes no writes (a replica, or mid failover), no primary or no copies, its
#:   data moving between nodes or part of it served by none);
#: - error: any other failure, a bug: not retried.
Kind = Literal[
    "authentication",
    "authorization",
    "library_missing",
    "tls",
    "unreachable",
    "timeout",
    "busy",
    "starting",
    "full",
    "read_only",
    "failing_over",
    "moving",
    "error",
]

#: Kinds that mean no working connection (as opposed to a server that answers "not now").
CONNECTION_KINDS: frozenset[Kind] = frozenset(
    {"authentication", "tls", "unreachable", "timeout", "moving", "starting"}
)


class BackendError(StoreError):
    """The store's backend failed a call; not one to wait out (see ``StoreUnavailable``).

    ``str()`` is the backend's own text; ``backend`` names it ("Redis"), ``name`` is the
    backend client's name for the error (for probes that show no text), ``address`` the
    server it names (host:port, when it does), ``detail`` its text without the client's
    boilerplate.
    """

    def __init__(
        self,
        message: str,
        *,
        backend: str,
        kind: Kind = "error",
        name: str = "",
        address: str | None = None,
        detail: str = "",
        command: str | None = None,
        in_library: bool = False,
        connecting: bool = False,
    ) -> None:
        super().__init__(message)
        self.backend = backend
        self.kind: Kind = kind
        self.name = name or type(self).__name__
        self.address = address
        self.detail = detail or message
        self.command = command
        self.in_library = in_library
        self.connecting = connecting


class StoreUnavailable(BackendError):
    """The backend cannot serve this call now (unreachable, or refusing for a while): retry."""


def unavailable(exc: BaseException) -> bool:
    """The store cannot serve this call now: retry it.

    Anything else (a wrong argument, a store invariant, a backend bug) stops the role.
    """
    return isinstance(exc, StoreUnavailable)


def causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception, then what caused it (the store's error chains its client's, and a
    cluster client's error the node's)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
