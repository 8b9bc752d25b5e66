#!/usr/bin/env bash
# Scale-out, shown (issue 19), on a running broker (scripts/kafka.sh start PORT).
#
# Phase A, a rolling restart under load: INSTANCES `loopguard serve` processes of THREADS
# stream threads each, one group, fresh topics of PARTITIONS partitions. A fleet file is
# produced at RATE events/s, in chunks of CHUNK_SECS seconds, for as long as the restarts
# take (WARMUP seconds before the first, TAIL after the last). Each instance in turn is
# sent SIGTERM: it must exit 0 with every stream thread's in-flight work committed; it is
# started again and the group must settle (every instance ready, the partitions all
# owned, the restarted one among the owners) before the next. After the load the guards
# drain (the group's committed offsets at the end of the events topic) and stop. Then the
# check: the verdicts topic read read_committed (markers set aside) against `loopguard
# replay` of the events produced, by scripts/same_stream.py (the same verdicts, none
# missing or doubled, per session in replay's order), and the dead-letter topic empty.
# Any difference fails the run.
#
# Phase B, drain rate and CPU per event, 1 instance against 2: DRAIN_EVENTS fleet events
# preloaded on a fresh topic with no guard running, then drained by a fresh group of 1
# instance and, on another fresh topic, of 2 (THREADS threads each), ROUNDS times each;
# events/s from the group's first commit and from the guards' start, the guards' CPU time
# per event (user + system from /proc since their start, summed over the instances) and
# the broker's, the guards' committed transactions and judged-through markers. A Markdown
# table, with the load average.
#
#   scripts/scale-out.sh [BIN]
# Env: KAFKA_BOOTSTRAP_SERVERS (127.0.0.1:19092), INSTANCES (4), THREADS (2),
#      PARTITIONS (32), RATE (3000), CHUNK_SECS (10), WARMUP (15 s), TAIL (15 s),
#      MAX_EVENTS (400000: the most phase A may produce), SESSIONS (3000),
#      DRAIN_EVENTS (1000000; 0 skips phase B), ROUNDS (2: of phase B's pair of drains),
#      ADMIN_PORT (19620: instance i listens on ADMIN_PORT + i), SETTLE_TIMEOUT (120 s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-target/release/loopguard}
export KAFKA_BOOTSTRAP_SERVERS=${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:19092}
INSTANCES=${INSTANCES:-4} THREADS=${THREADS:-2} PARTITIONS=${PARTITIONS:-32}
RATE=${RATE:-3000} CHUNK_SECS=${CHUNK_SECS:-10} WARMUP=${WARMUP:-15} TAIL=${TAIL:-15}
MAX_EVENTS=${MAX_EVENTS:-400000} SESSIONS=${SESSIONS:-3000} DRAIN_EVENTS=${DRAIN_EVENTS:-1000000}
ADMIN_PORT=${ADMIN_PORT:-19620} SETTLE_TIMEOUT=${SETTLE_TIMEOUT:-120} ROUNDS=${ROUNDS:-2}
run=scale-$(date +%s)-$$
work=build/bench/$run
mkdir -p "$work"
say() { echo "scale-out: $(date +%T) $*" >&2; }
die() { say "FAILED: $*"; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# use_topics TAG (fresh topics, group, transactional ids), lg ARGS (the load tool on them).
. scripts/lib/bench_topics.sh
# cpu_us PID, broker_pid.
. scripts/lib/proc_cpu.sh
broker=$(broker_pid)
CP="build/kafka/${KAFKA_VERSION:-4.1.2}/lib/*"

pids=() loader=
cleanup() {
  for p in "${pids[@]}" $loader; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# Guard instance I (1..INSTANCES) on the current topics: its own admin port and an
# instance id stable across its restarts (a restarted instance fences its predecessor's
# transactional ids, as a restarted pod does). One log per start.
starts=()
start_instance() {
  local i=$1
  starts[i]=$((${starts[i]:-0} + 1))
  LOOPGUARD_INSTANCE_ID=$tag-g$i LOOPGUARD__KAFKA__THREADS=$THREADS \
    LOOPGUARD__ADMIN__LISTEN=127.0.0.1:$((ADMIN_PORT + i)) RUST_LOG=${RUST_LOG:-info,rdkafka=warn} \
    "$BIN" serve >"$work/$tag.g$i.${starts[i]}.log" 2>&1 &
  pids[i]=$!
}
admin() { curl -fs --max-time 2 "http://127.0.0.1:$((ADMIN_PORT + $1))/$2" 2>/dev/null; }
assigned() { admin "$1" metrics | awk '$1 == "loopguard_assigned_partitions" { print $2 }'; }

# Waits until instances FROM..TO are all ready, own every partition between them, and
# each owns at least one (when there are partitions enough for every thread).
settle() {
  local from=$1 to=$2 t0=$SECONDS i n sum ok
  while ((SECONDS - t0 < SETTLE_TIMEOUT)); do
    ok=1 sum=0
    for i in $(seq "$from" "$to"); do
      kill -0 "${pids[i]}" 2>/dev/null || die "instance $i exited: $work/$tag.g$i.${starts[i]}.log"
      admin "$i" readyz >/dev/null || { ok=0; break; }
      n=$(assigned "$i")
      [ -n "$n" ] || { ok=0; break; }
      sum=$((sum + n))
      ((n > 0 || PARTITIONS < INSTANCES * THREADS)) || ok=0
    done
    ((ok && sum == PARTITIONS)) && return 0
    sleep 0.2
  done
  die "group not settled after ${SETTLE_TIMEOUT}s (logs: $work/$tag.g*.log)"
}

# SIGTERM to instance I: it must exit 0, every stream thread having committed its
# in-flight work and left the group.
stop_instance() {
  local i=$1 rc=0 log
  log=$work/$tag.g$i.${starts[i]}.log
  kill -TERM "${pids[i]}"
  wait "${pids[i]}" || rc=$?
  pids[i]=
  ((rc == 0)) || die "instance $i exited $rc after SIGTERM: $log"
  local clean
  clean=$(grep -c 'stop requested: in-flight work committed' "$log" || true)
  ((clean == THREADS)) || die "instance $i: $clean of $THREADS stream threads committed their work on SIGTERM: $log"
}

# The records of TOPIC, read read_committed by Kafka's console consumer (it stops after
# 10 s without a record; its log to stderr), to FILE; prints how many.
read_topic() {
  [ -f "$work/log4j2.properties" ] || printf '%s\n' appender.e.type=Console appender.e.name=E \
    appender.e.target=SYSTEM_ERR appender.e.layout.type=PatternLayout rootLogger.level=WARN \
    rootLogger.appenderRef.e.ref=E >"$work/log4j2.properties"
  java "-Dlog4j2.configurationFile=$work/log4j2.properties" -cp "$CP" org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" \
    --topic "$1" --from-beginning --isolation-level read_committed --timeout-ms 10000 \
    --property print.partition=true --property print.headers=true --property print.key=true \
    >"$2" 2>"$2.log" || true
  sed -n 's/^Processed a total of \([0-9]*\) messages.*/\1/p' "$2.log" | grep . ||
    die "reading $1 failed: $2.log"
}

say "run $run: $INSTANCES instances x $THREADS threads, $PARTITIONS partitions; load: $(load)"
load_start=$(load)
"$BIN" loadgen dump --events "$MAX_EVENTS" --sessions "$SESSIONS" >"$work/fleet.jsonl"

# ---- Phase A: rolling restart under load.
use_topics "$run-a"
for i in $(seq "$INSTANCES"); do start_instance "$i"; done
settle 1 "$INSTANCES"
say "phase A: $INSTANCES instances settled; producing at $RATE events/s"
split -l $((RATE * CHUNK_SECS)) -d -a 4 "$work/fleet.jsonl" "$work/chunk."
: >"$work/produced"
(
  for c in "$work"/chunk.*; do
    [ -e "$work/stop-load" ] && break
    lg preload --file "$c" --rate "$RATE" >>"$work/load.log" 2>&1
    echo "$c" >>"$work/produced"
  done
  touch "$work/load-ended"
) &
loader=$!
load_t0=$SECONDS
sleep "$WARMUP"
restarts=()
for i in $(seq "$INSTANCES"); do
  [ -e "$work/load-ended" ] && die "the load ended before the restarts: raise MAX_EVENTS"
  t0=$SECONDS
  stop_instance "$i"
  down=$((SECONDS - t0))
  start_instance "$i"
  settle 1 "$INSTANCES"
  restarts+=("$i:${down}s:$((SECONDS - t0))s")
  say "instance $i: SIGTERM, exit 0 after ${down}s, back and the group settled after $((SECONDS - t0))s"
done
sleep "$TAIL"
[ -e "$work/load-ended" ] && die "the load ended before the last restart had settled: raise MAX_EVENTS"
touch "$work/stop-load"
wait "$loader"
loader=
load_secs=$((SECONDS - load_t0))
xargs cat <"$work/produced" >"$work/produced.jsonl"
produced=$(wc -l <"$work/produced.jsonl")
say "phase A: $produced events produced over ${load_secs}s; waiting for the drain"
drained=$(lg drain --group "$tag" --timeout 300)
committed=$(sed -n 's/.*; \([0-9]*\) of \([0-9]*\) committed/\1 \2/p' <<<"$drained")
[ "$committed" = "$produced $produced" ] ||
  die "events topic / committed offsets ($committed) do not match the $produced events produced"
for i in $(seq "$INSTANCES"); do stop_instance "$i"; done
load_a=$(load)
# What the restarts cost beyond the hand-overs: commits the group coordinator refused (a
# rebalance moved the generation on while they were in flight), the partitions rewound
# after them, the events re-run by restores; the guards' warnings and errors, counted.
guard_logs=("$work/$tag".g*.log)
replayed=$(sed -n 's/.*partition restored.* replayed=\([0-9]*\).*/\1/p' "${guard_logs[@]}" |
  awk '{ s += $1 } END { print s + 0 }')
refused=$(cat "${guard_logs[@]}" | grep -c 'TXNERR.*ILLEGAL_GENERATION' || true)
rewound=$(cat "${guard_logs[@]}" | grep -c 'rewinding partition' || true)
grep -h -E '^[^ ]+ +(WARN|ERROR) ' "${guard_logs[@]}" | sed -E 's/^[^ ]+ +//; s/[0-9]+/N/g' | cut -c1-160 |
  sort | uniq -c | sort -rn >"$work/problems.txt" || true
say "phase A: warnings and errors of the guards, by kind ($work/problems.txt):"
head -n 12 "$work/problems.txt" >&2

# Both topics read at once (each read ends with 10 s of silence), replay meanwhile.
read_topic "$tag-verdicts" "$work/verdicts.txt" >/dev/null &
reading_verdicts=$!
read_topic "$tag-dlq" "$work/dlq.txt" >"$work/dlq.count" &
reading_dlq=$!
"$BIN" replay "$work/produced.jsonl" >"$work/replay.jsonl" 2>"$work/replay.log"
wait "$reading_verdicts" || die "the verdicts topic could not be read"
wait "$reading_dlq" || die "the dead-letter topic could not be read"
dead=$(cat "$work/dlq.count")
check=$(python3 scripts/same_stream.py "$work/verdicts.txt" "$work/replay.jsonl") ||
  die "rolling restart: the verdict stream is not replay's (dump: $work/verdicts.txt, replay: $work/replay.jsonl)"
[ "$dead" = 0 ] || die "$dead dead letters for valid input: $work/dlq.txt"
say "phase A: $check"

# ---- Phase B: drain rate and CPU per event, 1 instance against 2, in ROUNDS rounds (in
# the order 1 2, 2 1, 1 2, ...: a drift of the shared machine's load touches both alike).
rows=()
if [ "$DRAIN_EVENTS" != 0 ]; then
  "$BIN" loadgen dump --events "$DRAIN_EVENTS" --sessions "$SESSIONS" >"$work/drain.jsonl"
  for r in $(seq "$ROUNDS"); do
    order="1 2"
    ((r % 2)) || order="2 1"
    for n in $order; do
      use_topics "$run-b$r-$n"
      lg preload --file "$work/drain.jsonl" >&2
      b0=$(cpu_us "$broker") t0=$(date +%s.%N)
      for i in $(seq "$n"); do start_instance "$i"; done
      drained=$(lg drain --group "$tag" --timeout 300)
      wall=$(echo "$(date +%s.%N) - $t0" | bc)
      echo "$drained" >&2
      guard_cpu=0 guard_sys=0 commits=0 markers=0
      for i in $(seq "$n"); do
        guard_cpu=$((guard_cpu + $(cpu_us "${pids[i]}"))) guard_sys=$((guard_sys + $(sys_us "${pids[i]}")))
        read -r c m < <(admin "$i" metrics | awk '$1 == "loopguard_transactions_total{outcome=\"commit\"}" { c = $2 }
          $1 == "loopguard_judged_markers_total" { m = $2 } END { print c + 0, m + 0 }')
        commits=$((commits + c)) markers=$((markers + m))
      done
      broker_cpu=$(($(cpu_us "$broker") - b0))
      for i in $(seq "$n"); do stop_instance "$i"; done
      rate=$(sed -n 's/.*(\([0-9]*\) events\/s).*/\1/p' <<<"$drained")
      rows+=("$n $rate $wall $guard_cpu $guard_sys $broker_cpu $commits $markers $(load | cut -d' ' -f1)")
    done
  done
fi
load_end=$(load)

python3 - "$INSTANCES" "$THREADS" "$PARTITIONS" "$produced" "$load_secs" "$replayed $refused $rewound" \
  "$load_start" "$load_a" "$load_end" "$DRAIN_EVENTS" "${restarts[*]}" "$check" "${rows[@]}" <<'EOF'
import statistics, sys
(inst, threads, parts, produced, secs, costs, l0, la, l1, events, restarts,
 check), rows = sys.argv[1:13], sys.argv[13:]
replayed, refused, rewound = costs.split()
print(f"## Rolling restart: {inst} instances x {threads} threads, {parts} partitions")
print(f"- {int(produced):,} events over {secs} s ({int(produced) / int(secs):,.0f} events/s), "
      f"each instance SIGTERM'd and restarted in turn under that load")
print("- per instance (exit 0 after / group settled again after): "
      + ", ".join(r.replace(":", " ", 1).replace(":", " / ") for r in restarts.split()))
print(f"- {check}; dead-letter topic empty")
print(f"- commits refused at rebalances (ILLEGAL_GENERATION; aborted, then rewound): {refused}; "
      f"partitions rewound: {rewound}; events re-run by restores (verdicts dropped): {replayed}")
print(f"- load average: {l0} at the start, {la} after the restarts, {l1} at the end")
if rows:
    events = int(events)
    print(f"\n## Drain of {events:,} preloaded events, {threads} stream threads per instance\n")
    print("| instances | events/s (from the first commit) | events/s (from the start) "
          "| guard CPU us/event (kernel) | broker CPU us/event | transactions | markers | load (1 min) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    by = {}
    for r in rows:
        n, rate, wall, guard, sys_, broker, commits, markers, lavg = r.split()
        fig = (int(rate), events / float(wall), int(guard) / events, int(broker) / events)
        by.setdefault(n, []).append(fig)
        print(f"| {n} | {fig[0]:,} | {fig[1]:,.0f} | {fig[2]:.1f} ({int(sys_) / events:.1f}) "
              f"| {fig[3]:.1f} | {int(commits):,} | {int(markers):,} | {lavg} |")
    if len(by) == 2:
        m = {n: [statistics.median(f[k] for f in figs) for k in range(4)] for n, figs in by.items()}
        (r1, w1, g1, b1), (r2, w2, g2, b2) = m["1"], m["2"]
        print(f"\n2 instances / 1 (medians): drain rate {r2 / r1:.2f}x ({w2 / w1:.2f}x from the start), "
              f"guard CPU per event {g2 / g1:.2f}x, broker CPU per event {b2 / b1:.2f}x")
EOF
# The event files are large (~290 bytes an event); the events phase A produced are kept.
rm -f "$work"/chunk.* "$work/fleet.jsonl" "$work/drain.jsonl"
say "logs in $work; load: $(load)"
