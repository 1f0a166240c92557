"""Retry policy shared by every role: capped exponential backoff (tenacity)."""

from __future__ import annotations

from collections.abc import Callable

import redis
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential

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


def backoff(initial: float, cap: float) -> wait_exponential:
    """Capped exponential waits: initial, 2*initial, ... up to cap."""
    return wait_exponential(multiplier=initial, min=initial, max=cap)


def backoff_delay(attempt: int, initial: float, cap: float) -> float:
    """The wait after failed attempt number ``attempt`` (1-based) under the same policy."""
    return float(min(cap, initial * 2.0 ** (attempt - 1)))


def until_redis_answers(
    *,
    initial: float,
    cap: float,
    sleep: Callable[[float], None],
    give_up: Callable[[], bool],
    on_retry: Callable[[RetryCallState], None],
) -> Retrying:
    """Retry a store call while Redis is unavailable; stop only when give_up() says so."""
    return Retrying(
        retry=retry_if_exception(unavailable),
        wait=backoff(initial, cap),
        stop=lambda _state: give_up(),
        sleep=sleep,
        before_sleep=on_retry,
        reraise=True,
    )
