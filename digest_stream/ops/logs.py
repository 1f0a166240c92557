"""Logging setup: human lines by default, one JSON object per line on request, secrets scrubbed.

Lines about a timeline name it in the text; code may also pass ``extra={"timeline": ...,
"partition": ...}``, which the JSON format emits as fields of their own.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Literal, TextIO

from digest_stream.ops.config import MASK

HUMAN_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"
#: user:password@ in any URL (redis://, rediss://, http://, kafka SASL URLs...).
_URL_CREDENTIALS = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^:/@\s]*):[^@\s/]+@", re.I)
#: Extra fields the JSON format copies from a record when present.
CONTEXT_FIELDS = ("timeline", "partition", "digest_id", "role")


class Redactor:
    """Removes credentials from formatted log text: URL passwords and known secret values."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        text = _URL_CREDENTIALS.sub(rf"\g<head>:{MASK}@", text)
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text


class HumanFormatter(logging.Formatter):
    """The classic one-line format, scrubbed."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__(HUMAN_FORMAT)
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self._redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, thread, message, context fields, exc."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "message": self._redact(record.getMessage()),
        }
        for name in CONTEXT_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exc"] = self._redact(self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False, default=str)


#: Loggers whose lines repeat by the second while a cause lasts (librdkafka's retries of a
#: refused login, an unreachable broker; the consumers' errors): RepeatFilter thins them.
REPEATING_LOGGERS = (
    "digest_stream.kafka.librdkafka",
    "digest_stream.client.librdkafka",
    "digest_stream.kafka",
)
#: A line that repeats is logged once per this many seconds, with the count it stood for.
REPEAT_WINDOW = 30.0
_NUMBERS = re.compile(r"\d+")


class RepeatFilter(logging.Filter):
    """Lets a line through once per window; the next one says how many were held back.

    Lines alike but for their numbers (client ids, ports, milliseconds) count as one: a wrong
    password makes every client of the process log the same refusal several times a second.
    """

    def __init__(
        self, window: float = REPEAT_WINDOW, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self._window = window
        self._clock = clock
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, _NUMBERS.sub("#", record.getMessage()))
        now = self._clock()
        shown = self._seen.get(key)
        if shown is not None and now - shown[0] < self._window:
            self._seen[key] = (shown[0], shown[1] + 1)
            return False
        if len(self._seen) > 1000:  # bounded: forget lines not seen for a window
            self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self._window}
        self._seen[key] = (now, 0)
        if shown is not None and shown[1]:
            record.msg = (
                f"{record.getMessage()} (and {shown[1]} more like it in {now - shown[0]:.0f}s)"
            )
            record.args = None
        return True


def setup(
    level: str = "INFO",
    fmt: Literal["human", "json"] = "human",
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send every log line to stderr (or stream) in the chosen format; returns the handler."""
    redact = Redactor(secrets)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(redact) if fmt == "json" else HumanFormatter(redact))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in REPEATING_LOGGERS:
        logger = logging.getLogger(name)
        for old_filter in [f for f in logger.filters if isinstance(f, RepeatFilter)]:
            logger.removeFilter(old_filter)
        logger.addFilter(RepeatFilter())
    return handler
