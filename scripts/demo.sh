#!/usr/bin/env bash
# `make demo`: the pipeline end to end on the local stack, with short delays and a live view.
# Starts the service and a sample producer, shows digests as they are published, then stops
# everything it started (by pid), also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
eval "$($BIN/digest-stream dev env | grep -v CLUSTER)"

SECONDS_TO_RUN=${DEMO_SECONDS:-30}
export DIGEST_STREAM_NAMESPACE=${DIGEST_STREAM_NAMESPACE:-demo}
export DIGEST_STREAM_MINIMUM_DELAY=${DIGEST_STREAM_MINIMUM_DELAY:-5}
export DIGEST_STREAM_INCREMENT_DELAY=${DIGEST_STREAM_INCREMENT_DELAY:-1}
export DIGEST_STREAM_MAXIMUM_DELAY=${DIGEST_STREAM_MAXIMUM_DELAY:-10}
export DIGEST_STREAM_TTL=${DIGEST_STREAM_TTL:-120}
export DIGEST_STREAM_MAINTENANCE_TIMEOUT=${DIGEST_STREAM_MAINTENANCE_TIMEOUT:-30}

log=$(mktemp -t digest-stream-demo.XXXXXX.log)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

echo "== topics"
$BIN/digest-stream topics create --partitions 4
echo "== service (delays: minimum ${DIGEST_STREAM_MINIMUM_DELAY}s, increment ${DIGEST_STREAM_INCREMENT_DELAY}s, maximum ${DIGEST_STREAM_MAXIMUM_DELAY}s; log: $log)"
$BIN/digest-stream run >"$log" 2>&1 &
pids+=($!)
echo "== live digests for ${SECONDS_TO_RUN}s (first event of a timeline: at once; the rest after the cool-down)"
$BIN/digest-stream tail --from-now --duration "$((SECONDS_TO_RUN + 12))" &
tail_pid=$!
sleep 3  # let the tail's consumer join before the first events (demo only; tests poll)
$BIN/digest-stream produce --timelines 24 --rate 20 --count "$((SECONDS_TO_RUN * 20))" --prefix "demo-$(date +%H%M%S)" >/dev/null
wait "$tail_pid" || true
echo "== stopping the service"
cleanup
pids=()
grep -E "ERROR|Traceback" "$log" && echo "(errors above are from $log)" || echo "clean stop; service log in $log"
