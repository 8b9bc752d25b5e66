#!/usr/bin/env bash
# Exactly-once through broker failures (issue 36), on a three-node KRaft cluster of its own
# (scripts/kafka.sh start-cluster: combined broker+controller nodes, replication 3,
# min.insync.replicas 2, the transaction state and offsets topics too).
#
# Two `loopguard serve` instances of THREADS stream threads, one group, on fresh topics of
# PARTITIONS partitions created with replication 3 and min.insync.replicas 2. A fleet file
# is produced at RATE events/s (idempotent producer, chunks of CHUNK_SECS seconds) for as
# long as the faults take; WARMUP seconds of steady load first, then, one after the other:
#   a. leader:      kill -9 the leader of partition 0 of the events topic, DOWN seconds
#                   later start it again on its data;
#   b. coordinator: the same with the transaction coordinator of instance 1's first
#                   transactional id ({prefix}-{instance id});
#   c. rolling:     each node in turn: SIGTERM (controlled shutdown), start again, ISRs
#                   full again;
#   d. controller:  kill -9 the active controller (the metadata quorum's leader), DOWN
#                   seconds, start it again.
# After each: the ISRs are full again (`kafka.sh wait-isr`), leadership goes back to the
# preferred replicas, both guards are alive, ready (/readyz) and own every partition
# between them; SETTLE seconds before the next fault, TAIL after the last.
# Then the load stops, the guards drain (the group's committed offsets at the end of the
# events topic, which holds exactly the events produced) and exit 0 on SIGTERM with every
# stream thread's work committed. Checked once, over the whole run (one set of topics,
# one session: the faults follow one another under the same load): the verdicts topic read
# read_committed against `loopguard replay` of the events produced (scripts/same_stream.py:
# none missing, none doubled, per session in replay's order), the judged-through markers'
# guarantee (no verdict after a marker covering its event, the last markers cover every
# event: scripts/fault_stalls.py), the dead-letter topic empty.
# Measured per phase: the stall of each event, from its send (its Kafka timestamp) to the
# arrival of the first marker past its offset at a read_committed reader that runs through
# the whole test (Kafka's console consumer, so it meets the faults as a runtime would);
# the longest per phase and partition, as Markdown tables.
#
#   scripts/cluster-fault-test.sh [BIN]
# Env: CLUSTER_BASE (the first of 19800, 19810, ... whose six ports are free; see
#      scripts/kafka.sh), KEEP_CLUSTER (0; 1: leave the cluster running), THREADS (2),
#      PARTITIONS (6), RATE (500), SESSIONS (2000), CHUNK_SECS (10), WARMUP (10 s),
#      DOWN (10 s: how long a killed node stays down, more than the broker session
#      timeout, so its partitions move), SETTLE (5 s), TAIL (10 s), MAX_EVENTS (200000:
#      the most the load may produce), ADMIN_PORT (CLUSTER_BASE + 6: instance i listens on
#      ADMIN_PORT + i), SETTLE_TIMEOUT (120 s: for the guards after each fault),
#      ISR_TIMEOUT (120 s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-target/debug/loopguard}
INSTANCES=2 THREADS=${THREADS:-2} PARTITIONS=${PARTITIONS:-6} RATE=${RATE:-500}
SESSIONS=${SESSIONS:-2000} CHUNK_SECS=${CHUNK_SECS:-10} WARMUP=${WARMUP:-10} DOWN=${DOWN:-10}
SETTLE=${SETTLE:-5} TAIL=${TAIL:-10} MAX_EVENTS=${MAX_EVENTS:-200000}
SETTLE_TIMEOUT=${SETTLE_TIMEOUT:-120} ISR_TIMEOUT=${ISR_TIMEOUT:-120} KEEP_CLUSTER=${KEEP_CLUSTER:-0}
CP="build/kafka/${KAFKA_VERSION:-4.1.2}/lib/*"
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
  touch "$work/stop-load"
  [ -z "$loader" ] || kill -TERM "$(cat "$work/loadgen.pid" 2>/dev/null)" 2>/dev/null || true
  for p in "${pids[@]}" $loader $watcher; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if ((cluster_up)); then
    # The brokers' logs go with the run dir: keep them when the test failed.
    if ((rc != 0)); then
      for d in build/kafka/run-cluster-"$CLUSTER_BASE"/node-*; do
        [ -d "$d" ] && mkdir -p "$work/brokers/${d##*/}" && cp "$d"/server.log* "$work/brokers/${d##*/}/" 2>/dev/null
      done
      say "broker logs kept in $work/brokers"
    fi
    ((KEEP_CLUSTER)) || scripts/kafka.sh stop-cluster "$CLUSTER_BASE" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

t_start=$SECONDS
load_start=$(load)
say "run $run: 3-node cluster at $CLUSTER_BASE, $INSTANCES guards x $THREADS threads, $PARTITIONS partitions, $RATE events/s; load: $load_start"
cluster_up=1
eval "$(kafka start-cluster)"
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
java -Xmx256m -XX:TieredStopAtLevel=1 "-Dlog4j2.configurationFile=build/kafka/${KAFKA_VERSION:-4.1.2}/tools-log4j2.properties" \
  -cp "$CP" org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --describe \
  --topic "$tag-.*" >"$work/topics.txt" 2>&1 || die "describing the topics failed: $work/topics.txt"
rf3=$(grep -c $'^Topic: .*\tReplicationFactor: 3\t' "$work/topics.txt" || true)
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
  local i=$1 rc=0 log=$work/g$i.${starts[i]}.log clean
  kill -TERM "${pids[i]}"
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

"$BIN" loadgen dump --events "$MAX_EVENTS" --sessions "$SESSIONS" >"$work/fleet.jsonl"
for i in $(seq "$INSTANCES"); do start_instance "$i"; done
settle
say "guards ready after $((SECONDS - t_start))s"

# The live reader of the verdicts topic: each record stamped with its arrival ($! is the
# JVM's pid: a plain command in the background, its output through the stamper).
"${console[@]}" --topic "$tag-verdicts" --from-beginning --consumer-property fetch.max.wait.ms=100 \
  --property print.partition=true --property print.offset=true --property print.headers=true \
  --property print.key=true 2>"$work/live.log" > >(python3 scripts/fault_stalls.py stamp >"$work/live.txt") &
watcher=$!

split -l $((RATE * CHUNK_SECS)) -d -a 4 "$work/fleet.jsonl" "$work/chunk."
: >"$work/produced"
# The loader: a chunk at a time, each process's pid in loadgen.pid (for the cleanup).
(
  for c in "$work"/chunk.*; do
    [ -e "$work/stop-load" ] && break
    lg preload --file "$c" --rate "$RATE" --property enable.idempotence=true >>"$work/load.log" 2>&1 &
    echo $! >"$work/loadgen.pid"
    if ! wait $!; then
      touch "$work/load-failed"
      break
    fi
    echo "$c" >>"$work/produced"
  done
  touch "$work/load-ended"
) &
loader=$!
load_t0=$SECONDS
: >"$work/phases.tsv"
printf 'steady load, no fault\t%s\t-\t-\t-\n' "$(now_ms)" >>"$work/phases.tsv"
sleep "$WARMUP"

load_ok() {
  [ ! -e "$work/load-failed" ] || die "the load generator failed (a chunk not delivered): $work/load.log"
  [ ! -e "$work/load-ended" ] || die "the load ended before the faults did: raise MAX_EVENTS"
}
# After a fault: ISRs full, preferred leaders back, the guards settled.
recover() {
  kafka wait-isr "$ISR_TIMEOUT"
  kafka elect-preferred
  settle
}
# kill9_phase NAME NODE: kill -9 NODE, DOWN s, start it again, recover; the phase's line.
kill9_phase() {
  local name=$1 node=$2 t0 f0 down
  load_ok
  t0=$SECONDS f0=$(now_ms)
  say "$name: kill -9 node $node"
  kafka kill9 "$node"
  sleep "$DOWN"
  down=$((SECONDS - t0))
  kafka restart "$node"
  recover
  printf '%s\t%s\t%s\t%ss\t%ss\n' "$name" "$f0" "$node" "$down" "$((SECONDS - t0))" >>"$work/phases.tsv"
  say "$name: node $node down ${down}s, back with full ISRs and the guards ready after $((SECONDS - t0))s"
  sleep "$SETTLE"
}

node=$(kafka leader "$tag-events" 0)
kill9_phase "a. leader of events partition 0 killed" "$node"

txn_id=$tag-$tag-g1
node=$(kafka coordinator "$txn_id")
kill9_phase "b. transaction coordinator of $txn_id killed" "$node"

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
printf '%s\t%s\t%s\t%s\t%ss\n' "c. rolling restart (SIGTERM)" "$f0" "1, 2, 3" "${downs[*]}" "$((SECONDS - t0))" >>"$work/phases.tsv"
say "c. rolling restart: done after $((SECONDS - t0))s (down: ${downs[*]})"
sleep "$SETTLE"

node=$(kafka controller)
kill9_phase "d. active controller killed" "$node"

sleep "$TAIL"
load_ok
touch "$work/stop-load"
wait "$loader"
loader=
load_secs=$((SECONDS - load_t0))
[ ! -e "$work/load-failed" ] || die "the load generator failed (a chunk not delivered): $work/load.log"
xargs cat <"$work/produced" >"$work/produced.jsonl"
produced=$(wc -l <"$work/produced.jsonl")
say "$produced events produced over ${load_secs}s; waiting for the drain"
drained=$(lg drain --group "$tag" --timeout 300)
committed=$(sed -n 's/.*; \([0-9]*\) of \([0-9]*\) committed/\1 \2/p' <<<"$drained")
[ "$committed" = "$produced $produced" ] ||
  die "events topic / committed offsets ($committed) do not match the $produced events produced"
for i in $(seq "$INSTANCES"); do
  admin "$i" readyz >/dev/null || die "instance $i not ready after the drain: $work/g$i.${starts[i]}.log"
done
# The live reader gets the last markers (they come with the last commits), then stops.
sleep 3
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
"$BIN" replay "$work/produced.jsonl" >"$work/replay.jsonl" 2>"$work/replay.log"
wait "$reading_verdicts" || die "the verdicts topic could not be read"
wait "$reading_events" || die "the events topic could not be read"
wait "$reading_dlq" || die "the dead-letter topic could not be read"
dead=$(cat "$work/dlq.count")
check=$(python3 scripts/same_stream.py "$work/verdicts.txt" "$work/replay.jsonl") ||
  die "the verdict stream is not replay's (dump: $work/verdicts.txt, replay: $work/replay.jsonl, guard logs: $work/g*.log)"
[ "$dead" = 0 ] || die "$dead dead letters for valid input: $work/dlq.txt"
python3 scripts/fault_stalls.py check "$work/events.txt" "$work/verdicts.txt" "$work/live.txt" \
  "$work/phases.tsv" >"$work/stalls.md" || die "judged-through markers (live: $work/live.txt)"
say "$check"

cat <<EOF

## Three brokers under faults: $INSTANCES guards x $THREADS threads, $PARTITIONS partitions, $RATE events/s
- $produced events over ${load_secs} s, replication 3, min.insync.replicas 2; $check; dead-letter topic empty;
  the guards ready after every fault and exit 0 on SIGTERM
- load average: $load_start at the start, $load_end_faults after the faults, $(load) at the end; wall time $((SECONDS - t_start)) s

$(cat "$work/stalls.md")
EOF
rm -f "$work"/chunk.* "$work/fleet.jsonl"
say "logs in $work; wall time $((SECONDS - t_start))s; load: $(load)"
