"""redis-py's exceptions as the store's: which Redis replies mean "unavailable for now".

Every call of RedisStore (and ``connect``) raises ``translate(error)`` from the redis-py
error it met, so the roles and ops read ``StoreUnavailable`` / ``BackendError`` and their
``kind``, never ``redis.*``; the redis-py error stays chained (``__cause__``) for the log.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

import redis
from redis import exceptions as rx

from digest_stream.store.errors import BackendError, Kind, StoreUnavailable, causes

BACKEND = "Redis"

#: Errors that mean "Redis is unreachable right now", as opposed to a refused call.
REDIS_DOWN: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    rx.ClusterDownError,
    rx.TryAgainError,
    rx.BusyLoadingError,
)

#: Replies by which a reachable Redis refuses a call for a while: out of memory under
#: noeviction, busy in a long script, a replica during failover, a master without replicas,
#: and an ACL that lacks a permission (an operator fixes it; crashing would only loop).
REFUSING_FOR_NOW = ("OOM", "BUSY", "READONLY", "LOADING", "MASTERDOWN", "NOREPLICAS", "NOPERM")

#: redis-py turns some of those replies into classes of their own, with the code word cut
#: off the message: they are matched by class, the rest by their first word.
REFUSING_CLASSES: tuple[type[BaseException], ...] = (
    rx.OutOfMemoryError,
    rx.ReadOnlyError,
    rx.NoPermissionError,
    rx.MasterDownError,
)

#: A command the library calls that the ACL user lacks is refused inside the script with a
#: plain error (no NOPERM code word): e.g. a new library version needing a command the
#: operator has not granted yet.
SCRIPT_ACL_REFUSAL = "can't run this command or subcommand"

#: The kind of each class redis-py raises (the first that matches, so subclasses first).
_KIND_OF_CLASS: tuple[tuple[type[BaseException], Kind], ...] = (
    (redis.AuthenticationError, "authentication"),
    (rx.NoPermissionError, "authorization"),
    (rx.BusyLoadingError, "starting"),
    (redis.TimeoutError, "timeout"),
    (redis.ConnectionError, "unreachable"),
    (rx.MasterDownError, "failing_over"),
    (rx.ClusterDownError, "moving"),
    (rx.TryAgainError, "moving"),
    (rx.OutOfMemoryError, "full"),
    (rx.ReadOnlyError, "read_only"),
)
#: The kind of each reply's code word (a ResponseError redis-py has no class for).
_KIND_OF_CODE: dict[str, Kind] = {
    "WRONGPASS": "authentication",
    "NOPERM": "authorization",
    "OOM": "full",
    "BUSY": "busy",
    "READONLY": "read_only",
    "LOADING": "starting",
    "MASTERDOWN": "failing_over",
    "NOREPLICAS": "failing_over",
}
#: The command that loads the Functions library: an ACL refusing it means the library is
#: missing (or differs) and this user may not load it.
LOAD_COMMAND = "function|load"
#: "this user has no permissions to run the 'function|load' command"
_NOPERM_COMMAND = re.compile(r"run the '([^']+)' command")
#: redis-py's "Error 111 connecting to host:port." head of a connection error.
_HEAD = re.compile(
    r"^Error -?\d+ (?:(?:connecting to|while reading from) \S+:\d+|while writing to socket)"
    r"\s?[.:]?\s*"
)
_ADDRESS = re.compile(r"(\S+:\d+)")


def retried(error: BaseException) -> bool:
    """Redis cannot serve this call now (unreachable, or refusing for a while): retry it."""
    if isinstance(error, REDIS_DOWN + REFUSING_CLASSES):
        return True
    if isinstance(error, redis.ResponseError):
        message = str(error)
        return message.partition(" ")[0] in REFUSING_FOR_NOW or SCRIPT_ACL_REFUSAL in message
    return False


def kind_of(error: redis.RedisError) -> Kind:
    """How a redis-py error failed the call (see ``store.errors.Kind``)."""
    text = str(error)
    if SCRIPT_ACL_REFUSAL in text:
        return "authorization"
    kind = _kind_of_reply(error, text)
    if kind in ("unreachable", "timeout") and _over_tls(error):
        return "tls"
    if kind == "authorization" and _refused_command(text) == LOAD_COMMAND:
        return "library_missing"
    return kind


def _kind_of_reply(error: redis.RedisError, text: str) -> Kind:
    for cls, kind in _KIND_OF_CLASS:
        if isinstance(error, cls):
            return kind
    if isinstance(error, redis.ResponseError):
        return _KIND_OF_CODE.get(text.partition(" ")[0], "error")
    return "error"


def _refused_command(text: str) -> str | None:
    """The command a NOPERM reply names, if it names one."""
    found = _NOPERM_COMMAND.search(text)
    return found.group(1) if found else None


def _over_tls(error: BaseException) -> bool:
    """A connection error caused by TLS (an ssl error in its chain)."""
    return any(isinstance(cause, ssl.SSLError) for cause in causes(error))


def short(text: str) -> str:
    """An error text without redis-py's "Error 111 connecting to host:port." head."""
    return _HEAD.sub("", text).strip().rstrip(".") or "no detail"


def translate(error: redis.RedisError) -> BackendError:
    """The store's exception for a redis-py error (raise it ``from`` the error)."""
    text = str(error)
    named = _ADDRESS.search(text)
    cls = StoreUnavailable if retried(error) else BackendError
    return cls(
        text,
        backend=BACKEND,
        kind=kind_of(error),
        name=type(error).__name__,
        address=named.group(1).rstrip(".") if named else None,
        detail=short(text),
        command=_refused_command(text),
        in_library=SCRIPT_ACL_REFUSAL in text,
        connecting=isinstance(error, redis.TimeoutError) and "connecting" in text,
    )


def backend_error(error: BaseException) -> BackendError | None:
    """The store's exception for a redis-py error; None for any other exception."""
    return translate(error) if isinstance(error, redis.RedisError) else None


P = ParamSpec("P")
R = TypeVar("R")


def translated(call: Callable[P, R]) -> Callable[P, R]:
    """``call`` raising the store's exceptions in place of redis-py's (chained to them)."""

    @wraps(call)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return call(*args, **kwargs)
        except redis.RedisError as error:
            raise translate(error) from error

    return wrapper
