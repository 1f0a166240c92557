"""The whole pipeline on a secured cluster, as a user runs it: SASL_SSL (SCRAM-SHA-512) Kafka
with the StandardAuthorizer and prefixed ACLs for the service's user only, a TLS-only Redis with
the README's ACL user, the library loaded by admin and DIGEST_STREAM_REDIS_LOAD_LIBRARY=false.

`run` is a child process; every other command runs through click's runner, configured by the
environment only (what a user sets).
"""

from __future__ import annotations

import json
import time
from typing import Any

from digest_stream.client import DigestReader, EventProducer
from tests.support import free_port, unique, wait_until
from tests.support.pipeline import ServiceProcess
from tests.support.secure import SecureNames, cli, wait_ready

#: A service on the secured stack answers /readyz within ~3 s; a loaded CI box needs more.
READY_TIMEOUT = 60.0


def _rows(output: str) -> list[list[str]]:
    """tail's digest rows (after its header), split into cells."""
    return [line.split() for line in output.splitlines()[1:] if line.strip()]


def test_every_command_through_the_cli(secure_names: SecureNames) -> None:
    # A cool-down longer than the test: flush, cancel and delete find the records waiting.
    settings = secure_names.settings(
        metrics_port=free_port(), minimum_delay=60.0, maximum_delay=90.0
    )
    secrets = [*secure_names.stack.passwords(), secure_names.redis_password]

    created = cli(settings, "topics", "create", "--partitions", "2")
    assert created.returncode == 0, created.stderr
    assert created.stdout.count("created") == 4, created.stdout

    shown = cli(settings, "config", "show")
    assert shown.returncode == 0, shown.stderr
    assert "SASL_SSL" in shown.stdout
    assert "rediss://" in shown.stdout
    for secret in secrets:
        assert secret not in shown.stdout + shown.stderr, "config show leaks a password"

    service = ServiceProcess(settings, "ingest,scheduler,delivery", {})
    try:
        wait_ready(settings.metrics_port or 0, READY_TIMEOUT)
        sent = cli(settings, "produce", "--timelines", "3", "--count", "9", "--rate", "0",
                   "--prefix", "sec")  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        assert "sent 9 events" in sent.stdout

        # tail's default group (digest-stream-tail-<hex>) is inside the user's group prefix.
        tailed = cli(settings, "tail", "--from-beginning", "--max", "3", "--duration", "60")
        assert tailed.returncode == 0, tailed.stderr
        rows = _rows(tailed.stdout)
        assert {row[1] for row in rows} == {"sec:0", "sec:1", "sec:2"}, tailed.stdout
        assert all("IMMEDIATE" in row for row in rows), tailed.stdout

        def state(timeline: str) -> str:
            done = cli(settings, "inspect", timeline)
            assert done.returncode == 0, done.stderr
            return done.stdout

        # A second round waits out the cool-down (60 s): flush, cancel and delete act on it.
        again = cli(settings, "produce", "--timelines", "3", "--count", "9", "--rate", "0",
                    "--prefix", "sec")  # fmt: skip
        assert again.returncode == 0, again.stderr
        # Controls (flush, cancel) follow the events sent before them on their partition, so
        # only inspect's view needs a wait.
        first = sum(int(row[2]) for row in rows if row[1] == "sec:0")

        def pending(timeline: str) -> int:
            lines = [x for x in state(timeline).splitlines() if x.startswith("pending")]
            return sum(int(x.split()[1]) for x in lines)  # no line: no state, nothing pending

        wait_until(lambda: first + pending("sec:0") == 6, 30, "sec:0's second round stored")
        stats = cli(settings, "stats")
        assert stats.returncode == 0, stats.stderr
        assert stats.stdout.splitlines()[-1].split()[:2] == ["total", "3"], stats.stdout

        flushed = cli(settings, "flush", "sec:0")
        assert flushed.returncode == 0, flushed.stderr
        assert "flush of timeline sec:0 sent" in flushed.stdout, flushed.stdout
        cancelled = cli(settings, "cancel", "sec:1", "--yes")
        assert cancelled.returncode == 0, cancelled.stderr
        assert "cancel of timeline sec:1 sent" in cancelled.stdout, cancelled.stdout
        deleted = cli(settings, "delete", "sec:2", "--yes")
        assert deleted.returncode == 0, deleted.stderr
        assert "deleted timeline sec:2" in deleted.stdout or "no state" in deleted.stdout

        # sec:0's records: its immediate digest, then the rest in one FLUSHED digest.
        later = cli(settings, "tail", "--from-beginning", "--group", unique("digest-stream-t"),
                    "--max", "4", "--duration", "30")  # fmt: skip
        assert later.returncode == 0, later.stderr
        sec0 = [r for r in _rows(later.stdout) if r[1] == "sec:0"]
        assert [r[-3] for r in sec0] == ["IMMEDIATE", "FLUSHED"], later.stdout
        assert sum(int(r[2]) for r in sec0) == 6, later.stdout
        wait_until(lambda: pending("sec:1") == 0, 30, "sec:1's records cancelled")
    finally:
        code = service.stop()
    assert code == 0, service.log()[-3000:]
    log = service.log()
    for secret in secrets:
        assert secret not in log, "the service's log leaks a password"

    # Recovery drill on the stopped group: the fence and the offset go back to 0.
    replayed = cli(settings, "replay", "--partition", "0", "--from", "0", "--yes")
    assert replayed.returncode == 0, replayed.stderr + replayed.stdout
    assert settings.group_id in replayed.stdout, replayed.stdout


def test_client_api(secure_names: SecureNames) -> None:
    settings = secure_names.settings(metrics_port=free_port())
    secure_names.create_topics(partitions=2)
    service = ServiceProcess(settings, "ingest,scheduler,delivery", {})
    kafka_config: dict[str, Any] = dict(settings.kafka_config)
    try:
        wait_ready(settings.metrics_port or 0, READY_TIMEOUT)
        with EventProducer(
            settings.kafka_bootstrap_servers, topic=settings.events_topic, **kafka_config
        ) as producer:
            for i in range(4):
                producer.send("api:0", id=f"e{i}", payload=json.dumps({"i": i}).encode())
            producer.flush()
        records = 0
        deadline = time.monotonic() + 60
        with DigestReader(
            settings.kafka_bootstrap_servers,
            unique("digest-stream-reader"),
            topic=settings.output_topic,
            **{**kafka_config, "auto.offset.reset": "earliest"},
        ) as reader:
            while records < 4 and time.monotonic() < deadline:
                digest = reader.poll(0.5)
                if digest is not None:
                    assert digest.timeline == "api:0"
                    records += len(digest.records)
        assert records == 4, f"{records} of 4 records read back within 60 s"
    finally:
        assert service.stop() == 0, service.log()[-3000:]
