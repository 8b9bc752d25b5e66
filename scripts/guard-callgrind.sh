#!/usr/bin/env bash
# Instructions the guard spends per event against `loopguard replay` on the same events,
# with callgrind (exact, whatever the machine's load). A guard with one stream thread
# under callgrind, on fresh topics of a running broker (scripts/kafka.sh start), joins its
# group; its counters are zeroed; EVENTS events of a fleet file are loaded and drained;
# the counters are dumped before a kill -9 (so the shutdown checkpoint is not counted).
# Then `loopguard replay` of the same events under callgrind. Prints both totals and
# leaves the callgrind.out files (callgrind_annotate --inclusive=yes FILE) in the run's
# directory.
#
#   scripts/guard-callgrind.sh [BIN]
# Env: KAFKA_BOOTSTRAP_SERVERS (127.0.0.1:19092), EVENTS (20000), PARTITIONS (4),
#      ADMIN_PORT (19465).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-target/release/loopguard}
export KAFKA_BOOTSTRAP_SERVERS=${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:19092}
EVENTS=${EVENTS:-20000} PARTITIONS=${PARTITIONS:-4} ADMIN_PORT=${ADMIN_PORT:-19465}
run=callgrind-$(date +%s)-$$
work=build/bench/$run
mkdir -p "$work"
say() { echo "guard-callgrind: $*" >&2; }
guard=
trap '[ -n "$guard" ] && kill -9 $guard 2>/dev/null || true' EXIT
. scripts/lib/bench_topics.sh

"$BIN" loadgen dump --events "$EVENTS" --sessions 3000 >"$work/fleet.jsonl"
use_topics "$run"
LOOPGUARD__KAFKA__THREADS=1 valgrind --tool=callgrind --separate-threads=no \
  --callgrind-out-file="$work/callgrind.out.guard" "$BIN" serve >"$work/serve.log" 2>&1 &
guard=$!
for _ in $(seq 600); do
  grep -q 'assignment restored' "$work/serve.log" && break
  sleep 0.5
done
grep -q 'assignment restored' "$work/serve.log" || { say "guard not ready: $work/serve.log"; exit 1; }
sleep 2
callgrind_control -z "$guard" >/dev/null
lg preload --file "$work/fleet.jsonl" >&2
lg drain --group "$run" >&2
callgrind_control -d "$guard" >/dev/null
sleep 2
kill -9 "$guard"; wait "$guard" 2>/dev/null || true; guard=
valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out.replay" \
  "$BIN" replay "$work/fleet.jsonl" >/dev/null 2>"$work/replay.log"
total() { callgrind_annotate "$1" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,; }
g=$(for f in "$work"/callgrind.out.guard*; do total "$f"; done | awk '{ s += $1 } END { print s }')
r=$(total "$work/callgrind.out.replay")
echo "guard (every thread, after the group join): $g instructions, $((g / EVENTS)) per event"
echo "replay: $r instructions, $((r / EVENTS)) per event; guard / replay = $(echo "scale=2; $g / $r" | bc)"
echo "files: $work"
