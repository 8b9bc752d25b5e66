#!/usr/bin/env bash
# The guard's throughput and latency against its own engine, measured in one run on a
# running broker (scripts/kafka.sh start): the same fleet file through `loopguard replay`
# (engine + decoding, no Kafka), through a plain consumer (read_committed) and through a
# `loopguard serve` started and ready before the load (its group's committed drain); then
# event-to-verdict latency at a paced rate, read_committed and read_uncommitted
# (de-duplicated on verdict_id). Prints the ratios. Fresh topics per run; they are left on
# the broker (names printed).
#
#   scripts/service-bench.sh [BIN]
# Env: KAFKA_BOOTSTRAP_SERVERS (127.0.0.1:19092), EVENTS (200000), SESSIONS (3000),
#      PARTITIONS (4), RATE (1000), DURATION (20 s), ADMIN_PORT (19464), and any
#      LOOPGUARD__KAFKA__* setting for the guard (e.g. LOOPGUARD__KAFKA__THREADS=2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-target/release/loopguard}
export KAFKA_BOOTSTRAP_SERVERS=${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:19092}
EVENTS=${EVENTS:-200000} SESSIONS=${SESSIONS:-3000} PARTITIONS=${PARTITIONS:-4}
RATE=${RATE:-1000} DURATION=${DURATION:-20} ADMIN_PORT=${ADMIN_PORT:-19464}
tag=bench-$(date +%s)-$$
work=build/bench/$tag
mkdir -p "$work"
say() { echo "service-bench: $*" >&2; }

export LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP_SERVERS
export LOOPGUARD__KAFKA__EVENTS_TOPIC=$tag-events LOOPGUARD__KAFKA__VERDICTS_TOPIC=$tag-verdicts
export LOOPGUARD__KAFKA__DLQ_TOPIC=$tag-dlq LOOPGUARD__KAFKA__STATE_TOPIC=$tag-state
export LOOPGUARD__KAFKA__GROUP_ID=$tag LOOPGUARD__KAFKA__TRANSACTIONAL_ID_PREFIX=$tag
export LOOPGUARD__ADMIN__LISTEN=127.0.0.1:$ADMIN_PORT
lg() { "$BIN" loadgen --events-topic "$tag-events" --verdicts-topic "$tag-verdicts" "$@"; }

say "topics $tag-* ($PARTITIONS partitions); load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" topics create --partitions "$PARTITIONS" >&2

lg dump --events "$EVENTS" --sessions "$SESSIONS" >"$work/fleet.jsonl"
start=$(date +%s.%N)
"$BIN" replay "$work/fleet.jsonl" >/dev/null 2>&1
replay_s=$(echo "$(date +%s.%N) - $start" | bc)
# The guard starts on the empty topic and is ready (every stream thread in the group,
# partitions assigned) before the load lands: otherwise the first thread can take all the
# partitions and hand half of them over mid-drain when the second joins (this broker runs
# with group.initial.rebalance.delay.ms=0), which measured the hand-over, not the drain.
"$BIN" serve >"$work/serve.log" 2>&1 &
guard=$!
trap 'kill $guard 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  curl -fs "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fs "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null || { say "guard not ready: $work/serve.log"; exit 1; }
# Ready means every assigned partition is restored, which the first stream thread can be
# with all of them before the second has joined: wait for each thread's assignment too
# (up to 10 s), or the load lands on a rebalance.
threads=${LOOPGUARD__KAFKA__THREADS:-$(nproc)}
[ "$threads" -gt "$PARTITIONS" ] && threads=$PARTITIONS
for _ in $(seq 100); do
  [ "$(grep -c 'assignment restored' "$work/serve.log")" -ge "$threads" ] && break
  sleep 0.1
done
grep -q 'assignment restored' "$work/serve.log" || say "no assignment seen in $work/serve.log"
lg preload --file "$work/fleet.jsonl" >&2
drain=$(lg drain --group "$tag" | tee /dev/stderr | sed -n 's/.*(\([0-9]*\) events\/s).*/\1/p')
raw=$(lg raw-consume | tee /dev/stderr | sed -n 's/.*(\([0-9]*\) events\/s).*/\1/p')
lc=$(lg latency --rate "$RATE" --duration "$DURATION" --sessions "$SESSIONS" --isolation committed | tee /dev/stderr | sed -n 1p)
lu=$(lg latency --rate "$RATE" --duration "$DURATION" --sessions "$SESSIONS" --isolation uncommitted | tee /dev/stderr | sed -n 1p)
kill -TERM $guard; wait $guard || true

python3 - "$EVENTS" "$replay_s" "$raw" "$drain" "$lc" "$lu" <<'EOF'
import sys
events, replay_s, raw, drain = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
replay = events / replay_s
print(f"replay (engine + decode): {replay:,.0f} events/s")
print(f"raw consume (read_committed): {raw:,.0f} events/s")
print(f"guard drain: {drain:,.0f} events/s = {drain / replay:.2f}x replay, {drain / raw:.3f}x raw")
print(f"read_committed:   {sys.argv[5]}")
print(f"read_uncommitted: {sys.argv[6]}")
EOF
say "guard log: $work/serve.log; load: $(cut -d' ' -f1-3 /proc/loadavg)"
