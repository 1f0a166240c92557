#!/usr/bin/env bash
# The system packages `make test` and `make demo` need, installed when missing, before anything
# else runs: one line per package saying why. `.ci/run` goes through `make test`, so through
# this script too. Usage: scripts/system-deps.sh test|demo
#
# Where it cannot install (neither root nor passwordless sudo, or no apt-get), it stops with one
# line naming the packages, so that a fresh machine fails here and not halfway through a test.
set -euo pipefail

profile=${1:-test}
case "$profile" in
  test | demo) ;;
  *) echo "usage: $0 test|demo" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python3}

# What each need is, as: command to look for, Debian package, why (one line).
needs=(
  "java|openjdk-17-jre-headless|runs the local Kafka broker (KRaft)"
  "mvn|maven|fetches the Kafka broker's jars from Maven Central"
  "redis-server|redis-server|the local Redis 7 and the Redis Cluster"
  "redis-cli|redis-tools|forms the local Redis Cluster"
)
if [ "$profile" = test ]; then
  needs+=(
    "openssl|openssl|makes the certificates of the secured stack (TLS, SASL, ACL)"
    "promtool|prometheus|checks deploy/prometheus's alert rules (promtool test rules)"
    "prometheus|prometheus|evaluates the alert rules against a live service"
    "javac|openjdk-17-jdk-headless|builds the Kafka Streams bench peer, whose test runs on the broker"
  )
fi

missing_pkgs=()
reasons=()
for need in "${needs[@]}"; do
  IFS='|' read -r cmd pkg why <<<"$need"
  command -v "$cmd" >/dev/null 2>&1 && continue
  case " ${missing_pkgs[*]-} " in *" $pkg "*) continue ;; esac
  missing_pkgs+=("$pkg")
  reasons+=("$pkg: $why ($cmd is not on PATH)")
done
# `python -m venv` needs ensurepip, which Debian ships apart from the interpreter.
if ! "$PYTHON" -c 'import ensurepip' >/dev/null 2>&1; then
  venv_pkg="python3-venv"
  ver=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null || true)
  [ -n "$ver" ] && venv_pkg="python${ver}-venv"
  missing_pkgs+=("$venv_pkg")
  reasons+=("$venv_pkg: creates the project's .venv ($PYTHON has no ensurepip)")
fi

[ ${#missing_pkgs[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  sudo=(none)
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "${sudo[*]-}" = none ]; then
  echo "system-deps: cannot install (needs root or passwordless sudo, and apt-get): install ${missing_pkgs[*]} and run make $profile again" >&2
  exit 1
fi

for line in "${reasons[@]}"; do echo "system-deps: installing $line"; done
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp -t system-deps.XXXXXX.log)
apt() {
  "${sudo[@]}" apt-get "$@" >>"$log" 2>&1 || {
    echo "system-deps: apt-get $1 failed; its last lines (all of it in $log):" >&2
    tail -n 5 "$log" >&2
    exit 1
  }
}
apt update -q
# Without recommends: prometheus would bring node-exporter, one more service nobody uses.
apt install -y -q --no-install-recommends "${missing_pkgs[@]}"
rm -f "$log"
# Debian's packages may start their own system services; nothing of ours uses them, and the
# Redis one would take 6379.
for svc in prometheus redis-server; do
  case " ${missing_pkgs[*]} " in *" $svc "*) ;; *) continue ;; esac
  if [ -d /run/systemd/system ]; then
    "${sudo[@]}" systemctl disable --now "$svc" >/dev/null 2>&1 || true
  else
    "${sudo[@]}" invoke-rc.d "$svc" stop >/dev/null 2>&1 || true
  fi
done
for need in "${needs[@]}"; do
  IFS='|' read -r cmd pkg _ <<<"$need"
  command -v "$cmd" >/dev/null 2>&1 || { echo "system-deps: $pkg is installed but $cmd is still not on PATH" >&2; exit 1; }
done
echo "system-deps: done"
