#!/usr/bin/env bash
# The guard's throughput and latency against its own engine, measured in one run on a
# running broker (scripts/kafka.sh start). First event-to-verdict latency at a paced rate,
# read_committed and read_uncommitted (de-duplicated on verdict_id). Then each of ROUNDS
# rounds puts the same fleet file through `loopguard replay` (engine + decoding, no
# Kafka), through a `loopguard serve` started and ready before the load (its group's
# committed drain) and through a plain consumer (read_committed); the ratios of each round
# and their medians are printed (the machine is shared and noisy: one round is not a
# figure). Fresh topics per round; they are left on the broker (names printed).
#
#   scripts/service-bench.sh [BIN]
# Env: KAFKA_BOOTSTRAP_SERVERS (127.0.0.1:19092), EVENTS (200000), SESSIONS (3000),
#      PARTITIONS (4), ROUNDS (3), RATE (1000), DURATION (20 s; 0 skips the latency runs),
#      ADMIN_PORT (19464), and any LOOPGUARD__KAFKA__* setting for the guard
#      (e.g. LOOPGUARD__KAFKA__THREADS=2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-target/release/loopguard}
export KAFKA_BOOTSTRAP_SERVERS=${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:19092}
EVENTS=${EVENTS:-200000} SESSIONS=${SESSIONS:-3000} PARTITIONS=${PARTITIONS:-4}
ROUNDS=${ROUNDS:-3} RATE=${RATE:-1000} DURATION=${DURATION:-20} ADMIN_PORT=${ADMIN_PORT:-19464}
run=bench-$(date +%s)-$$
work=build/bench/$run
mkdir -p "$work"
say() { echo "service-bench: $*" >&2; }
guard=
trap '[ -n "$guard" ] && kill $guard 2>/dev/null || true' EXIT

# use_topics TAG: the guard and the load tool on topics named after TAG.
. scripts/lib/bench_topics.sh
lg() { "$BIN" loadgen --events-topic "$tag-events" --verdicts-topic "$tag-verdicts" "$@"; }

# Starts the guard on the current topics and waits until it is ready: every stream
# thread in the group with its partitions restored. Ready alone can be the first thread
# holding all the partitions before the second has joined (this broker runs with
# group.initial.rebalance.delay.ms=0); the load would then land on a hand-over.
start_guard() {
  "$BIN" serve >"$work/$tag.serve.log" 2>&1 &
  guard=$!
  local threads=${LOOPGUARD__KAFKA__THREADS:-$(nproc)}
  [ "$threads" -gt "$PARTITIONS" ] && threads=$PARTITIONS
  for _ in $(seq 300); do
    if [ "$(grep -c 'assignment restored' "$work/$tag.serve.log")" -ge "$threads" ] &&
      curl -fs "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  say "guard not ready after 30 s: $work/$tag.serve.log"
  exit 1
}
stop_guard() { kill -TERM $guard; wait $guard || true; guard=; }
rate_of() { sed -n 's/.*(\([0-9]*\) events\/s).*/\1/p'; }

say "run $run: $ROUNDS rounds of $EVENTS events, $PARTITIONS partitions; load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" loadgen dump --events "$EVENTS" --sessions "$SESSIONS" >"$work/fleet.jsonl"
# Latency first, on a quiet broker: after the drains it compacts their state topics
# (min.compaction.lag.ms = 60 s), which shared the two cores with the paced run.
lc=skipped lu=skipped
if [ "$DURATION" != 0 ]; then
  use_topics "$run-latency"
  start_guard
  lc=$(lg latency --rate "$RATE" --duration "$DURATION" --sessions "$SESSIONS" --isolation committed | tee /dev/stderr | tr '\n' ' ')
  lu=$(lg latency --rate "$RATE" --duration "$DURATION" --sessions "$SESSIONS" --isolation uncommitted | tee /dev/stderr | tr '\n' ' ')
  stop_guard
fi

rounds=()
for r in $(seq "$ROUNDS"); do
  use_topics "$run-r$r"
  start=$(date +%s.%N)
  "$BIN" replay "$work/fleet.jsonl" >/dev/null 2>&1
  replay_s=$(echo "$(date +%s.%N) - $start" | bc)
  start_guard
  lg preload --file "$work/fleet.jsonl" >&2
  drain=$(lg drain --group "$tag" | tee /dev/stderr | rate_of)
  stop_guard
  raw=$(lg raw-consume | tee /dev/stderr | rate_of)
  rounds+=("$replay_s $drain $raw")
  say "round $r: replay $replay_s s, drain $drain events/s, raw $raw events/s; load: $(cut -d' ' -f1-3 /proc/loadavg)"
done

python3 - "$EVENTS" "$lc" "$lu" "${rounds[@]}" <<'EOF'
import statistics, sys
events, lc, lu = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rows = []
for i, r in enumerate(sys.argv[4:], 1):
    replay_s, drain, raw = r.split()
    replay = events / float(replay_s)
    drain, raw = float(drain), float(raw)
    rows.append((replay, drain, raw))
    print(f"round {i}: replay {replay:,.0f} events/s, guard drain {drain:,.0f} = {drain / replay:.2f}x replay, {drain / raw:.3f}x raw")
med = lambda xs: statistics.median(xs)
print(f"median replay (engine + decode): {med([r[0] for r in rows]):,.0f} events/s")
print(f"median raw consume (read_committed): {med([r[2] for r in rows]):,.0f} events/s")
print(f"median guard drain: {med([r[1] for r in rows]):,.0f} events/s; drain/replay median {med([r[1] / r[0] for r in rows]):.2f}x (rounds {', '.join(f'{r[1] / r[0]:.2f}' for r in rows)}), drain/raw median {med([r[1] / r[2] for r in rows]):.3f}x")
print(f"read_committed:   {lc}")
print(f"read_uncommitted: {lu}")
EOF
say "logs in $work; load: $(cut -d' ' -f1-3 /proc/loadavg)"
