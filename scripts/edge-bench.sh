#!/usr/bin/env bash
# A healthy call's answer time through the edge, the hook command (process start included)
# and the MCP proxy, both read paths side by side in one run, under a fleet load on a
# warmed broker (docs/benchmarks.md, "The edge, hooks and the MCP proxy").
#
#   KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092 scripts/edge-bench.sh [BIN]
# Env: RATE (1000 events/s of fleet load), WARM (60 s), PARTITIONS (4), ADMIN_PORT (19475),
#      HEALTHY, HOOKS, MCP_CALLS, THINK_MS (benches/edge/bench_edge.py). Needs build/mcp-venv
#      (scripts/mcp-proxy-test.sh makes it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-target/release/loopguard}
: "${KAFKA_BOOTSTRAP_SERVERS:?set KAFKA_BOOTSTRAP_SERVERS}"
RATE=${RATE:-1000} WARM=${WARM:-60} PARTITIONS=${PARTITIONS:-4} ADMIN_PORT=${ADMIN_PORT:-19475}
PY=${PY:-build/mcp-venv/bin/python}
tag=ebench-$(date +%s)-$$
work=build/bench/$tag
mkdir -p "$work"
say() { echo "edge-bench: $*" >&2; }
pids=() load=
trap '[ -n "$load" ] && { pkill -P $load; kill $load; } 2>/dev/null; for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; true' EXIT
. scripts/lib/bench_topics.sh
use_topics "$tag"
say "run $tag; load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" serve >"$work/serve.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do curl -fs "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
"$BIN" edge --listen 127.0.0.1:19476 >"$work/edge-rc.log" 2>&1 &
pids+=($!)
"$BIN" edge --listen 127.0.0.1:19477 --read-uncommitted >"$work/edge-ru.log" 2>&1 &
pids+=($!)
(while :; do
  "$BIN" loadgen --events-topic "$tag-events" --verdicts-topic "$tag-verdicts" latency \
    --rate "$RATE" --duration 30 --sessions 2000 || exit 1
done) >"$work/load.log" 2>&1 &
load=$!
say "warming the broker up: $WARM s at $RATE events/s"
sleep "$WARM"
for path in read_uncommitted:19477 read_committed:19476; do
  "$PY" benches/edge/bench_edge.py "http://127.0.0.1:${path#*:}" "$BIN" "${path%%:*}" | tee -a "$work/edge.json"
done
say "load: $(cut -d' ' -f1-3 /proc/loadavg); logs in $work"
