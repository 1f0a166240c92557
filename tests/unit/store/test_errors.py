"""Which Redis errors are "unavailable for now" (a role waits and retries) and which are bugs."""

from __future__ import annotations

import pytest
import redis

from digest_stream.store.errors import unavailable


@pytest.mark.parametrize(
    "error",
    [
        redis.ConnectionError("connection refused"),
        redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'"),
        redis.exceptions.NoPermissionError("this user has no permissions to run the 'get' command"),
        redis.ResponseError("BUSY Redis is busy running a script"),
        # Redis 7's reply to FCALL when the function calls a command the ACL user lacks
        # (as a real server words it; no NOPERM code word)
        redis.ResponseError(
            "The user executing the script can't run this command or subcommand script: "
            "ds_add, on @user_function:812."
        ),
    ],
)
def test_refusals_for_a_while_are_retried(error: Exception) -> None:
    assert unavailable(error)


@pytest.mark.parametrize(
    "error",
    [
        redis.ResponseError("ERR invalid argument: timeline listed twice: a"),
        redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ValueError("not redis at all"),
    ],
)
def test_bugs_are_not_retried(error: Exception) -> None:
    assert not unavailable(error)
