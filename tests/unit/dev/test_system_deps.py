"""scripts/system-deps.sh, which `make test` and `make demo` run first (issue 36, item 1): it
installs only what is missing, saying why in one line each, and where it cannot install it
stops with one line naming the packages. The script runs on a PATH of stubs: `apt-get` and `id`
only log and answer, so nothing is installed on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "system-deps.sh"
#: What the test profile looks for; each is a stub on PATH unless a test leaves it out.
COMMANDS = ("java", "mvn", "redis-server", "redis-cli", "openssl", "promtool", "prometheus")
COMMANDS_TEST = (*COMMANDS, "javac")
#: Commands the script itself runs, linked from the real system.
TOOLS = ("bash", "cat", "mktemp", "rm", "tail")


def _path(tmp_path: Path, present: tuple[str, ...], *, root: bool, apt: bool) -> Path:
    """A bin folder of stubs: the named commands, `id`, and `apt-get` when apt."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        for folder in ("/usr/bin", "/bin"):
            if Path(folder, tool).exists():
                (bin_dir / tool).symlink_to(Path(folder, tool))
                break
    stubs = {name: "exit 0" for name in present}
    stubs["id"] = f'[ "$1" = -u ] && echo {0 if root else 1000}; exit 0'
    if apt:
        stubs["apt-get"] = 'echo "$*" >> "$APT_LOG"; exit 0'
    for name, body in stubs.items():
        stub = bin_dir / name
        stub.write_text(f"#!/bin/bash\n{body}\n")
        stub.chmod(0o755)
    return bin_dir


def _run(
    tmp_path: Path, present: tuple[str, ...], *, root: bool = True, apt: bool = True
) -> subprocess.CompletedProcess[str]:
    bin_dir = _path(tmp_path, present, root=root, apt=apt)
    env = {
        "PATH": str(bin_dir),
        "PYTHON": sys.executable,  # has ensurepip: python3-venv is not needed
        "APT_LOG": str(tmp_path / "apt.log"),
        "HOME": os.environ.get("HOME", "/root"),
    }
    return subprocess.run(
        ["/bin/bash", str(SCRIPT), "test"], env=env, capture_output=True, text=True, timeout=60
    )


def _apt_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


def test_nothing_missing_installs_nothing_and_says_nothing(tmp_path: Path) -> None:
    done = _run(tmp_path, COMMANDS_TEST)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert _apt_calls(tmp_path) == []


def test_a_missing_prometheus_is_installed_with_one_line_saying_why(tmp_path: Path) -> None:
    present = tuple(name for name in COMMANDS_TEST if name not in ("promtool", "prometheus"))
    done = _run(tmp_path, present)
    # The stub apt-get installs nothing, so the script's last check fails: it must say so.
    assert done.returncode == 1
    installing = [line for line in done.stdout.splitlines() if "installing" in line]
    assert installing == [
        "system-deps: installing prometheus: checks deploy/prometheus's alert rules"
        " (promtool test rules) (promtool is not on PATH)"
    ]
    calls = _apt_calls(tmp_path)
    assert calls[0] == "update -q"
    assert calls[1] == "install -y -q --no-install-recommends prometheus"
    assert "prometheus is installed but promtool is still not on PATH" in done.stderr


def test_without_root_it_stops_with_one_line_naming_the_packages(tmp_path: Path) -> None:
    done = _run(tmp_path, ("java", "mvn", "openssl", "javac"), root=False)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "system-deps: cannot install (needs root or passwordless sudo, and apt-get): install"
        " redis-server redis-tools prometheus and run make test again"
    ]
    assert _apt_calls(tmp_path) == []


def test_without_apt_get_it_stops_with_one_line_naming_the_packages(tmp_path: Path) -> None:
    done = _run(tmp_path, ("mvn", "redis-server", "redis-cli", "openssl"), apt=False)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "system-deps: cannot install (needs root or passwordless sudo, and apt-get): install"
        " openjdk-17-jre-headless prometheus openjdk-17-jdk-headless and run make test again"
    ]
