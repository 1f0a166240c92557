"""A real local stack without Docker: Apache Kafka (KRaft) from Maven Central, Redis from apt.

`digest-stream dev up|down|env|status` is the one entry point. Everything it starts is
recorded in pid files under the stack directory, so `down` stops exactly those processes.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

KAFKA_VERSION = "4.4.0"
# Kafka 4.x logs through slf4j 1.7, so the binding is log4j-slf4j-impl (not slf4j2-impl).
LOG4J_VERSION = "2.24.3"

KAFKA_PORT = int(os.environ.get("DIGEST_STREAM_DEV_KAFKA_PORT", "19092"))
CONTROLLER_PORT = KAFKA_PORT + 1
REDIS_PORT = int(os.environ.get("DIGEST_STREAM_DEV_REDIS_PORT", "16379"))
CLUSTER_PORTS = tuple(
    int(os.environ.get("DIGEST_STREAM_DEV_CLUSTER_PORT", "17001")) + i for i in range(3)
)
HOST = "127.0.0.1"

# A broker on a shared 2-core box starts in ~10 s; 120 s leaves room for a cold JVM.
KAFKA_READY_TIMEOUT = 120.0
REDIS_READY_TIMEOUT = 20.0


class StackError(RuntimeError):
    """A failure the user can act on, reported as one line."""


def _say(message: str) -> None:
    print(f"[dev] {message}", file=sys.stderr, flush=True)


def stack_dir() -> Path:
    """Where pid files, configs, logs and data of the running stack live."""
    default = Path(tempfile.gettempdir()) / "digest-stream-stack"
    return Path(os.environ.get("DIGEST_STREAM_STACK_DIR", str(default)))


def cache_dir() -> Path:
    """Where downloaded jars are cached, outside the repository."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "digest-stream"
    return Path(os.environ.get("DIGEST_STREAM_CACHE_DIR", str(default)))


@dataclass(frozen=True)
class Endpoints:
    """Addresses of the local stack, as exported by `dev env`."""

    kafka: str = f"{HOST}:{KAFKA_PORT}"
    redis_url: str = f"redis://{HOST}:{REDIS_PORT}/0"
    cluster_nodes: tuple[str, ...] = tuple(f"{HOST}:{p}" for p in CLUSTER_PORTS)

    def exports(self, cluster: bool) -> list[str]:
        """Shell export lines for the settings (and the test harness)."""
        lines = [
            f"export DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS={self.kafka}",
            f"export DIGEST_STREAM_REDIS_URL={self.redis_url}",
        ]
        if cluster:
            lines.append(f"export DIGEST_STREAM_REDIS_CLUSTER_NODES={','.join(self.cluster_nodes)}")
        return lines


# --------------------------------------------------------------------------- processes


def _read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int, marker: str) -> bool:
    """True when pid runs and its command line carries marker (guards against pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return marker in cmdline


def _stop_pid(pid_file: Path, marker: str, name: str, grace: float = 20.0) -> None:
    pid = _read_pid(pid_file)
    if pid is None or not _alive(pid, marker):
        pid_file.unlink(missing_ok=True)
        return
    _say(f"stopping {name} (pid {pid})")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid, marker):
        time.sleep(0.1)
    if _alive(pid, marker):
        _say(f"{name} did not stop in {grace:.0f}s; killing it")
        os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)


def _wait(what: str, check: Callable[[], bool], timeout: float, alive: Callable[[], bool]) -> None:
    """Poll check() until true; fail early when the process died, or at the deadline."""
    start = time.monotonic()
    last_note = start
    while True:
        if check():
            _say(f"{what} ready after {time.monotonic() - start:.1f}s")
            return
        if not alive():
            raise StackError(f"{what} exited during start-up; see the logs under {stack_dir()}")
        now = time.monotonic()
        if now - start > timeout:
            raise StackError(f"{what} not ready after {timeout:.0f}s; see logs in {stack_dir()}")
        if now - last_note > 5:
            _say(f"waiting for {what} ({now - start:.0f}s)")
            last_note = now
        time.sleep(0.25)


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def _require(tool: str, hint: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise StackError(f"'{tool}' not found on PATH: {hint}")
    return path


# --------------------------------------------------------------------------- kafka

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

_LOG4J2_XML = """<?xml version="1.0" encoding="UTF-8"?>
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
    mvn = _require("mvn", "install Maven (apt-get install maven) to fetch the Kafka broker")
    libs.parent.mkdir(parents=True, exist_ok=True)
    pom = libs.parent / "pom.xml"
    pom.write_text(_POM.format(kafka=KAFKA_VERSION, log4j=LOG4J_VERSION))
    _say(f"fetching Apache Kafka {KAFKA_VERSION} jars with mvn into {libs} (once; ~100 MB)")
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
                _say(f"  {fetched} artifacts downloaded")
    if proc.wait() != 0:
        sys.stderr.write("\n".join(tail) + "\n")
        raise StackError(f"mvn could not fetch org.apache.kafka:kafka_2.13:{KAFKA_VERSION}")
    (libs.parent / ".complete").write_text(KAFKA_VERSION)
    _say(f"fetched {len(list(libs.glob('*.jar')))} jars")
    return libs


def _kafka_properties(data_dir: Path) -> str:
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{HOST}:{CONTROLLER_PORT}",
            f"listeners=PLAINTEXT://{HOST}:{KAFKA_PORT},CONTROLLER://{HOST}:{CONTROLLER_PORT}",
            f"advertised.listeners=PLAINTEXT://{HOST}:{KAFKA_PORT}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
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


def _kafka_answers() -> bool:
    """Readiness: the broker answers a metadata request."""
    from confluent_kafka.admin import AdminClient

    if not _port_open(KAFKA_PORT):
        return False
    admin = AdminClient({"bootstrap.servers": f"{HOST}:{KAFKA_PORT}", "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=2)
    except Exception:
        return False
    return bool(metadata.brokers)


def kafka_up() -> None:
    """Start the single-node KRaft broker+controller unless it already runs."""
    home = stack_dir() / "kafka"
    pid_file = home / "kafka.pid"
    pid = _read_pid(pid_file)
    if pid is not None and _alive(pid, "kafka.Kafka"):
        _wait("kafka", _kafka_answers, KAFKA_READY_TIMEOUT, lambda: _alive(pid, "kafka.Kafka"))
        _say(f"kafka already running (pid {pid}) on {HOST}:{KAFKA_PORT}")
        return
    if _port_open(KAFKA_PORT):
        raise StackError(f"port {KAFKA_PORT} is taken by a process this stack did not start")
    java = _require("java", "install OpenJDK 17 (apt-get install openjdk-17-jre-headless)")
    libs = kafka_libs()
    home.mkdir(parents=True, exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="kraft-", dir=home))
    props = home / "server.properties"
    props.write_text(_kafka_properties(data))
    log4j = home / "log4j2.xml"
    log4j.write_text(_LOG4J2_XML)
    classpath = f"{libs}/*"
    java_opts = [f"-Dlog4j2.configurationFile={log4j}", "-Djava.awt.headless=true"]
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    _say(f"formatting KRaft storage in {data}")
    fmt = subprocess.run(
        [java, *java_opts, "-cp", classpath, "kafka.tools.StorageTool", "format",
         "-t", cluster_id, "-c", str(props)],
        capture_output=True, text=True,
    )  # fmt: skip
    if fmt.returncode != 0:
        raise StackError(f"kafka storage format failed: {(fmt.stderr or fmt.stdout).strip()}")
    log = (home / "kafka.log").open("ab")
    heap = os.environ.get("DIGEST_STREAM_DEV_KAFKA_HEAP", "512m")
    proc = subprocess.Popen(
        [java, f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
         *java_opts, "-cp", classpath, "kafka.Kafka", str(props)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    pid_file.write_text(str(proc.pid))
    _say(f"started kafka {KAFKA_VERSION} (pid {proc.pid}), waiting for metadata")
    _wait("kafka", _kafka_answers, KAFKA_READY_TIMEOUT, lambda: proc.poll() is None)


def kafka_down() -> None:
    """Stop the broker this stack started and remove its data."""
    home = stack_dir() / "kafka"
    _stop_pid(home / "kafka.pid", "kafka.Kafka", "kafka")
    for data in home.glob("kraft-*"):
        shutil.rmtree(data, ignore_errors=True)


# --------------------------------------------------------------------------- redis


def _redis_server() -> str:
    path = shutil.which("redis-server")
    if path is not None:
        return path
    apt = _require("apt-get", "install redis-server 7 by hand; apt-get is not available")
    _say("redis-server not found; installing it with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for args in (["update", "-q"], ["install", "-y", "-q", "redis-server"]):
        done = subprocess.run([apt, *args], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise StackError(f"apt-get {args[0]} failed: {done.stderr.strip().splitlines()[-1:]}")
    # Debian's package starts a system service on 6379; this stack does not use it.
    return _require("redis-server", "apt-get installed redis-server but it is not on PATH")


def _redis_ping(port: int, cluster: bool = False) -> bool:
    import redis

    try:
        client = redis.Redis(host=HOST, port=port, socket_timeout=1)
        if not client.ping():
            return False
        if cluster:
            # redis-py parses CLUSTER INFO into a dict of str -> str.
            info = client.execute_command("CLUSTER INFO")
            return isinstance(info, dict) and info.get("cluster_state") == "ok"
        return True
    except redis.RedisError:
        return False


def _redis_start(name: str, port: int, extra: list[str]) -> int:
    home = stack_dir() / name
    pid_file = home / "redis.pid"
    marker = f":{port}"
    pid = _read_pid(pid_file)
    if pid is not None and _alive(pid, marker):
        _say(f"{name} already running (pid {pid}) on {HOST}:{port}")
        return pid
    if _port_open(port):
        raise StackError(f"port {port} is taken by a process this stack did not start")
    server = _redis_server()
    home.mkdir(parents=True, exist_ok=True)
    for stale in home.glob("nodes-*.conf"):
        stale.unlink()  # a cluster always starts fresh, like the broker
    args = [
        server, "--port", str(port), "--bind", HOST, "--dir", str(home),
        "--save", "", "--appendonly", "no", "--daemonize", "no",
        "--logfile", str(home / "redis.log"), "--enable-debug-command", "local", *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    pid_file.write_text(str(proc.pid))
    _wait(f"{name} on {port}", lambda: _redis_ping(port), REDIS_READY_TIMEOUT,
          lambda: proc.poll() is None)  # fmt: skip
    return proc.pid


def redis_up() -> None:
    """Start the single Redis (no persistence) unless it already runs."""
    _redis_start("redis", REDIS_PORT, [])


def cluster_up() -> None:
    """Start three cluster-enabled Redis masters and join them into one cluster."""
    for i, port in enumerate(CLUSTER_PORTS):
        _redis_start(
            f"redis-cluster-{i}",
            port,
            ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
             # An explicit bus port: the +10000 default collides with other local servers.
             "--cluster-port", str(port + 100), "--cluster-node-timeout", "5000"],
        )  # fmt: skip
    if cluster_running():
        _say("redis cluster already formed")
        return
    cli = _require("redis-cli", "install redis-tools (apt-get install redis-tools)")
    nodes = Endpoints().cluster_nodes
    _say(f"forming a 3-master redis cluster on {', '.join(nodes)}")
    made = subprocess.run(
        [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        raise StackError(f"redis-cli --cluster create failed: {made.stdout.strip()[-300:]}")
    _wait("redis cluster", cluster_running, REDIS_READY_TIMEOUT, lambda: True)


def _redis_homes() -> Iterator[tuple[Path, int]]:
    yield stack_dir() / "redis", REDIS_PORT
    for i, port in enumerate(CLUSTER_PORTS):
        yield stack_dir() / f"redis-cluster-{i}", port


def redis_down() -> None:
    """Stop every Redis this stack started (single and cluster)."""
    for home, port in _redis_homes():
        _stop_pid(home / "redis.pid", f":{port}", home.name)
        shutil.rmtree(home, ignore_errors=True)


# --------------------------------------------------------------------------- commands


def up(cluster: bool = False, kafka: bool = True) -> Endpoints:
    """Bring the stack up (idempotent) and return its endpoints."""
    started = time.monotonic()
    redis_up()
    if cluster:
        cluster_up()
    if kafka:
        kafka_up()
    _say(f"stack up in {time.monotonic() - started:.1f}s")
    return Endpoints()


def down() -> None:
    """Stop exactly what `up` started."""
    kafka_down()
    redis_down()
    _say("stack down")


def cluster_running() -> bool:
    """Whether the cluster nodes of this stack answer."""
    return all(_redis_ping(p, cluster=True) for p in CLUSTER_PORTS)


def status() -> dict[str, bool]:
    """Which parts of the stack answer right now."""
    return {
        "kafka": _kafka_answers(),
        "redis": _redis_ping(REDIS_PORT),
        "redis-cluster": cluster_running(),
    }
