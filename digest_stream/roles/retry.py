"""Retry policy shared by every role: capped exponential backoff (tenacity).

Which errors are waited out is the store's knowledge: it raises ``StoreUnavailable`` for them
(``store.errors.unavailable``).
"""

from __future__ import annotations

from collections.abc import Callable

from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential

from digest_stream.store.errors import unavailable


def backoff(initial: float, cap: float) -> wait_exponential:
    """Capped exponential waits: initial, 2*initial, ... up to cap."""
    return wait_exponential(multiplier=initial, min=initial, max=cap)


def backoff_delay(attempt: int, initial: float, cap: float) -> float:
    """The wait after failed attempt number ``attempt`` (1-based) under the same policy."""
    return float(min(cap, initial * 2.0 ** (attempt - 1)))


def until_store_answers(
    *,
    initial: float,
    cap: float,
    sleep: Callable[[float], None],
    give_up: Callable[[], bool],
    on_retry: Callable[[RetryCallState], None],
) -> Retrying:
    """Retry a store call while the store is unavailable; stop only when give_up() says so."""
    return Retrying(
        retry=retry_if_exception(unavailable),
        wait=backoff(initial, cap),
        stop=lambda _state: give_up(),
        sleep=sleep,
        before_sleep=on_retry,
        reraise=True,
    )
