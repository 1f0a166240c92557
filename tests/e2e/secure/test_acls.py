"""`digest-stream acls` on a broker that enforces them: with exactly the printed ACLs the service
works; with one fewer, what the user reads names the missing resource."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from digest_stream.cli.acls import names_of
from digest_stream.client import DigestReader, EventProducer
from digest_stream.ops.acls import RUN_ROLES, Acl, acls
from digest_stream.settings import Settings
from tests.support import free_port, unique, wait_until
from tests.support.http import probe
from tests.support.pipeline import ServiceProcess
from tests.support.secure import (
    SecureNames,
    SecureStack,
    cli,
    drop_scram_user,
    scram_user,
    wait_ready,
)

READY_TIMEOUT = 60.0
#: A missing ACL shows at the first request that needs it: within seconds of the start.
NAMED_TIMEOUT = 15.0


@pytest.fixture
def kafka_user(secure_stack: SecureStack) -> Iterator[tuple[str, str]]:
    """A SCRAM user of its own (name, password), its ACLs and credentials dropped after."""
    name, password = unique("ds-acl"), uuid.uuid4().hex
    yield name, password
    drop_scram_user(secure_stack, name)


def _as_user(names: SecureNames, user: tuple[str, str], **changes: Any) -> Settings:
    config = names.stack.kafka_config(*user)
    return names.settings(kafka_config=config, metrics_port=free_port(), **changes)


def _send(names: SecureNames, settings: Settings, count: int) -> None:
    """Send count events to one timeline as the admin."""
    admin = dict(names.stack.info["kafka_admin_config"])
    with EventProducer(settings.kafka_bootstrap_servers, topic=settings.events_topic,
                       **admin) as producer:  # fmt: skip
        for i in range(count):
            producer.send("acl:0", id=f"e{i}", payload=json.dumps({"i": i}).encode())
        producer.flush()


def _send_and_read(names: SecureNames, settings: Settings, count: int) -> int:
    """Send count events as the admin; the records read back as the admin within 30 s."""
    _send(names, settings, count)
    admin = dict(names.stack.info["kafka_admin_config"])
    read, deadline = 0, time.monotonic() + 30
    reader_config: dict[str, Any] = {**admin, "auto.offset.reset": "earliest"}
    with DigestReader(settings.kafka_bootstrap_servers, unique("digest-stream-r"),
                      topic=settings.output_topic, **reader_config) as reader:  # fmt: skip
        while read < count and time.monotonic() < deadline:
            digest = reader.poll(0.5)
            if digest is not None:
                read += len(digest.records)
    return read


def test_the_command_prints_what_the_broker_needs(secure_names: SecureNames) -> None:
    settings = secure_names.settings()
    printed = cli(settings, "acls", "--principal", "User:someone")
    assert printed.returncode == 0, printed.stderr
    expected = acls(names_of(settings), RUN_ROLES)
    lines = printed.stdout.splitlines()
    assert len(lines) == len(expected)
    for acl, line in zip(expected, lines, strict=True):
        assert f"--{acl.resource} {acl.name}" in line
        assert all(f"--operation {op}" in line for op in acl.operations)
    strimzi = cli(settings, "acls", "--format", "strimzi").stdout
    assert all(f"name: {acl.name}" in strimzi for acl in expected)


def test_exactly_the_printed_acls_run_the_service(
    secure_names: SecureNames, kafka_user: tuple[str, str]
) -> None:
    settings = _as_user(secure_names, kafka_user)
    secure_names.create_topics(partitions=2)
    scram_user(secure_names.stack, *kafka_user, acls(names_of(settings), RUN_ROLES))
    service = ServiceProcess(settings, "ingest,scheduler,delivery", {})
    try:
        wait_ready(settings.metrics_port or 0, READY_TIMEOUT)
        assert _send_and_read(secure_names, settings, 5) == 5, service.log()[-3000:]
    finally:
        assert service.stop() == 0, service.log()[-3000:]
    # tail, as a user with only `acls --for tail` (its default group is under a prefix ACL).
    tailer = (unique("ds-tail"), uuid.uuid4().hex)
    scram_user(secure_names.stack, *tailer, acls(names_of(settings), ["tail"]))
    try:
        tailed = cli(_as_user(secure_names, tailer), "tail", "--from-beginning", "--max", "1",
                     "--duration", "30")  # fmt: skip
        assert tailed.returncode == 0, tailed.stderr
        assert "acl:0" in tailed.stdout, tailed.stdout + tailed.stderr
    finally:
        drop_scram_user(secure_names.stack, tailer[0])


#: One command per use of ops/acls.py, in an order where each finds what it needs.
COMMANDS = [
    ("topics-create", ["topics", "create", "--partitions", "1"], "created"),
    ("produce", ["produce", "--timelines", "1", "--count", "3", "--rate", "0"], "sent 3"),
    ("inspect-delete-stats", ["stats"], "total"),
    ("flush-cancel", ["flush", "t:0", "--partition", "0"], "flush of timeline t:0 sent"),
    ("replay", ["replay", "--partition", "0", "--from", "0", "--yes"], "digest-stream-"),
]


def test_each_command_runs_with_exactly_its_acls(
    secure_names: SecureNames, secure_stack: SecureStack
) -> None:
    for use, args, shown in COMMANDS:
        user = (unique("ds-cmd"), uuid.uuid4().hex)
        settings = _as_user(secure_names, user)
        scram_user(secure_stack, *user, acls(names_of(settings), [use]))
        try:
            done = cli(settings, *args)
        finally:
            drop_scram_user(secure_stack, user[0])
        assert done.returncode == 0, f"{use}: {done.stderr}{done.stdout}"
        assert shown in done.stdout, f"{use}: {done.stdout}"


def _without(acl_list: list[Acl], name: str, operation: str) -> list[Acl]:
    """The list less one operation on one resource (an ACL left with none is dropped)."""
    fewer = [
        replace(a, operations=tuple(o for o in a.operations if o != operation))
        if a.name == name
        else a
        for a in acl_list
    ]
    assert fewer != acl_list, f"{operation} on {name} is not in the list"
    return [a for a in fewer if a.operations]


#: Issue 28, item 3: the start's preflight (ops/preflight.py) finds the refused topic or group
#: and `run` exits naming it (ops/failures.py); a refusal later on is named by readiness.
@pytest.mark.parametrize(
    ("missing", "operation"),
    [("output_topic", "Write"), ("delivery_group_id", "Read")],
    ids=["no-write-on-output", "no-read-on-delivery-group"],
)
def test_one_acl_fewer_is_named(
    secure_names: SecureNames, kafka_user: tuple[str, str], missing: str, operation: str
) -> None:
    settings = _as_user(secure_names, kafka_user)
    secure_names.create_topics(partitions=1)
    resource = str(getattr(settings, missing))
    granted = _without(acls(names_of(settings), RUN_ROLES), resource, operation)
    scram_user(secure_names.stack, *kafka_user, granted)
    service = ServiceProcess(settings, "ingest,scheduler,delivery", {})
    url = f"http://127.0.0.1:{settings.metrics_port}/readyz"

    def named() -> bool:
        # Either the log line or readiness's reason names the resource (issue 28, item 3).
        try:
            body = json.dumps(probe(url)[1])
        except OSError:
            body = ""
        return resource in service.log() or resource in body

    try:
        if missing == "output_topic":
            # Digests are what needs the output topic: send events so one is due.
            wait_until(lambda: service.popen.poll() is not None or _probe_ok(url), 60, "a start")
            _send(secure_names, settings, 1)
        deadline = time.monotonic() + NAMED_TIMEOUT
        while not named() and service.popen.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert named(), f"{operation} on {resource} missing, not named:\n{service.log()[-3000:]}"
    finally:
        service.stop()


def _probe_ok(url: str) -> bool:
    try:
        return probe(url)[0] == 200
    except OSError:
        return False
