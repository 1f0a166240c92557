"""Logging setup: human lines by default, one JSON object per line on request, secrets scrubbed.

Lines about a timeline name it in the text; code may also pass ``extra={"timeline": ...,
"partition": ...}``, which the JSON format emits as fields of their own.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable
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
    return handler
