"""The store's errors, and which Redis replies mean "unavailable for now" (wait, retry).

The roles decide how long to wait (``roles.retry``); only the store knows which of its
errors are a Redis that cannot serve the call now and which are a bug, so it says so here.
"""

from __future__ import annotations

import redis


class StoreError(Exception):
    """Base class of every error the store raises."""


class InvalidArgument(StoreError, ValueError):
    """An argument was refused before (or by) the server-side guard."""


class InvalidState(StoreError):
    """The operation is not allowed in the timeline's current state (e.g. open when not READY)."""


class LibraryVersionMismatch(StoreError):
    """The Redis Functions library loaded on the server is not the one this code expects."""


#: Errors that mean "Redis is unreachable right now", as opposed to a refused call.
REDIS_DOWN: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.BusyLoadingError,
)

#: Replies by which a reachable Redis refuses a call for a while: out of memory under
#: noeviction, busy in a long script, a replica during failover, a master without replicas,
#: and an ACL that lacks a permission (an operator fixes it; crashing would only loop).
REFUSING_FOR_NOW = ("OOM", "BUSY", "READONLY", "LOADING", "MASTERDOWN", "NOREPLICAS", "NOPERM")


#: redis-py turns some of those replies into classes of their own, with the code word cut
#: off the message: they are matched by class, the rest by their first word.
REFUSING_CLASSES: tuple[type[BaseException], ...] = (
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.NoPermissionError,
    redis.exceptions.MasterDownError,
)

#: A command the library calls that the ACL user lacks is refused inside the script with a
#: plain error (no NOPERM code word): e.g. a new library version needing a command the
#: operator has not granted yet.
SCRIPT_ACL_REFUSAL = "can't run this command or subcommand"


def unavailable(exc: BaseException) -> bool:
    """Redis cannot serve this call now (unreachable, or refusing for a while): retry it.

    Anything else (a wrong argument, a store invariant) is a bug and stops the role.
    """
    if isinstance(exc, REDIS_DOWN + REFUSING_CLASSES):
        return True
    if isinstance(exc, redis.ResponseError):
        message = str(exc)
        code = message.partition(" ")[0]
        return code in REFUSING_FOR_NOW or SCRIPT_ACL_REFUSAL in message
    return False
