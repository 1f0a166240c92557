"""Logs: human by default, JSON on request, timelines named, secrets never printed."""

from __future__ import annotations

import io
import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer

from digest_stream.client import DigestReader
from digest_stream.kafka import LIBRDKAFKA_LOGGER, consumer_config
from digest_stream.ops import logs
from digest_stream.settings import Settings


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_carry_context_fields_and_no_secrets() -> None:
    out = io.StringIO()
    logs.setup("INFO", "json", secrets=["k4fka-pass"], stream=out)
    log = logging.getLogger("digest_stream.test")
    log.info(
        "timeline %s: connecting to %s with %s",
        "mail:p:1",
        "redis://svc:r3dis-pass@h:6379/0",
        "sasl.password=k4fka-pass",
        extra={"timeline": "mail:p:1", "partition": 3},
    )
    try:
        raise RuntimeError("failed on rediss://svc:r3dis-pass@h/0")
    except RuntimeError:
        log.exception("boom")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 2
    first = lines[0]
    assert first["level"] == "INFO"
    assert first["timeline"] == "mail:p:1"
    assert first["partition"] == 3
    assert "timeline mail:p:1" in first["message"]
    assert "svc:***@h:6379" in first["message"]
    text = out.getvalue()
    assert "r3dis-pass" not in text
    assert "k4fka-pass" not in text
    assert "RuntimeError" in lines[1]["exc"]


@pytest.mark.usefixtures("restore_logging")
def test_human_format_is_the_default_and_scrubbed() -> None:
    out = io.StringIO()
    logs.setup(stream=out)
    logging.getLogger("digest_stream.test").warning("url redis://:pw-secret@h/0")
    text = out.getvalue()
    assert " WARNING digest_stream.test [" in text
    assert "pw-secret" not in text
    assert "redis://:***@h/0" in text
    assert not text.startswith("{")


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed on return: nothing listens there


def _json_lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.usefixtures("restore_logging")
def test_librdkafka_lines_come_out_in_the_service_format(capfd: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    logs.setup("INFO", "json", stream=out)
    servers = f"127.0.0.1:{_dead_port()}"
    settings = Settings(kafka_bootstrap_servers=servers)
    consumer = Consumer(consumer_config(settings, "logs-test"))
    reader = DigestReader(servers, "logs-test")
    try:
        consumer.subscribe(["logs-test"])
        deadline = time.monotonic() + 30

        def seen(logger: str) -> bool:
            return any(
                line["logger"] == logger and "Connect to" in line["message"]
                for line in _json_lines(out)
            )

        while not (seen(LIBRDKAFKA_LOGGER.name) and seen("digest_stream.client.librdkafka")):
            assert time.monotonic() < deadline, f"no librdkafka line logged: {out.getvalue()}"
            consumer.poll(0.1)  # logs are handed over while the client is polled
            reader.poll(0.1)
    finally:
        consumer.close()
        reader.close(commit=False)
    failures = [line for line in _json_lines(out) if "failed" in line["message"]]
    assert {line["level"] for line in failures} == {"ERROR"}
    assert "%3|" not in capfd.readouterr().err, "raw librdkafka lines on stderr"


def test_repeated_lines_are_logged_once_per_window_with_the_count_they_stood_for() -> None:
    # Issue 28, failure 3: a wrong SASL password made every client log its refusal several
    # times a second (540 ERROR lines a minute). Lines alike but for numbers count as one.
    now = [0.0]
    repeats = logs.RepeatFilter(window=30.0, clock=lambda: now[0])
    logger = logging.getLogger("test.repeats")
    logger.propagate = False
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.addFilter(repeats)
    try:
        for second in range(60):  # 9 lines a second for a minute, from two clients
            now[0] = float(second)
            for n in range(9):
                logger.error("FAIL [rdkafka#consumer-%d]: SASL authentication failed", n % 2 + 2)
        logger.error("another line")
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert lines == [
        "FAIL [rdkafka#consumer-2]: SASL authentication failed",
        "FAIL [rdkafka#consumer-2]: SASL authentication failed (and 269 more like it in 30s)",
        "another line",
    ]


def test_setup_thins_the_librdkafka_loggers(restore_logging: None) -> None:
    logs.setup("INFO", "human", stream=io.StringIO())
    logs.setup("INFO", "human", stream=io.StringIO())  # again: still one filter each
    for name in logs.REPEATING_LOGGERS:
        filters = logging.getLogger(name).filters
        assert sum(isinstance(f, logs.RepeatFilter) for f in filters) == 1
