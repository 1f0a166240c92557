#!/usr/bin/env bash
# `make demo`: the pipeline end to end on the local stack, with short delays and a live view.
# Brings up Kafka and Redis when needed, starts the service and a sample producer, shows
# digests as they are published, then stops everything it started (by pid, and the stack if it
# brought it up), also on Ctrl-C. A stack that already ran (any part of it) is left running.
set -euo pipefail
cd "$(dirname "$0")/.."
# The command the demo drives; tests/unit/dev/test_demo.py points it at a harmless stub.
DS=${DIGEST_STREAM_DEMO_CLI:-.venv/bin/digest-stream}

SECONDS_TO_RUN=${DEMO_SECONDS:-30}
export DIGEST_STREAM_NAMESPACE=${DIGEST_STREAM_NAMESPACE:-demo}
export DIGEST_STREAM_MINIMUM_DELAY=${DIGEST_STREAM_MINIMUM_DELAY:-5}
export DIGEST_STREAM_INCREMENT_DELAY=${DIGEST_STREAM_INCREMENT_DELAY:-1}
export DIGEST_STREAM_MAXIMUM_DELAY=${DIGEST_STREAM_MAXIMUM_DELAY:-10}
export DIGEST_STREAM_TTL=${DIGEST_STREAM_TTL:-120}
export DIGEST_STREAM_MAINTENANCE_TIMEOUT=${DIGEST_STREAM_MAINTENANCE_TIMEOUT:-30}

log=$(mktemp -t digest-stream-demo.XXXXXX.log)
pids=()
own_stack=0
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
  if [ "$own_stack" = 1 ]; then
    own_stack=0
    echo "== stopping the stack the demo started"
    $DS dev down || true
  fi
}
trap cleanup EXIT
# An interrupted script still exits through the EXIT trap.
trap 'exit 130' INT
trap 'exit 143' TERM

# Anything answering already (someone's `make stack-up`, another shell's demo) is not ours.
before=$($DS dev status 2>/dev/null || true)
if grep -qE ' up$' <<<"$before"; then
  echo "== stack already running: the demo uses it and leaves it up (\`make stack-down\` stops it)"
else
  own_stack=1
  echo "== stack up (Kafka, Redis; stopped again at the end)"
fi
$DS dev up >/dev/null  # idempotent: starts only what does not answer
eval "$($DS dev env | grep -v CLUSTER)"

echo "== topics"
$DS topics create --partitions 4
echo "== service (delays: minimum ${DIGEST_STREAM_MINIMUM_DELAY}s, increment ${DIGEST_STREAM_INCREMENT_DELAY}s, maximum ${DIGEST_STREAM_MAXIMUM_DELAY}s; log: $log)"
$DS run >"$log" 2>&1 &
pids+=($!)
echo "== live digests for ${SECONDS_TO_RUN}s (first event of a timeline: at once; the rest after the cool-down)"
$DS tail --from-now --duration "$((SECONDS_TO_RUN + 12))" &
tail_pid=$!
pids+=("$tail_pid")
sleep 3  # let the tail's consumer join before the first events (demo only; tests poll)
$DS produce --timelines 24 --rate 20 --count "$((SECONDS_TO_RUN * 20))" --prefix "demo-$(date +%H%M%S)" >/dev/null
wait "$tail_pid" || true
echo "== stopping the service"
cleanup
grep -E "ERROR|Traceback" "$log" && echo "(errors above are from $log)" || echo "clean stop; service log in $log"
