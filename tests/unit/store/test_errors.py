"""Which Redis errors are "unavailable for now" (a role waits and retries) and which are bugs:
the Redis store's translation of redis-py's exceptions into the store's."""

from __future__ import annotations

import ssl

import pytest
import redis

from digest_stream.store import backend_error
from digest_stream.store.errors import BackendError, StoreUnavailable, unavailable
from digest_stream.store.redis.errors import translate


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (redis.ConnectionError("connection refused"), "unreachable"),
        (
            redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'"),
            "full",
        ),
        (
            redis.exceptions.NoPermissionError(
                "this user has no permissions to run the 'get' command"
            ),
            "authorization",
        ),
        (redis.ResponseError("BUSY Redis is busy running a script"), "busy"),
        (redis.ResponseError("READONLY You can't write against a read only replica."), "read_only"),
        (
            redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
            "read_only",
        ),
        (redis.exceptions.MasterDownError("Link with MASTER is down"), "failing_over"),
        (redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"), "starting"),
        (redis.TimeoutError("Timeout reading from socket"), "timeout"),
        (redis.AuthenticationError("invalid username-password pair"), "authentication"),
        # Redis 7's reply to FCALL when the function calls a command the ACL user lacks
        # (as a real server words it; no NOPERM code word)
        (
            redis.ResponseError(
                "The user executing the script can't run this command or subcommand script: "
                "ds_add, on @user_function:812."
            ),
            "authorization",
        ),
    ],
)
def test_refusals_for_a_while_are_retried(error: redis.RedisError, kind: str) -> None:
    translated = translate(error)
    assert isinstance(translated, StoreUnavailable)
    assert unavailable(translated)
    assert translated.kind == kind
    assert translated.backend == "Redis"
    assert translated.name == type(error).__name__
    assert str(translated) == str(error)  # the operator's log keeps Redis's own words


@pytest.mark.parametrize(
    "error",
    [
        redis.ResponseError("ERR invalid argument: timeline listed twice: a"),
        redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
    ],
)
def test_bugs_are_not_retried(error: redis.RedisError) -> None:
    translated = translate(error)
    assert isinstance(translated, BackendError)
    assert not unavailable(translated)
    assert translated.kind == "error"
    # and nothing but a store error is unavailable, however it is worded
    assert not unavailable(error)


def test_only_the_backends_errors_are_translated() -> None:
    assert backend_error(ValueError("not redis at all")) is None
    assert not unavailable(ValueError("not redis at all"))
    already = translate(redis.ConnectionError("down"))
    assert backend_error(already) is already


def test_what_the_operators_line_needs_survives_the_translation() -> None:
    refused = translate(
        redis.exceptions.NoPermissionError(
            "this user has no permissions to run the 'function|load' command"
        )
    )
    assert refused.command == "function|load"
    # refused the library's loading: to the caller, the server-side code is missing
    assert refused.kind == "library_missing"
    connecting = translate(redis.TimeoutError("Timeout connecting to server"))
    assert connecting.kind == "timeout"
    assert connecting.connecting
    head = translate(redis.ConnectionError("Error 111 connecting to cache:6380. Refused."))
    assert head.address == "cache:6380"
    assert head.detail == "Refused"
    # redis-py raises a TLS failure as a connection error with the ssl error as its context
    over_tls = redis.ConnectionError("Error 1 connecting to cache:6380. wrong version number.")
    over_tls.__context__ = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    assert translate(over_tls).kind == "tls"


def test_the_backend_that_raised_an_error_words_its_line() -> None:
    # Issue 38: the lines are each backend's own; ops finds the one by the error's label.
    from digest_stream.settings import Settings
    from digest_stream.store import backend_raising

    raised = translate(redis.ConnectionError("down"))
    assert backend_raising(raised, None).name == "redis"
    other = BackendError("x", backend="Elsewhere")
    assert backend_raising(other, Settings()).name == "redis"  # the settings' choice
