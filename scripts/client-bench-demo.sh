#!/usr/bin/env bash
# What a tool call costs an agent on `loopguard demo`'s embedded broker, the first broker a
# newcomer points a client at (docs/benchmarks.md, "The first call and the tail"): the same
# client benchmarks as scripts/client-bench.sh (benches/clients/), both clients, both paths,
# against a running demo with its simulated fleet as the load. Compare with client-bench.sh's
# figures on the real broker taken in the same session.
#
#   scripts/client-bench-demo.sh [BIN]
# Env: PORT (19292), HEALTHY (300), LOOPS (20), FRESH (20), THINK_MS (100). Needs the Python
#      client's venv (build/pyclient-2.16.1, made by scripts/clients-test.sh) and
#      clients/typescript/dist (npm ci).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-target/release/loopguard}
PORT=${PORT:-19292}
export HEALTHY=${HEALTHY:-300} LOOPS=${LOOPS:-20} FRESH=${FRESH:-20}
PY=${PY:-build/pyclient-2.16.1/bin/python}
work=build/bench/demo-$(date +%s)-$$
mkdir -p "$work"
say() { echo "client-bench-demo: $*" >&2; }
demo=
trap '[ -n "$demo" ] && kill -INT $demo 2>/dev/null; true' EXIT

LOOPGUARD__ADMIN__LISTEN=127.0.0.1:0 RUST_LOG=warn "$BIN" demo --listen "127.0.0.1:$PORT" >"$work/demo.out" 2>"$work/demo.err" &
demo=$!
for _ in $(seq 600); do grep -q "embedded Kafka-protocol broker at" "$work/demo.out" 2>/dev/null && break; sleep 0.1; done
sleep 5 # the guard's group settled, the fleet playing
say "demo at 127.0.0.1:$PORT; load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" benches/clients/bench_python.py "127.0.0.1:$PORT" agent-events agent-verdicts | tee "$work/python.json"
node benches/clients/bench_typescript.mjs "127.0.0.1:$PORT" agent-events agent-verdicts | tee "$work/typescript.json"
say "logs in $work; load: $(cut -d' ' -f1-3 /proc/loadavg)"
