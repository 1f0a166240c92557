"""Kafka brokers of a test's own (KRaft, the dev stack's jars and config), to break for real.

- `KraftBroker`: one broker process whose data survives a stop: the first of a cluster is
  broker and controller, a later one joins its controller quorum as a plain broker;
- `BrokerPair`: two of them, so a topic at replication factor 2 with ``min.insync.replicas=2``
  refuses writes (NOT_ENOUGH_REPLICAS) while the follower is stopped (SIGSTOP) and takes them
  again once it is back in the ISR (SIGCONT).

Every process is stopped by pid (`destroy`), also when a test fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from digest_stream.dev import kafka as devkafka
from tests.support import free_port, unique, wait_until

HOST = "127.0.0.1"


class KraftBroker:
    """One KRaft broker of our own; `controller` None: it is the quorum's controller too."""

    def __init__(
        self,
        node_id: int = 1,
        controller: KraftBroker | None = None,
        overrides: dict[str, str] | None = None,
    ) -> None:
        self.node_id = node_id
        self.port = free_port()
        self.controller_port: int = controller.controller_port if controller else free_port()
        self.cluster_id: str = controller.cluster_id if controller else devkafka.new_cluster_id()
        self._controller = controller is None
        self._overrides = overrides or {}
        self.home = Path(tempfile.mkdtemp(prefix="kraft-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.bootstrap = f"{HOST}:{self.port}"
        self._java = shutil.which("java") or "java"
        self._libs = devkafka.kafka_libs()
        self._log4j = self.home / "log4j2.xml"
        self._log4j.write_text(devkafka.LOG4J2_XML)
        self._props = self.home / "server.properties"
        self._props.write_text(self._properties())
        formatted = subprocess.run(
            [self._java, *self._opts(), "-cp", f"{self._libs}/*", "kafka.tools.StorageTool",
             "format", "-t", self.cluster_id, "-c", str(self._props)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert formatted.returncode == 0, formatted.stderr or formatted.stdout

    def _opts(self) -> list[str]:
        return [f"-Dlog4j2.configurationFile={self._log4j}", "-Djava.awt.headless=true"]

    def _properties(self) -> str:
        """The dev stack's server.properties with this node's id, roles and ports."""
        stock = devkafka.kafka_properties(self.home / "data").splitlines()
        props = dict(line.split("=", 1) for line in stock if line)
        listeners = f"PLAINTEXT://{HOST}:{self.port}"
        props |= {
            "node.id": str(self.node_id),
            "process.roles": "broker,controller" if self._controller else "broker",
            "controller.quorum.voters": f"1@{HOST}:{self.controller_port}",
            "listeners": listeners
            + (f",CONTROLLER://{HOST}:{self.controller_port}" if self._controller else ""),
            "advertised.listeners": listeners,
            "num.partitions": "1",
            **self._overrides,
        }
        return "".join(f"{key}={value}\n" for key, value in props.items())

    @property
    def pid(self) -> int:
        """The broker's process id (started)."""
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        """Start the broker (same data as before) and wait for a metadata answer."""
        log = (self.home / "kafka.log").open("ab")
        self.proc = subprocess.Popen(
            [self._java, "-Xmx512m", "-Xms128m", "-XX:+UseG1GC", *self._opts(),
             "-cp", f"{self._libs}/*", "kafka.Kafka", str(self._props)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        log.close()
        wait_until(self._answers, devkafka.KAFKA_READY_TIMEOUT, f"own kafka on {self.port}", 0.2)

    def _answers(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, f"own kafka exited:\n{self.log()[-3000:]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        try:
            return self.node_id in admin.list_topics(timeout=2).brokers
        except Exception:
            return False

    def log(self) -> str:
        """The broker's output so far."""
        path = self.home / "kafka.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def pause(self) -> None:
        """SIGSTOP: the process holds its connections and answers nothing."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        os.kill(self.pid, signal.SIGCONT)

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM (a controlled broker shutdown) and wait; SIGKILL past the timeout."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def destroy(self) -> None:
        """Kill by pid (a paused one too) and remove its data."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # SIGKILL ends a stopped process as well
            self.proc.wait(10)
        shutil.rmtree(self.home, ignore_errors=True)


#: How long a follower that stopped fetching stays in the ISR (broker default 30 s): short,
#: so writes at min.insync.replicas=2 are refused a few seconds after the follower stops.
REPLICA_LAG_MS = 5000


class BrokerPair:
    """Brokers 1 (also the controller) and 2. Internal topics (consumer offsets) live on
    broker 1 alone, so stopping broker 2 touches only topics with a replica on it."""

    def __init__(self) -> None:
        overrides = {"replica.lag.time.max.ms": str(REPLICA_LAG_MS)}
        self.first = KraftBroker(1, overrides=overrides)
        self.second = KraftBroker(2, controller=self.first, overrides=overrides)
        self.bootstrap = self.first.bootstrap

    def start(self) -> None:
        """Start broker 1, place the consumer offsets topic on it, then start broker 2."""
        self.first.start()
        # The offsets topic is created at the first coordinator lookup, on the live brokers:
        # only broker 1 is live now.
        probe = Consumer({"bootstrap.servers": self.bootstrap, "group.id": unique("place")})
        try:
            probe.committed([TopicPartition("__placement", 0)], timeout=30)
        except Exception:  # the topic does not exist: the lookup created the offsets topic
            pass
        finally:
            probe.close()
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        wait_until(lambda: _has_leaders(admin, "__consumer_offsets"), 60, "the offsets topic", 0.2)
        self.second.start()
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 2, 60, "two brokers")

    def in_sync(self, topic: str) -> list[set[int]]:
        """Each partition's in-sync replicas (broker ids) of this topic (broker 1's metadata)."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        return [set(p.isrs) for p in partitions]

    def destroy(self) -> None:
        """Kill both by pid and remove their data."""
        try:
            self.second.destroy()
        finally:
            self.first.destroy()


def _has_leaders(admin: AdminClient, topic: str) -> bool:
    meta = admin.list_topics(timeout=5).topics.get(topic)
    return bool(
        meta is not None
        and meta.error is None
        and meta.partitions
        and all(p.leader >= 0 for p in meta.partitions.values())
    )
