#!/usr/bin/env bash
# Exactly-once through broker failures (issue 36), on a three-node KRaft cluster of its own
# (scripts/kafka.sh start-cluster: combined broker+controller nodes, replication 3,
# min.insync.replicas 2, the transaction state and offsets topics too).
#
# Two `loopguard serve` instances of THREADS stream threads, one group, on fresh topics of
# PARTITIONS partitions created with replication 3 and min.insync.replicas 2. A fleet file
# is produced at RATE events/s (`loopguard loadgen preload`, chunks of CHUNK_SECS seconds;
# librdkafka's default producer, acks=all, not idempotent: librdkafka 2.3.0's idempotent
# producer can fail fatally when it retries a batch after a broker failure, "Unable to
# reconstruct MessageSet", fixed in 2.5.0) for as long as the faults take; WARMUP
# seconds of load to warm up and STEADY more as the baseline first, then, one after the
# other:
#   a. leader:      kill -9 the leader of partition 0 of the events topic, DOWN seconds
#                   later start it again on its data;
#   b. coordinator: the same with the transaction coordinator of instance 1's first
#                   transactional id ({prefix}-{instance id});
#   c. rolling:     each node in turn: SIGTERM (controlled shutdown), start again, ISRs
#                   full again;
#   d. controller:  kill -9 the active controller (the metadata quorum's leader), DOWN
#                   seconds, start it again.
# After each: the ISRs are full again (`kafka.sh wait-isr`), leadership goes back to the
# preferred replicas, both guards are alive, ready (/readyz), own every partition between
# them and have caught up with the load (the group's commits past the events topic's end
# as it was when they were ready, markers coming on every partition); SETTLE
# seconds before the next fault (the cluster described meanwhile, to choose the next
# victim and say what it did), TAIL after the last.
# Then the load stops, the guards drain (the group's committed offsets at the end of the
# events topic) and exit 0 on SIGTERM with every stream thread's work committed. Checked
# once, over the whole run (one set of topics, one session: the faults follow one another
# under the same load): every event produced is in the events topic (a retry may have
# written one twice: a repeat the guard skips); the verdicts topic read read_committed
# against `loopguard replay` of the events topic as the guards read it, partition by
# partition (scripts/same_stream.py: none missing, none doubled, per session in replay's
# order); the judged-through markers' guarantee (no verdict after a marker covering its
# event, the last markers cover every event: scripts/fault_stalls.py); the dead-letter
# topic empty.
# Measured per phase: the stall of each event, from its send (its Kafka timestamp) to the
# arrival of the first marker past its offset at a read_committed reader that runs through
# the whole test (Kafka's console consumer, so it meets the faults as a runtime would),
# counted in the phase it ended in (from a fault to the next); the longest per phase and
# partition, as Markdown tables.
#
#   scripts/cluster-fault-test.sh [BIN]
# Env: CLUSTER_BASE (the first of 19800, 19810, ... whose six ports are free; see
#      scripts/kafka.sh), KEEP_CLUSTER (0; 1: leave the cluster running), THREADS (2),
#      PARTITIONS (6), RATE (250: what three brokers, two guards and the load keep up
#      with on 2 cores, answers within a second; at 500 the three brokers alone take
#      ~1.2 cores here and the answers fall seconds behind before any fault),
#      SESSIONS (2000), CHUNK_SECS (10), WARMUP (15 s: load before anything is measured;
#      the brokers and the guards warm up), STEADY (10 s: the baseline, load and no fault),
#      DOWN (10 s: how long a killed node stays down, more than the broker session
#      timeout, so its partitions move), SETTLE (3 s), TAIL (5 s), MAX_EVENTS (200000:
#      the most the load may produce), ADMIN_PORT (CLUSTER_BASE + 6: instance i listens on
#      ADMIN_PORT + i), SETTLE_TIMEOUT (120 s: for the guards after each fault),
#      ISR_TIMEOUT (120 s), KAFKA_JVM_OPTS (the brokers' extra JVM flags:
#      "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"; set it empty for the JVM's defaults).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-target/debug/loopguard}
INSTANCES=2 THREADS=${THREADS:-2} PARTITIONS=${PARTITIONS:-6} RATE=${RATE:-250}
SESSIONS=${SESSIONS:-2000} CHUNK_SECS=${CHUNK_SECS:-10} WARMUP=${WARMUP:-15} STEADY=${STEADY:-10} DOWN=${DOWN:-10}
SETTLE=${SETTLE:-3} TAIL=${TAIL:-5} MAX_EVENTS=${MAX_EVENTS:-200000}
SETTLE_TIMEOUT=${SETTLE_TIMEOUT:-120} ISR_TIMEOUT=${ISR_TIMEOUT:-120} KEEP_CLUSTER=${KEEP_CLUSTER:-0}
CP="build/kafka/${KAFKA_VERSION:-4.1.2}/lib/*"
# The brokers' JVMs: C1 only and the serial collector spend a third less CPU than the
# defaults (no C2 compiles for minutes after each start), on a machine the brokers, the
# guards and the load share. KAFKA_JVM_OPTS= (empty) for the JVM's defaults.
export KAFKA_JVM_OPTS=${KAFKA_JVM_OPTS--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}
run=faults-$(date +%s)-$$
work=build/bench/$run
mkdir -p "$work"
say() { echo "cluster-fault-test: $(date +%T) $*" >&2; }
die() { say "FAILED: $*"; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
now_ms() { date +%s%3N; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
[ -x "$BIN" ] || die "no executable $BIN"

if [ -z "${CLUSTER_BASE:-}" ]; then
  CLUSTER_BASE=19800
  while :; do
    busy=0
    for ((p = CLUSTER_BASE; p < CLUSTER_BASE + 9; p++)); do ! port_open "$p" || busy=1; done
    ((busy)) || break
    CLUSTER_BASE=$((CLUSTER_BASE + 10))
    ((CLUSTER_BASE < 19900)) || die "no nine free ports from one of 19800, 19810, ... 19890"
  done
fi
ADMIN_PORT=${ADMIN_PORT:-$((CLUSTER_BASE + 6))}
kafka() { scripts/kafka.sh "$1" "$CLUSTER_BASE" "${@:2}"; }

pids=() loader= watcher= cluster_up=0
cleanup() {
  local rc=$?
  set +e   # all of it, whatever fails
  touch "$work/stop-load"
  if [ -n "$loader" ] && [ -f "$work/loadgen.pids" ]; then
    for p in $(cat "$work/loadgen.pids"); do kill -TERM "$p" 2>/dev/null || true; done
  fi
  local p left i
  for p in "${pids[@]}" $loader $watcher; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
  for ((i = 0; i < 60; i++)); do   # 30 s for the guards' clean exit, then SIGKILL
    left=0
    for p in "${pids[@]}" $loader $watcher; do [ -n "$p" ] && kill -0 "$p" 2>/dev/null && left=1; done
    ((left)) || break
    sleep 0.5
  done
  for p in "${pids[@]}" $loader $watcher; do [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if ((cluster_up)); then
    # The brokers' logs go with the run dir: kept with the run's.
    for d in build/kafka/run-cluster-"$CLUSTER_BASE"/node-*; do
      [ -d "$d" ] && mkdir -p "$work/brokers/${d##*/}" && cp "$d"/server.log* "$work/brokers/${d##*/}/" 2>/dev/null
    done
    ((KEEP_CLUSTER)) || scripts/kafka.sh stop-cluster "$CLUSTER_BASE" >/dev/null 2>&1 || true
  fi
  ((rc == 0)) || say "logs in $work (brokers: $work/brokers)"
}
trap cleanup EXIT

t_start=$SECONDS
load_start=$(load)
say "run $run: 3-node cluster at $CLUSTER_BASE, $INSTANCES guards x $THREADS threads, $PARTITIONS partitions, $RATE events/s; load: $load_start"
cluster_up=1
cluster_env=$(kafka start-cluster) || die "the cluster did not start"
eval "$cluster_env"
export KAFKA_BOOTSTRAP_SERVERS
say "cluster up after $((SECONDS - t_start))s: $KAFKA_BOOTSTRAP_SERVERS"

# Fresh topics, group and transactional ids, named after the run.
tag=$run
export LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP_SERVERS
export LOOPGUARD__KAFKA__EVENTS_TOPIC=$tag-events LOOPGUARD__KAFKA__VERDICTS_TOPIC=$tag-verdicts
export LOOPGUARD__KAFKA__DLQ_TOPIC=$tag-dlq LOOPGUARD__KAFKA__STATE_TOPIC=$tag-state
export LOOPGUARD__KAFKA__POLICY_TOPIC=$tag-policy
export LOOPGUARD__KAFKA__GROUP_ID=$tag LOOPGUARD__KAFKA__TRANSACTIONAL_ID_PREFIX=$tag
"$BIN" topics create --partitions "$PARTITIONS" --replication-factor 3 --min-insync-replicas 2 >&2
# Every topic of the run with replication 3 (the describe's topic lines name it).
kafka describe >"$work/topics.txt" || die "describing the topics failed"
rf3=$(grep -c "^Topic: $tag-[a-z]*"$'\t.*\tReplicationFactor: 3\t' "$work/topics.txt" || true)
[ "$rf3" = 5 ] || die "$rf3 of the 5 topics with replication 3: $work/topics.txt"
lg() { "$BIN" loadgen --events-topic "$tag-events" --verdicts-topic "$tag-verdicts" "$@"; }

# Guard instance I: its own admin port, an instance id stable across its restarts.
starts=()
start_instance() {
  local i=$1
  starts[i]=$((${starts[i]:-0} + 1))
  LOOPGUARD_INSTANCE_ID=$tag-g$i LOOPGUARD__KAFKA__THREADS=$THREADS \
    LOOPGUARD__ADMIN__LISTEN=127.0.0.1:$((ADMIN_PORT + i)) RUST_LOG=${RUST_LOG:-info,rdkafka=warn} \
    "$BIN" serve >"$work/g$i.${starts[i]}.log" 2>&1 &
  pids[i]=$!
}
admin() { curl -fs --max-time 2 "http://127.0.0.1:$((ADMIN_PORT + $1))/$2" 2>/dev/null; }
assigned() { admin "$1" metrics | awk '$1 == "loopguard_assigned_partitions" { print $2 }'; }

# Both instances alive, ready, owning every partition between them, each at least one.
settle() {
  local t0=$SECONDS i n sum ok
  while ((SECONDS - t0 < SETTLE_TIMEOUT)); do
    ok=1 sum=0
    for i in $(seq "$INSTANCES"); do
      kill -0 "${pids[i]}" 2>/dev/null || die "instance $i exited: $work/g$i.${starts[i]}.log"
      admin "$i" readyz >/dev/null || { ok=0; break; }
      n=$(assigned "$i")
      [ -n "$n" ] || { ok=0; break; }
      sum=$((sum + n))
      ((n > 0)) || ok=0
    done
    ((ok && sum == PARTITIONS)) && return 0
    sleep 0.2
  done
  die "guards not ready with every partition owned ${SETTLE_TIMEOUT}s after the fault (logs: $work/g*.log)"
}

stop_instance() {
  local i=$1 rc=0 log=$work/g$i.${starts[i]}.log clean t0=$SECONDS
  kill -TERM "${pids[i]}"
  while kill -0 "${pids[i]}" 2>/dev/null && ((SECONDS - t0 < 90)); do sleep 0.2; done
  kill -0 "${pids[i]}" 2>/dev/null && die "instance $i still running 90 s after SIGTERM: $log"
  wait "${pids[i]}" || rc=$?
  pids[i]=
  ((rc == 0)) || die "instance $i exited $rc after SIGTERM: $log"
  clean=$(grep -c 'stop requested: in-flight work committed' "$log" || true)
  ((clean == THREADS)) || die "instance $i: $clean of $THREADS stream threads committed their work on SIGTERM: $log"
}

# Kafka's console consumer, read_committed, quiet (its log to stderr); its own ARGS follow.
console=(java -Xmx256m "-Dlog4j2.configurationFile=build/kafka/${KAFKA_VERSION:-4.1.2}/tools-log4j2.properties"
  -cp "$CP" org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS"
  --isolation-level read_committed)
# TOPIC FILE PROPS...: the whole topic (ends after 10 s without a record) to FILE; prints
# how many records.
read_topic() {
  local topic=$1 out=$2 prop args=()
  shift 2
  for prop in "$@"; do args+=(--property "$prop"); done
  "${console[@]}" --topic "$topic" --from-beginning --timeout-ms 10000 "${args[@]}" >"$out" 2>"$out.log" || true
  sed -n 's/^Processed a total of \([0-9]*\) messages.*/\1/p' "$out.log" | grep . || die "reading $topic failed: $out.log"
}

# The live reader of the verdicts topic: each record stamped with its arrival ($! is the
# JVM's pid: a plain command in the background, its output through the stamper). It logs
# its partitions' first positions, so the load waits until it reads them all.
printf '%s\n' appender.e.type=Console appender.e.name=E appender.e.target=SYSTEM_ERR \
  appender.e.layout.type=PatternLayout rootLogger.level=WARN rootLogger.appenderRef.e.ref=E \
  logger.s.name=org.apache.kafka.clients.consumer.internals.SubscriptionState logger.s.level=INFO \
  >"$work/live-log4j2.properties"
java -Xmx256m "-Dlog4j2.configurationFile=$work/live-log4j2.properties" -cp "$CP" \
  org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" \
  --isolation-level read_committed --topic "$tag-verdicts" --from-beginning \
  --consumer-property fetch.max.wait.ms=100 --property print.timestamp=true \
  --property print.partition=true --property print.offset=true --property print.headers=true \
  --property print.key=true 2>"$work/live.log" > >(python3 scripts/fault_stalls.py stamp >"$work/live.txt") &
watcher=$!

"$BIN" loadgen dump --events "$MAX_EVENTS" --sessions "$SESSIONS" >"$work/fleet.jsonl"
t0=$SECONDS
until (($(grep -o "Resetting offset for partition $tag-verdicts-[0-9]*" "$work/live.log" | sort -u | wc -l) == PARTITIONS)); do
  kill -0 "$watcher" 2>/dev/null || die "the live reader of the verdicts topic exited: $work/live.log"
  ((SECONDS - t0 < SETTLE_TIMEOUT)) || die "the live reader has not read every partition after ${SETTLE_TIMEOUT}s: $work/live.log"
  sleep 0.5
done
say "the live reader reads every partition of the verdicts topic"
# Only now the guards: the reader's group made the cluster create __consumer_offsets. A
# guard started while its group's coordinator is not there yet (NOT_COORDINATOR) exits
# at its ACL check instead of waiting (seen on a fresh cluster: docs/benchmarks.md).
for i in $(seq "$INSTANCES"); do start_instance "$i"; done
settle
say "guards ready after $((SECONDS - t_start))s"

split -l $((RATE * CHUNK_SECS)) -d -a 4 "$work/fleet.jsonl" "$work/chunk."
: >"$work/produced"
# The loader: a chunk every CHUNK_SECS, each by a process of its own (its pid in
# loadgen.pids, for the cleanup) that sends it at RATE, then waits for its acks while the
# next one sends: a steady load, with no gap for the acks (seconds on a busy machine).
# A chunk whose process exits 0 was all acknowledged.
(
  for c in "$work"/chunk.*; do
    [ -e "$work/stop-load" ] && break
    (
      lg preload --file "$c" --rate "$RATE" >>"$work/load.log" 2>&1 &
      echo $! >>"$work/loadgen.pids"
      if wait $!; then echo "$c" >>"$work/produced"; else touch "$work/load-failed"; fi
    ) &
    sleep "$CHUNK_SECS"
  done
  wait
  touch "$work/load-ended"
) &
loader=$!
load_t0=$SECONDS
: >"$work/phases.tsv"
printf 'warm-up (the first %s s of load)\t%s\t-\t-\t-\t-\n' "$WARMUP" "$(now_ms)" >>"$work/phases.tsv"
calm_at=$SECONDS   # since when the load has run without a fault

load_ok() {
  [ ! -e "$work/load-failed" ] || die "the load generator failed (a chunk not delivered): $work/load.log"
  [ ! -e "$work/load-ended" ] || die "the load ended before the faults did: raise MAX_EVENTS"
}
# flowing: every partition's last marker reached the live reader within the last 2 s (a
# partition whose commit is stuck gets none).
flowing() {
  tail -n 5000 "$work/live.txt" | awk -F'\t' -v now="$(now_ms)" -v n="$PARTITIONS" '
    $5 ~ /loopguard-kind:judged/ { split($3, a, ":"); last[a[2]] = $1 }
    END { c = 0; for (p in last) if (now - last[p] <= 2000) c++; exit !(c == n) }'
}
# caught_up: until the group has committed through the events topic's end as it was at
# the call (`loadgen drain`: the offsets the guards commit in their transactions), then
# markers come on every partition; at most SETTLE_TIMEOUT for each. Each fault meets
# guards that caught up with the last one. (Not loopguard_consumer_lag_messages: it stays
# 0 for a group that started without commits and, after a reassignment, counts every
# event since, committed or not: librdkafka's consumer_lag, which the offsets committed
# through the producer never update.)
caught_up() {
  local t0=$SECONDS drained=
  # A drain that fails at once (a broker still settling) is asked again.
  until [[ $drained =~ \;\ ([0-9]+)\ of\ ([0-9]+)\ committed ]] || ((SECONDS - t0 >= SETTLE_TIMEOUT)); do
    drained=$(lg drain --group "$tag" --timeout $((SETTLE_TIMEOUT - (SECONDS - t0))) 2>>"$work/drain.log") || sleep 1
  done
  [[ $drained =~ \;\ ([0-9]+)\ of\ ([0-9]+)\ committed && ${BASH_REMATCH[1]} -ge ${BASH_REMATCH[2]} ]] ||
    say "warning: the guards not caught up ${SETTLE_TIMEOUT}s after recovering (${drained:-see $work/drain.log}); going on"
  until flowing; do
    if ((SECONDS - t0 >= 2 * SETTLE_TIMEOUT)); then
      say "warning: markers not coming on every partition after recovering; going on"
      return 0
    fi
    sleep 0.5
  done
}
# After a fault: ISRs full, preferred leaders back, the guards settled and caught up.
recover() {
  kafka wait-isr "$ISR_TIMEOUT"
  kafka elect-preferred
  settle
  recovered=$SECONDS
  caught_up
}
# The transactional ids of the guards' producers: per stream thread t of instance i,
# {prefix}-{instance id}[-t] and its alternate, -alt (src/service/txn).
txn_ids=()
for i in $(seq "$INSTANCES"); do
  for ((t = 0; t < THREADS; t++)); do
    id=$tag-$tag-g$i
    ((t == 0)) || id=$id-$t
    txn_ids+=("$id" "$id-alt")
  done
done
# pause SECS: until SECS after calm_at (the tools' time, taken meanwhile, counts in it).
pause() {
  local left=$((calm_at + $1 - SECONDS))
  ((left <= 0)) || sleep "$left"
}
# snapshot: the cluster now, for choosing a victim and saying what it did: every topic's
# partitions (leader, ISR) in describe.txt, the active controller's id in $controller.
snapshot() {
  kafka describe >"$work/describe.txt"
  controller=$(kafka controller)
}
# leader_of TOPIC PARTITION, from the snapshot.
leader_of() {
  awk -F'\t' -v t="Topic: $1" -v p="Partition: $2" '$2 == t && $3 == p { sub(/^Leader: /, "", $4); print $4 }' "$work/describe.txt"
}
# kill9_phase NAME NODE: kill -9 NODE, DOWN s, start it again, recover; the phase's line,
# with NODE's roles at the snapshot (leaderships, coordinators, controller).
kill9_phase() {
  local name=$1 node=$2 t0 f0 down what
  load_ok
  what=$(python3 scripts/fault_stalls.py roles "$work/describe.txt" "$node" "$controller" "$tag-" "$tag" "${txn_ids[@]}")
  t0=$SECONDS f0=$(now_ms)
  say "$name: kill -9 node $what"
  kafka kill9 "$node"
  sleep "$DOWN"
  down=$((SECONDS - t0))
  kafka restart "$node"
  recover
  printf '%s\t%s\t%s\t%ss\t%ss\t%ss\n' "$name" "$f0" "$what" "$down" "$((recovered - t0))" "$((SECONDS - t0))" >>"$work/phases.tsv"
  say "$name: node $node down ${down}s, back with full ISRs and the guards ready after $((recovered - t0))s, caught up after $((SECONDS - t0))s"
  calm_at=$SECONDS
}

snapshot
node=$(leader_of "$tag-events" 0)
[[ $node =~ ^[123]$ ]] || die "no leader of $tag-events partition 0 in $work/describe.txt"
pause "$WARMUP"
# The baseline: STEADY seconds of load with nothing else going on.
printf 'steady load, no fault (%s s)\t%s\t-\t-\t-\t-\n' "$STEADY" "$(now_ms)" >>"$work/phases.tsv"
sleep "$STEADY"
kill9_phase "a. leader of events partition 0 killed" "$node"

snapshot
node=$(kafka coordinator "${txn_ids[0]}")
pause "$SETTLE"
kill9_phase "b. transaction coordinator of instance 1's first transactional id killed" "$node"

pause "$SETTLE"
load_ok
t0=$SECONDS f0=$(now_ms) downs=()
for n in 1 2 3; do
  say "c. rolling restart: SIGTERM node $n"
  t1=$SECONDS
  kafka term "$n"
  kafka restart "$n"
  downs+=("$((SECONDS - t1))s")
  kafka wait-isr "$ISR_TIMEOUT"
  kafka elect-preferred
done
settle
recovered=$SECONDS
caught_up
printf '%s\t%s\t%s\t%s\t%ss\t%ss\n' "c. rolling restart (SIGTERM), each node in turn" "$f0" "1, 2, 3" "${downs[*]}" "$((recovered - t0))" "$((SECONDS - t0))" >>"$work/phases.tsv"
say "c. rolling restart: done after $((recovered - t0))s (down: ${downs[*]}), the guards caught up after $((SECONDS - t0))s"
calm_at=$SECONDS

snapshot
pause "$SETTLE"
kill9_phase "d. active controller killed" "$controller"

pause "$TAIL"
load_ok
touch "$work/stop-load"
# The chunks being sent end within CHUNK_SECS (and their acks, bounded by the load tool).
t0=$SECONDS
until [ -e "$work/load-ended" ]; do
  ((SECONDS - t0 < CHUNK_SECS + 120)) || die "the load generator did not stop: $work/load.log"
  sleep 0.5
done
wait "$loader"
loader=
load_secs=$((SECONDS - load_t0))
[ ! -e "$work/load-failed" ] || die "the load generator failed (a chunk not delivered): $work/load.log"
xargs cat <"$work/produced" >"$work/produced.jsonl"
produced=$(wc -l <"$work/produced.jsonl")
say "$produced events produced over ${load_secs}s; waiting for the drain"
drained=$(lg drain --group "$tag" --timeout 300)
read -r committed in_topic < <(sed -n 's/.*; \([0-9]*\) of \([0-9]*\) committed/\1 \2/p' <<<"$drained")
[ -n "${in_topic:-}" ] && [ "$committed" = "$in_topic" ] ||
  die "the group's committed offsets ($committed) are not at the end of the events topic ($in_topic): $drained"
for i in $(seq "$INSTANCES"); do
  admin "$i" readyz >/dev/null || die "instance $i not ready after the drain: $work/g$i.${starts[i]}.log"
done
# The live reader gets the last markers (they come with the last commits: their
# through_offsets add up to the events topic's end), then stops.
live_covered() {
  awk -F'\t' '$5 ~ /loopguard-kind:judged/ && match($7, /"through_offset":[0-9]+/) {
      split($3, a, ":"); t = substr($7, RSTART + 17, RLENGTH - 17) + 0; if (t > m[a[2]]) m[a[2]] = t }
    END { s = 0; for (p in m) s += m[p]; print s }' "$work/live.txt"
}
t0=$SECONDS
until (($(live_covered) >= in_topic)); do
  if ((SECONDS - t0 >= 60)); then
    say "warning: the live reader's markers cover $(live_covered) of $in_topic events after 60 s"
    break
  fi
  sleep 0.5
done
kill -TERM "$watcher" 2>/dev/null || true
wait "$watcher" 2>/dev/null || true
watcher=
for i in $(seq "$INSTANCES"); do stop_instance "$i"; done
load_end_faults=$(load)

guard_logs=("$work"/g*.log)
grep -h -E '^[^ ]+ +(WARN|ERROR) ' "${guard_logs[@]}" | sed -E 's/^[^ ]+ +//; s/[0-9]+/N/g' | cut -c1-160 |
  sort | uniq -c | sort -rn >"$work/problems.txt" || true
say "warnings and errors of the guards, by kind ($work/problems.txt):"
head -n 12 "$work/problems.txt" >&2

read_topic "$tag-verdicts" "$work/verdicts.txt" print.partition=true print.headers=true print.key=true >/dev/null &
reading_verdicts=$!
read_topic "$tag-events" "$work/events.txt" print.timestamp=true print.partition=true print.offset=true >/dev/null &
reading_events=$!
read_topic "$tag-dlq" "$work/dlq.txt" >"$work/dlq.count" &
reading_dlq=$!
wait "$reading_verdicts" || die "the verdicts topic could not be read"
wait "$reading_events" || die "the events topic could not be read"
wait "$reading_dlq" || die "the dead-letter topic could not be read"
python3 scripts/fault_stalls.py events "$work/events.txt" "$work/produced.jsonl" >"$work/topic.jsonl" 2>"$work/topic.txt" ||
  die "$(cat "$work/topic.txt")"
say "$(cat "$work/topic.txt")"
"$BIN" replay "$work/topic.jsonl" >"$work/replay.jsonl" 2>"$work/replay.log"
dead=$(cat "$work/dlq.count")
check=$(python3 scripts/same_stream.py "$work/verdicts.txt" "$work/replay.jsonl") ||
  die "the verdict stream is not replay's (dump: $work/verdicts.txt, replay: $work/replay.jsonl, guard logs: $work/g*.log)"
[ "$dead" = 0 ] || die "$dead dead letters for valid input: $work/dlq.txt"
python3 scripts/fault_stalls.py check "$work/events.txt" "$work/verdicts.txt" "$work/live.txt" \
  "$work/phases.tsv" >"$work/stalls.md" || die "judged-through markers (live: $work/live.txt)"
say "$check"

cat <<EOF

## Three brokers under faults: $INSTANCES guards x $THREADS threads, $PARTITIONS partitions, $RATE events/s
- $produced events over ${load_secs} s, replication 3, min.insync.replicas 2; $(cat "$work/topic.txt");
  $check; dead-letter topic empty;
  the guards ready after every fault and exit 0 on SIGTERM
- load average: $load_start at the start, $load_end_faults after the faults, $(load) at the end; wall time $((SECONDS - t_start)) s

$(cat "$work/stalls.md")
EOF
rm -f "$work"/chunk.* "$work/fleet.jsonl" "$work/produced.jsonl" "$work/topic.jsonl"
say "logs in $work; wall time $((SECONDS - t_start))s; load: $(load)"
