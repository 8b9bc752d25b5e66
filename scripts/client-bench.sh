#!/usr/bin/env bash
# What a tool call costs an agent, through both clients, in one run (docs/benchmarks.md,
# "Judged-through markers"). On a running broker (scripts/kafka.sh start PORT):
#   1. the broker's CPU with nothing of ours on it, then with an idle `loopguard serve`
#      (defaults: one stream thread per core) for IDLE seconds each;
#   2. the broker warmed up: WARM seconds of a fleet at RATE events/s (`loadgen latency`),
#      which keeps running in the background through step 3;
#   3. each client (Python, TypeScript), each path (read_committed, read_uncommitted):
#      HEALTHY timed healthy calls (answered "no verdict" by a judged-through marker; up to
#      THINK_MS (100) of tool and model time between an answer and the next call) and
#      LOOPS looping sessions whose third call is blocked (timed); before the load, an idle
#      client's requests per second to the broker;
#   4. the guard's marker counters against its events and verdicts.
#
#   KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092 scripts/client-bench.sh [BIN]
# Env: RATE (1000), WARM (60), IDLE (20), HEALTHY (300), LOOPS (20), FRESH (20), THINK_MS (100),
#      PARTITIONS (4), ADMIN_PORT (19465). Needs the Python client's venv (build/pyclient-2.16.1,
#      made by scripts/clients-test.sh) and clients/typescript/dist (npm ci).
#      COMPARE_DIR, COMPARE_PY: another checkout's clients (its benches/clients, its
#      clients/typescript/dist, a venv with its Python client), run before ours on the same
#      guard and load: a before/after in one run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-target/release/loopguard}
: "${KAFKA_BOOTSTRAP_SERVERS:?set KAFKA_BOOTSTRAP_SERVERS}"
RATE=${RATE:-1000} WARM=${WARM:-60} IDLE=${IDLE:-20} PARTITIONS=${PARTITIONS:-4}
export HEALTHY=${HEALTHY:-300} LOOPS=${LOOPS:-20} FRESH=${FRESH:-20}
ADMIN_PORT=${ADMIN_PORT:-19465}
PY=${PY:-build/pyclient-2.16.1/bin/python}
port=${KAFKA_BOOTSTRAP_SERVERS##*:}
broker=$(cat "build/kafka/run-$port/kafka.pid")
tag=cbench-$(date +%s)-$$
work=build/bench/$tag
mkdir -p "$work"
say() { echo "client-bench: $*" >&2; }
guard= load=
trap '[ -n "$load" ] && { pkill -P $load; kill $load; } 2>/dev/null; [ -n "$guard" ] && kill $guard 2>/dev/null; true' EXIT

# CPU seconds (user + system) of process $1 so far.
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }
# Cores process $1 uses over $2 seconds.
cores() {
  local a b
  a=$(cpu_s "$1")
  sleep "$2"
  b=$(cpu_s "$1")
  echo "scale=3; ($b - $a) / $2" | bc
}

. scripts/lib/bench_topics.sh
use_topics "$tag"
say "run $tag; load: $(cut -d' ' -f1-3 /proc/loadavg)"

alone=$(cores "$broker" "$IDLE")
"$BIN" serve >"$work/serve.log" 2>&1 &
guard=$!
threads=$(nproc)
[ "$threads" -gt "$PARTITIONS" ] && threads=$PARTITIONS
for _ in $(seq 300); do
  [ "$(grep -c 'assignment restored' "$work/serve.log")" -ge "$threads" ] && break
  sleep 0.1
done
sleep 5 # the group settled
with_guard=$(cores "$broker" "$IDLE")
say "broker alone $alone cores, with an idle guard $with_guard cores"
clients() {
  if [ -n "${COMPARE_DIR:-}" ]; then
    echo "-- $COMPARE_DIR" >&2
    "$COMPARE_PY" "$COMPARE_DIR/benches/clients/bench_python.py" "$KAFKA_BOOTSTRAP_SERVERS" "$tag-events" "$tag-verdicts" | tee -a "$work/compare-python.json"
    node "$COMPARE_DIR/benches/clients/bench_typescript.mjs" "$KAFKA_BOOTSTRAP_SERVERS" "$tag-events" "$tag-verdicts" | tee -a "$work/compare-typescript.json"
    echo "-- this checkout" >&2
  fi
  "$PY" benches/clients/bench_python.py "$KAFKA_BOOTSTRAP_SERVERS" "$tag-events" "$tag-verdicts" | tee -a "$work/python.json"
  node benches/clients/bench_typescript.mjs "$KAFKA_BOOTSTRAP_SERVERS" "$tag-events" "$tag-verdicts" | tee -a "$work/typescript.json"
}
# An idle client: nothing on its partition (the guard idle too).
IDLE_SECONDS=$IDLE clients

# Rounds of 30 s (the load tool generates a round's events before it starts sending).
(while :; do
  "$BIN" loadgen --events-topic "$tag-events" --verdicts-topic "$tag-verdicts" latency \
    --rate "$RATE" --duration 30 --sessions 2000 || exit 1
done) >"$work/load.log" 2>&1 &
load=$!
say "warming the broker up: $WARM s at $RATE events/s"
sleep "$WARM"
broker_loaded=$(cores "$broker" 5)
guard_loaded=$(cores "$guard" 5)
say "at $RATE events/s: broker $broker_loaded cores, guard $guard_loaded cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"

metric() { curl -fs "http://127.0.0.1:$ADMIN_PORT/metrics" | awk -v m="$1" '$1 ~ "^"m {s += $2} END {print s + 0}'; }
m0=$(metric loopguard_judged_markers_total) b0=$(metric loopguard_judged_marker_bytes_total)
e0=$(metric loopguard_events_consumed_total) v0=$(metric loopguard_verdicts_total)
t0=$(date +%s.%N)

clients

t1=$(date +%s.%N)
m1=$(metric loopguard_judged_markers_total) b1=$(metric loopguard_judged_marker_bytes_total)
e1=$(metric loopguard_events_consumed_total) v1=$(metric loopguard_verdicts_total)
pkill -P $load 2>/dev/null || true
kill $load 2>/dev/null || true
wait $load 2>/dev/null || true
load=
python3 - "$t0" "$t1" "$m0" "$m1" "$b0" "$b1" "$e0" "$e1" "$v0" "$v1" <<'EOF'
import sys
t0, t1, m0, m1, b0, b1, e0, e1, v0, v1 = map(float, sys.argv[1:])
s = t1 - t0
print(f"markers: {(m1 - m0) / s:.0f}/s, {(b1 - b0) / max(m1 - m0, 1):.0f} bytes each; events {(e1 - e0) / s:.0f}/s, verdicts {(v1 - v0) / s:.1f}/s; markers per event {(m1 - m0) / max(e1 - e0, 1):.2f}")
EOF
kill -TERM $guard
wait $guard || true
guard=
say "logs in $work; load: $(cut -d' ' -f1-3 /proc/loadavg)"
