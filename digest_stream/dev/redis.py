"""The local Redis servers: one standalone node and a 3-master cluster, from redis-server.

``PART`` is the Redis store's part of the local stack (``RedisBackend.dev_part`` names this
module; dev/parts.py, ``DevPart``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from digest_stream.dev.process import (
    HOST,
    StackError,
    alive,
    port_open,
    read_pid,
    require,
    say,
    stack_dir,
    stop_pid,
    wait,
)

REDIS_PORT = int(os.environ.get("DIGEST_STREAM_DEV_REDIS_PORT", "16379"))
CLUSTER_PORTS = tuple(
    int(os.environ.get("DIGEST_STREAM_DEV_CLUSTER_PORT", "17001")) + i for i in range(3)
)
CLUSTER_NODES = tuple(f"{HOST}:{p}" for p in CLUSTER_PORTS)
REDIS_URL = f"redis://{HOST}:{REDIS_PORT}/0"
REDIS_READY_TIMEOUT = 20.0


def _redis_server() -> str:
    path = shutil.which("redis-server")
    if path is not None:
        return path
    apt = require("apt-get", "install redis-server 7 by hand; apt-get is not available")
    say("redis-server not found; installing it with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for args in (["update", "-q"], ["install", "-y", "-q", "redis-server"]):
        done = subprocess.run([apt, *args], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise StackError(f"apt-get {args[0]} failed: {done.stderr.strip().splitlines()[-1:]}")
    # Debian's package starts a system service on 6379; this stack does not use it.
    return require("redis-server", "apt-get installed redis-server but it is not on PATH")


def redis_ping(port: int, cluster: bool = False) -> bool:
    """Whether the server on port answers (and, for a cluster node, its cluster is formed)."""
    from digest_stream.store.redis.client import answers

    return answers(f"redis://{HOST}:{port}/0", cluster_formed=cluster)


def redis_start(
    name: str,
    port: int,
    extra: list[str],
    *,
    ping: Callable[[], bool] | None = None,
    config: Path | None = None,
) -> int:
    """Start redis-server in stack_dir()/name unless it runs there; its pid.

    config: a configuration file read first (it may hold secrets: they stay off the command
    line); ping: the readiness check (default: PING in plain text on port).
    """
    home = stack_dir() / name
    pid_file = home / "redis.pid"
    marker = f":{port}"
    pid = read_pid(pid_file)
    if pid is not None and alive(pid, marker):
        say(f"{name} already running (pid {pid}) on {HOST}:{port}")
        return pid
    if port_open(port):
        raise StackError(f"port {port} is taken by a process this stack did not start")
    server = _redis_server()
    home.mkdir(parents=True, exist_ok=True)
    for stale in home.glob("nodes-*.conf"):
        stale.unlink()  # a cluster always starts fresh, like the broker
    first = [str(config)] if config else ["--port", str(port)]
    args = [
        server, *first, "--bind", HOST, "--dir", str(home),
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
    wait(f"{name} on {port}", ping or (lambda: redis_ping(port)), REDIS_READY_TIMEOUT,
          lambda: proc.poll() is None)  # fmt: skip
    return proc.pid


def redis_up() -> None:
    """Start the single Redis (no persistence) unless it already runs."""
    redis_start("redis", REDIS_PORT, [])


def cluster_up() -> None:
    """Start three cluster-enabled Redis masters and join them into one cluster."""
    for i, port in enumerate(CLUSTER_PORTS):
        redis_start(
            f"redis-cluster-{i}",
            port,
            ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
             # An explicit bus port: the +10000 default collides with other local servers.
             "--cluster-port", str(port + 100), "--cluster-node-timeout", "5000"],
        )  # fmt: skip
    if cluster_running():
        say("redis cluster already formed")
        return
    cli = require("redis-cli", "install redis-tools (apt-get install redis-tools)")
    nodes = CLUSTER_NODES
    say(f"forming a 3-master redis cluster on {', '.join(nodes)}")
    made = subprocess.run(
        [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        raise StackError(f"redis-cli --cluster create failed: {made.stdout.strip()[-300:]}")
    wait("redis cluster", cluster_running, REDIS_READY_TIMEOUT, lambda: True)


def _redis_homes() -> Iterator[tuple[Path, int]]:
    yield stack_dir() / "redis", REDIS_PORT
    for i, port in enumerate(CLUSTER_PORTS):
        yield stack_dir() / f"redis-cluster-{i}", port


def redis_down() -> None:
    """Stop every Redis this stack started (single and cluster)."""
    for home, port in _redis_homes():
        stop_pid(home / "redis.pid", f":{port}", home.name)
        shutil.rmtree(home, ignore_errors=True)


def cluster_running() -> bool:
    """Whether the cluster nodes of this stack answer."""
    return all(redis_ping(p, cluster=True) for p in CLUSTER_PORTS)


class RedisPart:
    """The Redis store's part of the local stack (a ``DevPart``): the single node, and the
    cluster with --cluster."""

    label = "Redis"
    cluster_help = "Also start a 3-master Redis Cluster."

    def up(self, cluster: bool) -> None:
        """Start the single node and, with cluster, the cluster."""
        redis_up()
        if cluster:
            cluster_up()

    def down(self) -> None:
        """Stop every Redis this stack started."""
        redis_down()

    def status(self) -> dict[str, bool]:
        """The single node ("redis") and the cluster ("redis-cluster")."""
        return {"redis": redis_ping(REDIS_PORT), "redis-cluster": cluster_running()}

    def cluster_running(self) -> bool:
        """Whether the cluster nodes answer."""
        return cluster_running()

    def exports(self, cluster: bool) -> list[str]:
        """The URL setting and, with the cluster, its nodes (read by the test fixtures only:
        the service reaches a cluster through one seed node and redis_cluster)."""
        lines = [f"export DIGEST_STREAM_REDIS_URL={REDIS_URL}"]
        if cluster:
            lines.append(f"export DIGEST_STREAM_REDIS_CLUSTER_NODES={','.join(CLUSTER_NODES)}")
        return lines

    def ready(self, states: Mapping[str, bool]) -> bool:
        """The single node answers (the cluster is optional)."""
        return states["redis"]


PART = RedisPart()
