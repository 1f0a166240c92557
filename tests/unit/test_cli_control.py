"""The control commands' time arguments (`digest-stream snooze UNTIL | --for DURATION`): a
time that cannot be one, or one already past, stops the command with one line naming the
argument (exit 2, no traceback) before it looks for a broker."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from digest_stream.cli import main

# No broker listens here: a command that got past its arguments would fail differently.
NOWHERE = ["--kafka-bootstrap-servers", "127.0.0.1:9"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["not a time"], "'not a time' is neither seconds since the epoch nor ISO 8601"),
        (["2026-12-24T09:00"], "is neither seconds since the epoch nor ISO 8601 with a UTC"),
        (["nan"], "'nan' is not a time"),
        (["inf"], "'inf' is not a time"),
        (["1e400"], "'1e400' is not a time"),
        (["--", "-5"], "'-5' is not a time"),
        (["2020-01-01T00:00Z"], "2020-01-01T00:00:00+00:00 is not in the future"),
        (["0"], "1970-01-01T00:00:00+00:00 is not in the future"),
        (["--for", "0s"], "'0s' is not a duration above 0"),
        (["--for=-5m"], "'-5m' is not a duration above 0"),
        (["--for", "1e3"], "'1e3' is not a duration above 0"),
        (["--for", "nan"], "'nan' is not a duration above 0"),
        (["--for", "999999999999d"], "is after the year 9999"),
        ([], "give UNTIL or --for, one of them"),
        (["2030-01-01T00:00Z", "--for", "1h"], "give UNTIL or --for, one of them"),
    ],
)
def test_a_snooze_refuses_a_time_that_is_not_one_ahead(arguments: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["snooze", "t", *NOWHERE, *arguments])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
