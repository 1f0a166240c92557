"""The local Schema Registry: Apicurio Registry (in-memory) from its Maven Central bundle.

Confluent's registry is not on Maven Central; Apicurio's is, and it serves the
Confluent-compatible API at /apis/ccompat/v7, which is all the service and confluent-kafka's
client use. 2.6.x runs on Java 17 (3.x needs Java 21). Its storage is in memory: a restart
starts empty, like the broker of this stack.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
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

APICURIO_VERSION = "2.6.13.Final"
ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
REGISTRY_PORT = int(os.environ.get("DIGEST_STREAM_DEV_REGISTRY_PORT", "18081"))
REGISTRY_URL = f"http://{HOST}:{REGISTRY_PORT}/apis/ccompat/v7"
#: Ready in ~5 s on an idle machine; a cold JVM on a busy 2-core box takes longer.
REGISTRY_READY_TIMEOUT = 90.0
#: What marks our process in /proc/<pid>/cmdline (guards the pid file against pid reuse).
MARKER = "apicurio-registry-app"


def registry_home() -> Path:
    """The unpacked bundle of the pinned version, fetched with mvn when absent."""
    home = cache_dir() / f"apicurio-registry-{APICURIO_VERSION}"
    if (home / ".complete").exists():
        return home
    mvn = require("mvn", "install Maven (apt-get install maven) to fetch Apicurio Registry")
    home.mkdir(parents=True, exist_ok=True)
    say(f"fetching Apicurio Registry {APICURIO_VERSION} with mvn into {home} (once; ~140 MB)")
    fetched = subprocess.run(
        [mvn, "-B", "-q", "dependency:copy", f"-Dartifact={ARTIFACT}", f"-DoutputDirectory={home}"],
        capture_output=True,
        text=True,
    )
    bundles = list(home.glob("apicurio-registry-app-*.tar.gz"))
    if fetched.returncode != 0 or not bundles:
        sys.stderr.write((fetched.stdout + fetched.stderr)[-3000:] + "\n")
        raise StackError(f"mvn could not fetch {ARTIFACT}")
    with tarfile.open(bundles[0]) as bundle:
        bundle.extractall(home, filter="data")  # "data": no absolute paths, links or devices
    bundles[0].unlink()
    if not _runner(home).exists():
        raise StackError(f"{ARTIFACT} unpacked without its runner jar")
    (home / ".complete").write_text(APICURIO_VERSION)
    return home


def _runner(home: Path) -> Path:
    return home / f"apicurio-registry-app-{APICURIO_VERSION}-runner.jar"


def registry_answers() -> bool:
    """Readiness: the Confluent-compatible API lists subjects."""
    if not port_open(REGISTRY_PORT):
        return False
    try:
        with urllib.request.urlopen(f"{REGISTRY_URL}/subjects", timeout=2) as reply:  # noqa: S310
            return bool(reply.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def registry_up() -> None:
    """Start the in-memory registry on HOST:REGISTRY_PORT unless it already runs."""
    home = stack_dir() / "registry"
    pid_file = home / "registry.pid"
    pid = read_pid(pid_file)
    if pid is not None and alive(pid, MARKER):
        running = pid  # bound for the lambda (mypy: pid is narrowed here only)
        wait("schema registry", registry_answers, REGISTRY_READY_TIMEOUT,
             lambda: alive(running, MARKER))  # fmt: skip
        say(f"schema registry already running (pid {pid}) at {REGISTRY_URL}")
        return
    if port_open(REGISTRY_PORT):
        raise StackError(f"port {REGISTRY_PORT} is taken by a process this stack did not start")
    java = require("java", "install OpenJDK 17 (apt-get install openjdk-17-jre-headless)")
    bundle = registry_home()
    home.mkdir(parents=True, exist_ok=True)
    heap = os.environ.get("DIGEST_STREAM_DEV_REGISTRY_HEAP", "384m")
    log = (home / "registry.log").open("ab")
    proc = subprocess.Popen(
        [java, f"-Xmx{heap}", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
         # Loopback only, like the broker and Redis of this stack.
         f"-Dquarkus.http.host={HOST}", f"-Dquarkus.http.port={REGISTRY_PORT}",
         "-jar", str(_runner(bundle))],
        cwd=home, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    pid_file.write_text(str(proc.pid))
    say(f"started Apicurio Registry {APICURIO_VERSION} (pid {proc.pid}), waiting for its API")
    wait("schema registry", registry_answers, REGISTRY_READY_TIMEOUT, lambda: proc.poll() is None)


def registry_down() -> None:
    """Stop the registry this stack started (its schemas were in memory only)."""
    home = stack_dir() / "registry"
    stop_pid(home / "registry.pid", MARKER, "schema registry")
    shutil.rmtree(home, ignore_errors=True)


def registry_running() -> bool:
    """Whether this stack's registry answers."""
    return registry_answers()
