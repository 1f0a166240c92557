"""The local Kafka broker: a single KRaft broker+controller from jars fetched with Maven."""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from digest_stream.dev.process import (
    HOST,
    StackError,
    alive,
    cache_dir,
    port_open,
    read_pid,
    require,
    say,
    stack_dir,
    stop_pid,
    wait,
)

KAFKA_VERSION = "4.4.0"
# Kafka 4.x logs through slf4j 1.7, so the binding is log4j-slf4j-impl (not slf4j2-impl).
LOG4J_VERSION = "2.24.3"

KAFKA_PORT = int(os.environ.get("DIGEST_STREAM_DEV_KAFKA_PORT", "19092"))
CONTROLLER_PORT = KAFKA_PORT + 1
# A broker on a shared 2-core box starts in ~10 s; 120 s leaves room for a cold JVM.
KAFKA_READY_TIMEOUT = 120.0

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.digest-stream</groupId>
  <artifactId>kafka-broker-fetch</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId>
      <version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""

LOG4J2_XML = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="out" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Logger name="kafka" level="INFO"/>
    <Logger name="org.apache.kafka" level="INFO"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Root level="WARN"><AppenderRef ref="out"/></Root>
  </Loggers>
</Configuration>
"""


def kafka_libs() -> Path:
    """The cached jar folder of the pinned broker version, fetched with mvn when absent."""
    libs = cache_dir() / f"kafka-{KAFKA_VERSION}" / "libs"
    if (libs.parent / ".complete").exists():
        return libs
    mvn = require("mvn", "install Maven (apt-get install maven) to fetch the Kafka broker")
    libs.parent.mkdir(parents=True, exist_ok=True)
    pom = libs.parent / "pom.xml"
    pom.write_text(_POM.format(kafka=KAFKA_VERSION, log4j=LOG4J_VERSION))
    say(f"fetching Apache Kafka {KAFKA_VERSION} jars with mvn into {libs} (once; ~100 MB)")
    cmd = [
        mvn, "-B", "-f", str(pom), "dependency:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={libs}",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    tail: list[str] = []
    fetched = 0
    for line in proc.stdout:
        tail = [*tail[-29:], line.rstrip()]
        if "Downloaded from" in line:  # mvn -B prefixes lines with "[INFO] "
            fetched += 1
            if fetched % 25 == 0:
                say(f"  {fetched} artifacts downloaded")
    if proc.wait() != 0:
        sys.stderr.write("\n".join(tail) + "\n")
        raise StackError(f"mvn could not fetch org.apache.kafka:kafka_2.13:{KAFKA_VERSION}")
    (libs.parent / ".complete").write_text(KAFKA_VERSION)
    say(f"fetched {len(list(libs.glob('*.jar')))} jars")
    return libs


def kafka_properties(data_dir: Path) -> str:
    """server.properties of the single-node broker, its data in data_dir."""
    return broker_properties(
        data_dir,
        CONTROLLER_PORT,
        [
            f"listeners=PLAINTEXT://{HOST}:{KAFKA_PORT},CONTROLLER://{HOST}:{CONTROLLER_PORT}",
            f"advertised.listeners=PLAINTEXT://{HOST}:{KAFKA_PORT}",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        ],
    )


def broker_properties(data_dir: Path, controller_port: int, listeners: list[str]) -> str:
    """A single-node broker+controller's server.properties around its listener lines."""
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{HOST}:{controller_port}",
            "controller.listener.names=CONTROLLER",
            *listeners,
            f"log.dirs={data_dir}",
            "num.partitions=4",
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            # 50 offsets partitions cost seconds on first group use; 4 is plenty locally.
            "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            # The default 128 MB dedupe buffer would dominate a small heap.
            "log.cleaner.dedupe.buffer.size=2097152",
            "message.max.bytes=1048588",
            "",
        ]
    )


def kafka_answers() -> bool:
    """Readiness: the broker answers a metadata request."""
    from confluent_kafka.admin import AdminClient

    if not port_open(KAFKA_PORT):
        return False
    admin = AdminClient({"bootstrap.servers": f"{HOST}:{KAFKA_PORT}", "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=2)
    except Exception:
        return False
    return bool(metadata.brokers)


def kafka_launch() -> None:
    """Start the single-node KRaft broker+controller unless it already runs (no wait)."""
    broker_launch(stack_dir() / "kafka", "kafka", KAFKA_PORT, kafka_properties)


def kafka_wait() -> None:
    """Wait until the broker answers."""
    broker_wait(stack_dir() / "kafka", "kafka", kafka_answers)


def new_cluster_id() -> str:
    """A random KRaft cluster id, as Kafka's own Uuid.randomUuid makes one: 22 base64url
    characters, never starting with '-' (the storage tool would read it as an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def broker_launch(
    home: Path,
    what: str,
    port: int,
    properties: Callable[[Path], str],
    scram: Sequence[str] = (),
) -> int | None:
    """Format and start a broker in home unless one runs there, without waiting for it; its
    pid, None when one ran already. broker_wait() waits.

    Format and start are one background shell (format, then exec the broker): the format's
    JVM start-up (seconds on a busy 2-core box) overlaps whatever the caller does next, such as
    a second broker's. scram: `--add-scram` arguments of the format (the SCRAM users exist
    before the broker starts, so its inter-broker login and the first admin request work).
    """
    pid = read_pid(home / "kafka.pid")
    if pid is not None and alive(pid, "kafka.Kafka"):
        say(f"{what} already running (pid {pid}) on {HOST}:{port}")
        return None
    if port_open(port):
        raise StackError(f"port {port} is taken by a process this stack did not start")
    java = require("java", "install OpenJDK 17 (apt-get install openjdk-17-jre-headless)")
    libs = kafka_libs()
    home.mkdir(parents=True, exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="kraft-", dir=home))
    props = home / "server.properties"
    props.write_text(properties(data))
    props.chmod(0o600)  # a secured broker's file holds key store passwords
    log4j = home / "log4j2.xml"
    log4j.write_text(LOG4J2_XML)
    classpath = f"{libs}/*"
    java_opts = [f"-Dlog4j2.configurationFile={log4j}", "-Djava.awt.headless=true"]
    cluster_id = new_cluster_id()
    add_scram = [arg for entry in scram for arg in ("--add-scram", entry)]
    fmt = [java, *java_opts, "-cp", classpath, "kafka.tools.StorageTool", "format",
           "-t", cluster_id, "-c", str(props), *add_scram]  # fmt: skip
    heap = os.environ.get("DIGEST_STREAM_DEV_KAFKA_HEAP", "512m")
    broker = [java, f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
              *java_opts, "-cp", classpath, "kafka.Kafka", str(props)]  # fmt: skip
    log = (home / "kafka.log").open("ab")
    proc = subprocess.Popen(
        ["/bin/sh", "-c", f"{shlex.join(fmt)} && exec {shlex.join(broker)}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    (home / "kafka.pid").write_text(str(proc.pid))  # the same pid once sh execs the broker
    _launched[home] = proc
    say(f"formatting KRaft storage in {data} and starting {what} {KAFKA_VERSION} "
        f"(pid {proc.pid})")  # fmt: skip
    return proc.pid


#: Brokers this process launched: their liveness is the child's, not /proc's cmdline (which
#: the java launcher leaves empty for a moment while it re-executes itself).
_launched: dict[Path, subprocess.Popen[bytes]] = {}


def broker_wait(home: Path, what: str, answers: Callable[[], bool]) -> None:
    """Wait (with the deadline) until the broker in home answers; a failed start (the format's
    or the broker's) is reported with the last line of its log."""
    proc = _launched.get(home)
    pid = read_pid(home / "kafka.pid")
    try:
        if proc is not None:
            wait(what, answers, KAFKA_READY_TIMEOUT, lambda: proc.poll() is None)
        else:
            wait(what, answers, KAFKA_READY_TIMEOUT,
                 lambda: pid is not None and alive(pid, "kafka.Kafka"))  # fmt: skip
    except StackError as exc:
        lines = (home / "kafka.log").read_text(errors="replace").strip().splitlines()
        raise StackError(f"{exc}; its log ends: {lines[-1] if lines else '(empty)'}") from exc


def broker_down(home: Path, name: str) -> None:
    """Stop the broker started in home and remove its data."""
    stop_pid(home / "kafka.pid", "kafka.Kafka", name)
    for data in home.glob("kraft-*"):
        shutil.rmtree(data, ignore_errors=True)


def kafka_down() -> None:
    """Stop the broker this stack started and remove its data."""
    broker_down(stack_dir() / "kafka", "kafka")
