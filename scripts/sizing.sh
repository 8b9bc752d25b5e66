#!/usr/bin/env bash
# Sizing figures of the guard, measured from outside on a broker started here
# (scripts/kafka.sh start PORT; stopped at the end) with one events partition:
#   - memory per session, active and idle: the guard's peak RSS (VmHWM) and VmRSS from
#     /proc after draining SESSIONS sessions and after SMALL_SESSIONS sessions (fresh
#     topics each, EVENTS_PER_SESSION events per session), the difference divided by the
#     difference of the sessions held (loopguard_active_sessions); "idle": VmRSS after one
#     event stamped 120 s later (event time) has frozen every session
#     (engine.freeze_idle_secs = 60);
#   - CPU per event: the guard's utime + stime (/proc/PID/stat) from its start to the end
#     of its drain of the preloaded backlog, over the events;
#   - state-topic bytes per session: the .log files of the state topic's partition in the
#     broker's log dir (before compaction: the topic's min.compaction.lag.ms is 60 s and
#     segments roll at 64 MB), and the checkpoint bytes the guard reports (its debug
#     `batch committed` lines: states, state_bytes);
#   - the restore of the partition: (a) graceful: guard A SIGTERMed, guard B started:
#     B's start to its `partition restored` line and to /readyz 200; (b) crash: guard C
#     started beside B (owning nothing), B killed -9: the kill to C's `partition restored`
#     and C's /readyz 200 (this includes the group noticing B is gone: session.timeout.ms
#     6000 here). The peak RSS of the restoring guards too.
# Every figure is recorded with the load average of its moment (the machine is shared).
# Prints a Markdown table (also in build/bench/sizing-<timestamp>/sizing.md).
#
#   scripts/sizing.sh BIN
# Env: SESSIONS (250000), SMALL_SESSIONS (10000), EVENTS_PER_SESSION (4; at most 7: the
#      shortest fleet scenario), PORT (first free pair from 19500), ADMIN_PORT (first free
#      pair from 19564: guards A/B, then C), THREADS (1: kafka.threads of each guard),
#      SETTLE (10 s after the drain: a checkpoint due, kafka.checkpoint_max_ms 5 s),
#      SPREAD_MS (0: every session's events within 40 ms of event time, all sessions live
#      until the tick; N: session i starts at i*N ms of event time, its events in a row,
#      so the sweeps freeze the sessions behind the last ~60-120 s as the drain goes:
#      mostly idle sessions; then take SMALL_SESSIONS well above 120000/N so both runs
#      hold about as many live ones),
#      MAX_RSS_MB (12000: a guard above it is killed and the run stops), DRAIN_TIMEOUT
#      (1800 s), RESTORE_TIMEOUT (600 s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=$(realpath "${1:?usage: scripts/sizing.sh BIN}")
SESSIONS=${SESSIONS:-250000} SMALL_SESSIONS=${SMALL_SESSIONS:-10000}
EVENTS_PER_SESSION=${EVENTS_PER_SESSION:-4} THREADS=${THREADS:-1} SETTLE=${SETTLE:-10}
SPREAD_MS=${SPREAD_MS:-0} MAX_RSS_MB=${MAX_RSS_MB:-12000} DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-1800} RESTORE_TIMEOUT=${RESTORE_TIMEOUT:-600}
run=sizing-$(date +%Y%m%d-%H%M%S)
work=build/bench/$run
mkdir -p "$work"
say() { echo "sizing: $(date +%T) $*" >&2; }
die() { say "FAILED: $*"; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
. scripts/lib/ports.sh # port_open, free_port
PORT=${PORT:-$(free_port 19500 2)}
ADMIN_PORT=${ADMIN_PORT:-$(free_port 19564 2)}
ADMIN_AB=$ADMIN_PORT ADMIN_C=$((ADMIN_PORT + 1))

# fig KEY VALUE: one figure, with the load average now. cmd KEY TEXT: how it was measured.
fig() { printf '%s\t%s\t%s\n' "$1" "$2" "$(load)" >>"$work/figures"; say "$1 = $2 (load $(load))"; }
cmd() { printf '%s\t%s\n' "$1" "$2" >>"$work/commands"; }
: >"$work/figures"
: >"$work/commands"

# ---- Everything started here is stopped on exit, by pid: guards, samplers, the broker.
pids=()
cleanup() {
  local p
  for p in ${pids[@]+"${pids[@]}"}; do kill -KILL "$p" 2>/dev/null || true; done
  scripts/kafka.sh stop "$PORT" >/dev/null 2>&1 || true
  rm -f "$work"/*.jsonl
}
trap cleanup EXIT
eval "$(scripts/kafka.sh start "$PORT")"
export KAFKA_BOOTSTRAP_SERVERS
datadir=build/kafka/run-$PORT/data
. scripts/lib/proc_cpu.sh # cpu_us PID

. scripts/lib/guard_conf.sh # guard_conf FILE TAG THREADS ENGINE_TOML
. scripts/lib/proc_mem.sh # kb PID VmHWM|VmRSS, sample PID FILE (kills above MAX_RSS_MB)
# Guard processes: start_guard NAME ADMIN_PORT (pid in $gpid, log $work/$tag.NAME.log).
start_guard() {
  local name=$1 admin=$2
  LOOPGUARD_INSTANCE_ID=$tag-$name LOOPGUARD__ADMIN__LISTEN=127.0.0.1:$admin \
    RUST_LOG=${RUST_LOG:-info,rdkafka=warn,loopguard::service::stream::worker::commit=debug} \
    "$BIN" serve --config "$conf" >"$work/$tag.$name.log" 2>&1 &
  gpid=$!
  pids+=("$gpid")
  # Not a job of this shell (no "Killed" notice at the end): it stops with its guard.
  (sample "$gpid" "$work/$tag.$name.rss" &)
  cmd "$size.$name.cmd" "LOOPGUARD_INSTANCE_ID=$tag-$name $BIN serve --config $conf"
}
alive() { [ -r "/proc/$1/status" ] && ! grep -q '^State:.*Z' "/proc/$1/status"; }
readyz() { [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz" 2>/dev/null)" = 200 ]; }
metrics() { curl -fs "http://127.0.0.1:$1/metrics"; }
metric() { awk -v m="$2" '$1 == m { printf "%d\n", $2 }' "$1"; } # metric FILE NAME
# State bytes: the .log segments of the state topic's partition 0 on the broker.
state_log_bytes() { find "$datadir/$tag-state-0" -name '*.log' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }
# wait_restored NAME PID ADMIN T0 KEY: until the guard's log says `partition restored`
# and its /readyz answers 200; records the seconds since T0 of both and the line's fields.
wait_restored() {
  local name=$1 pid=$2 admin=$3 t0=$4 key=$5 log=$work/$tag.$1.log restored= deadline line
  deadline=$(($(date +%s) + RESTORE_TIMEOUT))
  while :; do
    if [ -z "$restored" ] && grep -q 'partition restored' "$log"; then restored=$(since "$t0"); fi
    if [ -n "$restored" ] && readyz "$admin"; then break; fi
    alive "$pid" || { tail -n 30 "$log" >&2; die "guard $name exited: $log"; }
    [ "$(date +%s)" -lt "$deadline" ] || { tail -n 30 "$log" >&2; die "guard $name not restored after $RESTORE_TIMEOUT s: $log"; }
    sleep 0.05
  done
  local ready cpu
  ready=$(since "$t0") cpu=$(cpu_us "$pid")
  line=$(grep 'partition restored' "$log" | tail -n 1)
  say "$name: $(sed 's/\x1b\[[0-9;]*m//g' <<<"$line")"
  fig "$key.restored_s" "$restored"
  fig "$key.ready_s" "$ready"
  for f in sessions replayed ms; do
    fig "$key.$f" "$(sed 's/\x1b\[[0-9;]*m//g' <<<"$line" | sed -n "s/.* $f=\([0-9]*\).*/\1/p")"
  done
  fig "$key.cpu_us" "$cpu"
  fig "$key.hwm_kb" "$(kb "$pid" VmHWM)"
  fig "$key.rss_kb" "$(kb "$pid" VmRSS)"
}
# checkpoints KEY_STATES KEY_BYTES: the state records and bytes guard A's log reports so far
# (its debug `batch committed` lines: states, state_bytes).
checkpoints() {
  local states bytes
  read -r states bytes < <(sed 's/\x1b\[[0-9;]*m//g' "$work/$tag.a.log" |
    sed -n 's/.*states=\([0-9]*\) state_bytes=\([0-9]*\).*/\1 \2/p' | awk '{ n += $1; b += $2 } END { printf "%d %d\n", n, b }')
  fig "$1" "$states"
  fig "$2" "$bytes"
}
lg() { "$BIN" loadgen --events-topic "$tag-events" --verdicts-topic "$tag-verdicts" "$@"; }

say "run $run: broker 127.0.0.1:$PORT, admin $ADMIN_AB/$ADMIN_C, $SESSIONS and $SMALL_SESSIONS sessions x $EVENTS_PER_SESSION events; load $(load)"

# ---- One size: SIZE (small|big) with N sessions, on fresh topics named after it.
measure() {
  local size=$1 n=$2 t0 out gA gB gC tk
  tag=$run-$size conf=$work/$size.toml
  guard_conf "$conf" "$tag" "$THREADS" "max_sessions_per_partition = 400000"
  "$BIN" topics create --config "$conf" --partitions 1 >"$work/$size.topics.log" 2>&1 ||
    { cat "$work/$size.topics.log" >&2; die "topics create"; }
  python3 scripts/sizing_report.py gen "$BIN" "$n" "$EVENTS_PER_SESSION" "$work/$size.jsonl" "$work/$size.tick.jsonl" "$SPREAD_MS"
  fig "$size.spread_ms" "$SPREAD_MS"
  fig "$size.sessions" "$n"
  fig "$size.events" "$(wc -l <"$work/$size.jsonl")"
  cmd "$size.preload" "loadgen preload --file $size.jsonl ($n sessions x $EVENTS_PER_SESSION events, scripts/sizing_report.py gen)"
  lg preload --file "$work/$size.jsonl" >&2

  # Guard A drains the backlog.
  t0=$(now)
  start_guard a "$ADMIN_AB"
  gA=$gpid
  out=$(lg drain --group "$tag" --timeout "$DRAIN_TIMEOUT")
  echo "$out" >&2
  fig "$size.drain_s" "$(since "$t0")"
  fig "$size.cpu_us" "$(cpu_us "$gA")"
  fig "$size.hwm_kb" "$(kb "$gA" VmHWM)"
  fig "$size.rss_kb" "$(kb "$gA" VmRSS)"
  cmd "$size.drain" "loadgen drain --group $tag (timed from guard A's start)"
  grep -q "; \([0-9]*\) of \1 committed" <<<"$out" || die "drain incomplete: $out"
  fig "$size.drain_rate" "$(sed -n 's/.*(\([0-9]*\) events\/s).*/\1/p' <<<"$out")"
  metrics "$ADMIN_AB" >"$work/$size.a.metrics" || die "no metrics from guard A"
  fig "$size.active_sessions" "$(metric "$work/$size.a.metrics" loopguard_active_sessions)"
  cmd "$size.metrics" "curl 127.0.0.1:ADMIN/metrics | grep loopguard_active_sessions"
  # A checkpoint is only written with a batch: after SETTLE s (more than
  # kafka.checkpoint_max_ms) one more event, stamped 120 s after the others (event time):
  # its batch carries the checkpoint of every session changed since the last one, and it
  # moves the partition's clock so that the next sweep freezes every other session (idle).
  sleep "$SETTLE"
  fig "$size.state_log_bytes.drained" "$(state_log_bytes)"
  lg preload --file "$work/$size.tick.jsonl" >&2
  lg drain --group "$tag" --timeout 120 >&2
  sleep 5
  cmd "$size.state_du" "sum of *.log sizes in $datadir/$tag-state-0"
  fig "$size.state_log_bytes.settled" "$(state_log_bytes)"
  metrics "$ADMIN_AB" >"$work/$size.a-idle.metrics"
  fig "$size.idle_sessions" "$(metric "$work/$size.a-idle.metrics" loopguard_active_sessions)"
  fig "$size.idle_rss_kb" "$(kb "$gA" VmRSS)"
  cmd "$size.tick" "VmRSS 5 s after one event stamped +120 s (event time) was judged"

  # Checkpoint records the guard reported (debug lines of its commits).
  checkpoints "$size.ckpt_states_settled" "$size.ckpt_bytes_settled"

  # (a) Graceful hand-over: A stops (its shutdown checkpoint), B starts and restores.
  tk=$(now)
  kill -TERM "$gA"
  wait "$gA" || true
  fig "$size.stop_s" "$(since "$tk")"
  fig "$size.state_log_bytes.after_stop" "$(state_log_bytes)"
  # The checkpoint records guard A wrote, its shutdown included.
  checkpoints "$size.ckpt_states" "$size.ckpt_bytes"
  t0=$(now)
  start_guard b "$ADMIN_AB"
  gB=$gpid
  wait_restored b "$gB" "$ADMIN_AB" "$t0" "$size.b"
  metrics "$ADMIN_AB" >"$work/$size.b.metrics"

  # (b) Crash: C joins (owns nothing), B is killed -9, C takes the partition over.
  start_guard c "$ADMIN_C"
  gC=$gpid
  for _ in $(seq 600); do readyz "$ADMIN_C" && break; alive "$gC" || die "guard C exited"; sleep 0.1; done
  readyz "$ADMIN_C" || die "guard C not ready (joined) after 60 s"
  sleep 5 # the rebalance of C's join settled; B keeps the partition (cooperative-sticky)
  ! grep -q 'partition restored' "$work/$tag.c.log" || die "guard C took the partition before the kill"
  readyz "$ADMIN_AB" || die "guard B not ready after C joined"
  tk=$(now)
  kill -KILL "$gB"
  wait "$gB" 2>/dev/null || true
  wait_restored c "$gC" "$ADMIN_C" "$tk" "$size.c"
  metrics "$ADMIN_C" >"$work/$size.c.metrics"
  kill -TERM "$gC"
  wait "$gC" || true
  rm -f "$work/$size.jsonl"
}

measure small "$SMALL_SESSIONS"
measure big "$SESSIONS"
cp "$datadir/../server.log" "$work/broker.server.log" 2>/dev/null || true
python3 scripts/sizing_report.py report "$work" | tee "$work/sizing.md"
say "figures and logs in $work; load $(load)"
