#!/usr/bin/env bash
# Checks the sizing formula of docs/operations.md ("Sizing for N sessions and E events/s")
# on a fleet of SESSIONS concurrent sessions spread over PARTITIONS partitions and two
# guard instances, measured from outside on a broker started here (scripts/kafka.sh start
# PORT; stopped at the end):
#   - the preload of SESSIONS x EVENTS_PER_SESSION events (scripts/sizing_report.py gen:
#     the first events of 10,000 fleet sessions copied under new ids, session g's events at
#     g * SPREAD_MS ms of event time, so the sweeps freeze the sessions behind the last
#     ~60-120 s as the drain goes), keyed by session with Java's partitioner (murmur2, as
#     the runtimes' clients); the file is deleted once loaded;
#   - the drain by guards A and B (distinct LOOPGUARD_INSTANCE_ID and admin ports, both
#     ready and holding all partitions between them first): wall time from their start,
#     `loadgen drain`'s rate, each guard's CPU per event (utime + stime over the events it
#     consumed, loopguard_events_consumed_total), peak RSS (VmHWM) and VmRSS from /proc,
#     loopguard_active_sessions (sessions per instance); sessions per partition: no metric
#     gives them, so they are computed from the keys (murmur2, checked against Kafka's
#     test vectors) and checked against B's `partition restored` lines after the crash;
#   - settled: one "tick" event 120 s later in event time on every partition (TICKS tick
#     sessions, keys spread by murmur2 so each partition gets some): each partition
#     checkpoints and freezes its sessions; each guard's VmRSS after, and the state topic's
#     .log bytes on the broker's disk (all partitions);
#   - crash: guard A killed -9; the kill to B's /readyz 200 holding all PARTITIONS
#     partitions (B's `partition restored` lines: sessions, replayed, ms per partition; the
#     group notices A after session.timeout.ms = 6000 here), B's peak RSS during the restore
#     (VmHWM reset through /proc/PID/clear_refs just before the kill), its VmRSS after, its
#     CPU from the kill to ready;
#   - each figure beside the formula's prediction (m0 15-25 MiB, m_idle 0.5-0.7 KB, m_live
#     ~6 KB, c1 ~7-9 us per event in a drain, r ~140,000 sessions/s, s ~106 B per
#     session) and the load average of its moment (the machine is shared).
# Prints a Markdown table (also build/bench/fleet-sizing-<timestamp>/fleet-sizing.md; the
# logs, RSS samples and metrics in the same directory).
#
#   scripts/fleet-sizing.sh BIN          # BIN: a release build of loopguard
# Env: SESSIONS (1000000), PARTITIONS (4), EVENTS_PER_SESSION (4; at most 7), SPREAD_MS (10),
#      THREADS (1: kafka.threads of each guard), TTL_SECS (engine.session_ttl_secs: above
#      the event-time span SESSIONS * SPREAD_MS so that no session expires: a million
#      sessions 10 ms apart span 10,000 s, past the default hour), TICKS (50 tick sessions),
#      SETTLE (10 s after the drain before the tick), PORT (first free pair from 19600),
#      ADMIN_PORT (first free pair from 19664: guard A, B at +1), MAX_RSS_MB (8000: a guard
#      above it is killed and the run stops), DRAIN_TIMEOUT (1800 s), RESTORE_TIMEOUT
#      (600 s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=$(realpath "${1:?usage: scripts/fleet-sizing.sh BIN}")
SESSIONS=${SESSIONS:-1000000} PARTITIONS=${PARTITIONS:-4} EVENTS_PER_SESSION=${EVENTS_PER_SESSION:-4}
SPREAD_MS=${SPREAD_MS:-10} THREADS=${THREADS:-1} TICKS=${TICKS:-50} SETTLE=${SETTLE:-10}
MAX_RSS_MB=${MAX_RSS_MB:-8000} DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-1800} RESTORE_TIMEOUT=${RESTORE_TIMEOUT:-600}
span_s=$((SESSIONS * SPREAD_MS / 1000))
TTL_SECS=${TTL_SECS:-$((span_s * 2 > 3600 ? span_s * 2 + 3600 : 3600))}
per_part=$(((SESSIONS + PARTITIONS - 1) / PARTITIONS))
MAX_PER_PARTITION=$((per_part * 3 / 2 + 10000))
run=fleet-sizing-$(date +%Y%m%d-%H%M%S)
work=build/bench/$run tag=$run
mkdir -p "$work"
say() { echo "fleet-sizing: $(date +%T) $*" >&2; }
die() { say "FAILED: $*"; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
. scripts/lib/ports.sh    # port_open, free_port
. scripts/lib/proc_cpu.sh # cpu_us PID
PORT=${PORT:-$(free_port 19600 2)}
ADMIN_PORT=${ADMIN_PORT:-$(free_port 19664 2)}
ADMIN_A=$ADMIN_PORT ADMIN_B=$((ADMIN_PORT + 1))

# row FIGURE MEASURED PREDICTION COMMAND: one line of the table, with the load now.
row() {
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(load)" "$4" >>"$work/rows"
  say "$1 = $2 (formula: ${3:--}; load $(load))"
}
: >"$work/rows"
# Number formatting: n VALUE [DECIMALS] -> 1,234.5
n() { LC_ALL=C awk -v v="$1" -v d="${2:-0}" 'BEGIN {
  s = sprintf("%." d "f", v); neg = s ~ /^-/; if (neg) s = substr(s, 2)
  i = index(s, "."); ip = i ? substr(s, 1, i - 1) : s; fp = i ? substr(s, i) : ""
  out = ""; while (length(ip) > 3) { out = "," substr(ip, length(ip) - 2) out; ip = substr(ip, 1, length(ip) - 3) }
  printf "%s%s%s%s\n", neg ? "-" : "", ip, out, fp }'; }
calc() { LC_ALL=C awk "BEGIN { printf \"%.6f\n\", $* }"; }

# ---- Everything started here is stopped on exit, by pid: guards, then the broker.
# (The RSS samplers end with their guard.)
pids=()
cleanup() {
  local p
  for p in ${pids[@]+"${pids[@]}"}; do kill -KILL "$p" 2>/dev/null || true; done
  scripts/kafka.sh stop "$PORT" >/dev/null 2>&1 || true
  rm -f "$work"/*.jsonl
}
trap cleanup EXIT
say "run $run: $SESSIONS sessions x $EVENTS_PER_SESSION events, $PARTITIONS partitions, SPREAD_MS=$SPREAD_MS, threads $THREADS, ttl $TTL_SECS s; broker 127.0.0.1:$PORT, admin $ADMIN_A/$ADMIN_B; load $(load)"
eval "$(scripts/kafka.sh start "$PORT")"
export KAFKA_BOOTSTRAP_SERVERS
datadir=build/kafka/run-$PORT/data

. scripts/lib/guard_conf.sh # guard_conf FILE TAG THREADS ENGINE_TOML
. scripts/lib/proc_mem.sh # kb PID VmHWM|VmRSS, sample PID FILE (kills above MAX_RSS_MB)
conf=$work/guard.toml
guard_conf "$conf" "$tag" "$THREADS" "max_sessions_per_partition = $MAX_PER_PARTITION
session_ttl_secs = $TTL_SECS"
# start_guard NAME ADMIN_PORT: pid in $gpid, log $work/NAME.log, RSS samples $work/NAME.rss.
start_guard() {
  local name=$1 admin=$2
  LOOPGUARD_INSTANCE_ID=$tag-$name LOOPGUARD__ADMIN__LISTEN=127.0.0.1:$admin \
    RUST_LOG=${RUST_LOG:-info,rdkafka=warn,loopguard::service::stream::worker::commit=debug} \
    "$BIN" serve --config "$conf" >"$work/$name.log" 2>&1 &
  gpid=$!
  pids+=("$gpid")
  (sample "$gpid" "$work/$name.rss" &) # not a job of this shell: it ends with its guard
}
alive() { [ -r "/proc/$1/status" ] && ! grep -q '^State:.*Z' "/proc/$1/status"; }
readyz() { [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz" 2>/dev/null)" = 200 ]; }
metrics() { curl -fs "http://127.0.0.1:$1/metrics"; }
# metric FILE NAME: the sum of NAME's series (labels or not).
metric() { awk -v m="$2" '$1 == m || index($1, m "{") == 1 { s += $2 } END { printf "%d\n", s }' "$1"; }
plain() { sed 's/\x1b\[[0-9;]*m//g' "$@"; }
# restored LOG [FROM_LINE]: the `partition restored` lines from line FROM_LINE on, as
# "partition sessions replayed ms".
restored() {
  plain "$1" | tail -n +"${2:-1}" | grep 'partition restored' |
    sed -n 's/.* partition=\([0-9]*\) sessions=\([0-9]*\) .* replayed=\([0-9]*\) ms=\([0-9]*\).*/\1 \2 \3 \4/p' || true
}
state_log_bytes() { find "$datadir" -path "*/$tag-state-*" -name '*.log' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }
lg() { "$BIN" loadgen --events-topic "$tag-events" --verdicts-topic "$tag-verdicts" "$@"; }
# Keyed like the runtimes' clients (Java's partitioner), so the keys tell the partition.
murmur=(--property partitioner=murmur2_random)
guard_dead() { tail -n 30 "$work/$1.log" >&2; cat "$work/$1.rss" 2>/dev/null | grep -i rss >&2 || true; die "guard $1 exited: $work/$1.log"; }

# ---- 1. Topics, events, tick events, the partition of each session.
"$BIN" topics create --config "$conf" --partitions "$PARTITIONS" >"$work/topics.log" 2>&1 ||
  { cat "$work/topics.log" >&2; die "topics create"; }
t0=$(now)
python3 scripts/sizing_report.py gen "$BIN" "$SESSIONS" "$EVENTS_PER_SESSION" "$work/events.jsonl" "$work/tick1.jsonl" "$SPREAD_MS"
say "generated in $(since "$t0") s; disk: $(df -h --output=avail "$work" | tail -n 1) free"
# Sessions per partition by murmur2 (Kafka's DefaultPartitioner / librdkafka murmur2_random),
# and TICKS tick sessions (the tick event under ids fleet-tick-<i>).
python3 - "$work/events.jsonl" "$work/tick1.jsonl" "$work/ticks.jsonl" "$PARTITIONS" "$TICKS" >"$work/partitions.expected" <<'EOF'
import json, sys

def murmur2(data):
    m, M = 0x5BD1E995, 0xFFFFFFFF
    n = len(data)
    h, i = (0x9747B28C ^ n) & M, 0
    while n - i >= 4:
        k = (int.from_bytes(data[i:i + 4], "little") * m) & M
        k ^= k >> 24
        k = (k * m) & M
        h = ((h * m) & M) ^ k
        i += 4
    r = n - i
    if r == 3:
        h ^= data[i + 2] << 16
    if r >= 2:
        h ^= data[i + 1] << 8
    if r >= 1:
        h = ((h ^ data[i]) * m) & M
    h ^= h >> 13
    h = (h * m) & M
    return h ^ (h >> 15)

# Kafka's own test vector (Utils.murmur2("21") == -973932308) and librdkafka's ("kafka").
assert murmur2(b"21") == -973932308 & 0xFFFFFFFF and murmur2(b"kafka") == 0xD067CF64
events, tick1, ticks_out, parts, ticks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
part = lambda key: (murmur2(key.encode()) & 0x7FFFFFFF) % parts
sessions, events_per = [0] * parts, [0] * parts
last = None
with open(events) as f:
    for line in f:
        i = line.index('"session_id":"') + 14
        sid = line[i:line.index('"', i)]
        p = part(sid)
        events_per[p] += 1
        if sid != last:  # a session's events are in a row (SPREAD_MS > 0)
            sessions[p] += 1
            last = sid
tick = json.loads(open(tick1).readline())
tick_per = [0] * parts
with open(ticks_out, "w") as out:
    for k in range(ticks):
        sid = f"fleet-tick-{k}"
        tick_per[part(sid)] += 1
        tick.update(session_id=sid, event_id=f"{sid}-1")
        out.write(json.dumps(tick, separators=(",", ":")) + "\n")
for p in range(parts):
    print(p, sessions[p], events_per[p], tick_per[p])
EOF
[ "$SPREAD_MS" -gt 0 ] || say "SPREAD_MS=0: sessions interleave, the per-partition session counts above count runs, not sessions"
say "sessions per partition by murmur2 (partition sessions events ticks):"
cat "$work/partitions.expected" >&2
awk '$4 == 0 { exit 1 }' "$work/partitions.expected" || die "a partition gets no tick session: raise TICKS"
events_total=$(wc -l <"$work/events.jsonl")
row "events loaded ($SESSIONS sessions x $EVENTS_PER_SESSION, session starts $SPREAD_MS ms apart in event time)" "$(n "$events_total")" "" \
  "scripts/sizing_report.py gen BIN $SESSIONS $EVENTS_PER_SESSION ... $SPREAD_MS"

# ---- 2. Preload, then delete the file.
t0=$(now)
out=$(lg preload "${murmur[@]}" --file "$work/events.jsonl")
echo "$out" >&2
pre_s=$(since "$t0")
row "preload wall time ($(n "$(stat -c %s "$work/events.jsonl")") bytes of JSONL)" "$(n "$pre_s" 1) s, $(n "$(calc "$events_total / $pre_s")") events/s" "" \
  "loadgen preload --property partitioner=murmur2_random --file events.jsonl"
rm -f "$work/events.jsonl"

# ---- 3. Guards A and B; the drain.
t0=$(now)
start_guard a "$ADMIN_A"
gA=$gpid
start_guard b "$ADMIN_B"
gB=$gpid
deadline=$(($(date +%s) + 120))
while :; do
  alive "$gA" || guard_dead a
  alive "$gB" || guard_dead b
  if readyz "$ADMIN_A" && readyz "$ADMIN_B"; then
    pa=$(metrics "$ADMIN_A" | awk '$1 == "loopguard_assigned_partitions" { print $2 }')
    pb=$(metrics "$ADMIN_B" | awk '$1 == "loopguard_assigned_partitions" { print $2 }')
    [ "${pa:-0}" -gt 0 ] && [ "${pb:-0}" -gt 0 ] && [ $((pa + pb)) -eq "$PARTITIONS" ] && break
  fi
  [ "$(date +%s)" -lt "$deadline" ] || die "guards not both ready with all partitions after 120 s"
  sleep 0.1
done
both_ready=$(since "$t0")
row "guards A and B started to both /readyz 200 holding $PARTITIONS partitions ($pa + $pb)" "$(n "$both_ready" 2) s" "" \
  "LOOPGUARD_INSTANCE_ID=$tag-a|b LOOPGUARD__ADMIN__LISTEN=127.0.0.1:$ADMIN_A|$ADMIN_B BIN serve --config guard.toml"
out=$(lg drain --group "$tag" --timeout "$DRAIN_TIMEOUT")
echo "$out" >&2
drain_s=$(since "$t0")
alive "$gA" || guard_dead a
alive "$gB" || guard_dead b
grep -q "; \([0-9]*\) of \1 committed" <<<"$out" || die "drain incomplete: $out"
rate=$(sed -n 's/.*(\([0-9]*\) events\/s).*/\1/p' <<<"$out")
row "drain of $(n "$events_total") events: wall time from the guards' start" "$(n "$drain_s" 1) s" "" "loadgen drain --group $tag"
row "drain rate, both guards (loadgen drain: first commit seen to last)" "$(n "$rate") events/s" "" "loadgen drain --group $tag"
declare -A held hwm rss events_of
for g in a b; do
  pid=$([ $g = a ] && echo "$gA" || echo "$gB") admin=$([ $g = a ] && echo "$ADMIN_A" || echo "$ADMIN_B")
  G=${g^^}
  cpu=$(cpu_us "$pid") hwm[$g]=$(kb "$pid" VmHWM) rss[$g]=$(kb "$pid" VmRSS)
  metrics "$admin" >"$work/$g.drained.metrics" || die "no metrics from guard $g"
  held[$g]=$(metric "$work/$g.drained.metrics" loopguard_active_sessions)
  events_of[$g]=$(metric "$work/$g.drained.metrics" loopguard_events_consumed_total)
  parts_g=$(metric "$work/$g.drained.metrics" loopguard_assigned_partitions)
  evict=$(metric "$work/$g.drained.metrics" loopguard_session_evictions_total)
  row "guard $G: partitions, events consumed, sessions evicted (ttl, capacity)" "$parts_g, $(n "${events_of[$g]}"), $evict" "" \
    "/metrics: loopguard_assigned_partitions, loopguard_events_consumed_total, loopguard_session_evictions_total"
  row "guard $G: CPU per event (utime+stime from its start, over its events)" "$(n "$(calc "$cpu / (${events_of[$g]} > 0 ? ${events_of[$g]} : 1)")" 2) us ($(n "$(calc "$cpu / 1000000")" 1) s CPU)" \
    "c1 ~8 us (7-9 in a drain)" "/proc/PID/stat fields 14+15 / loopguard_events_consumed_total"
  row "guard $G: sessions held after the drain (loopguard_active_sessions)" "$(n "${held[$g]}")" "" "/metrics"
done
# Sessions live at the end of the drain: those within freeze_idle (60 s) to a sweep's minute
# more of event time of their partition's last event: 60-120 s / SPREAD_MS, all partitions.
live_lo=$((SPREAD_MS > 0 ? 60000 / SPREAD_MS : SESSIONS)) live_hi=$((SPREAD_MS > 0 ? 120000 / SPREAD_MS : SESSIONS))
# predict HELD LIVE_LO LIVE_HI: "lo-hi MiB" of m0 + (held - live) * m_idle + live * m_live
predict() {
  local lo hi
  lo=$(calc "(15 * 1048576 + ($1 - $2) * 500 + $2 * 6000) / 1048576")
  hi=$(calc "(25 * 1048576 + ($1 - $3) * 700 + $3 * 6000) / 1048576")
  echo "$(n "$lo" 0)-$(n "$hi" 0) MiB"
}
for g in a b; do
  G=${g^^}
  tot=$((held[a] + held[b]))
  la=$((live_lo * held[$g] / (tot > 0 ? tot : 1))) lb=$((live_hi * held[$g] / (tot > 0 ? tot : 1)))
  row "guard $G: peak RSS (VmHWM) after the drain, $(n "${held[$g]}") sessions (~$(n "$la")-$(n "$lb") live)" "$(n "$(calc "${hwm[$g]} / 1024")" 1) MiB" \
    "$(predict "${held[$g]}" "$la" "$lb")" "/proc/PID/status VmHWM; m0 + idle x m_idle + live x m_live"
  row "guard $G: VmRSS after the drain" "$(n "$(calc "${rss[$g]} / 1024")" 1) MiB" "$(predict "${held[$g]}" "$la" "$lb")" "/proc/PID/status VmRSS"
done

# ---- 4. Settle: a checkpoint due, then one tick 120 s later in event time on every partition.
sleep "$SETTLE"
row "state topic .log bytes, all partitions, right after the drain" "$(n "$(state_log_bytes)")" "" "sum of *.log sizes in $datadir/$tag-state-*"
out=$(lg preload "${murmur[@]}" --file "$work/ticks.jsonl")
echo "$out" >&2
lg drain --group "$tag" --timeout 120 >&2
sleep 10
alive "$gA" || guard_dead a
alive "$gB" || guard_dead b
for g in a b; do
  pid=$([ $g = a ] && echo "$gA" || echo "$gB") admin=$([ $g = a ] && echo "$ADMIN_A" || echo "$ADMIN_B")
  G=${g^^}
  metrics "$admin" >"$work/$g.settled.metrics"
  h=$(metric "$work/$g.settled.metrics" loopguard_active_sessions)
  held[$g]=$h
  row "guard $G: VmRSS with every session frozen (10 s after the ticks), $(n "$h") sessions" "$(n "$(calc "$(kb "$pid" VmRSS) / 1024")" 1) MiB" \
    "$(predict "$h" 0 0)" "/proc/PID/status VmRSS; m0 + sessions x m_idle"
done
sb=$(state_log_bytes) total_held=$((held[a] + held[b]))
row "state topic .log bytes, all partitions, after the ticks' checkpoints" "$(n "$sb") ($(n "$(calc "$sb / $total_held")") B/session)" \
  "$(n "$(calc "$total_held * 106")") (s ~106 B/session)" "sum of *.log sizes in $datadir/$tag-state-*"
read -r ck_states ck_bytes < <(cat "$work/a.log" "$work/b.log" | plain | sed -n 's/.*states=\([0-9]*\) state_bytes=\([0-9]*\).*/\1 \2/p' |
  awk '{ n += $1; b += $2 } END { printf "%d %d\n", n, b }')
row "checkpoint state records and bytes written by A and B (debug \`batch committed\`)" "$(n "$ck_states"), $(n "$ck_bytes") B ($(n "$(calc "$ck_bytes / ($ck_states > 0 ? $ck_states : 1)")") B each)" \
  "352 B uncompressed each" "RUST_LOG ...worker::commit=debug"

# ---- 5. Crash: A killed -9, B takes its partitions over.
b_parts=$(restored "$work/b.log" | awk '{ print $1 }' | sort -un | tr '\n' ' ')
a_parts=$(for ((p = 0; p < PARTITIONS; p++)); do grep -qw "$p" <<<"$b_parts" || echo "$p"; done | tr '\n' ' ')
a_sessions=$(awk -v ps=" $a_parts" 'index(ps, " " $1 " ") { s += $2 + $4 } END { print s + 0 }' "$work/partitions.expected")
b_hwm_life=$(kb "$gB" VmHWM)
echo 5 >"/proc/$gB/clear_refs" # VmHWM := VmRSS now: the peak below is the restore's
from=$(($(wc -l <"$work/b.log") + 1))
cpu0=$(cpu_us "$gB")
say "crash: kill -9 of guard A (partitions $a_parts, ~$a_sessions sessions); B holds $b_parts"
tk=$(now)
kill -KILL "$gA"
wait "$gA" 2>/dev/null || true
deadline=$(($(date +%s) + RESTORE_TIMEOUT)) restored_s=
while :; do
  alive "$gB" || guard_dead b
  got=$(restored "$work/b.log" "$from" | awk '{ print $1 }' | sort -un | tr '\n' ' ')
  missing=$(for p in $a_parts; do grep -qw "$p" <<<"$got" || echo "$p"; done)
  if [ -z "$missing" ]; then
    [ -n "$restored_s" ] || restored_s=$(since "$tk")
    if readyz "$ADMIN_B" && [ "$(metrics "$ADMIN_B" | awk '$1 == "loopguard_assigned_partitions" { print $2 }')" = "$PARTITIONS" ]; then break; fi
  fi
  [ "$(date +%s)" -lt "$deadline" ] || { tail -n 30 "$work/b.log" >&2; die "B not ready with all partitions after $RESTORE_TIMEOUT s"; }
  sleep 0.05
done
ready_s=$(since "$tk")
cpu1=$(cpu_us "$gB") b_hwm=$(kb "$gB" VmHWM) b_rss=$(kb "$gB" VmRSS)
metrics "$ADMIN_B" >"$work/b.restored.metrics"
b_held=$(metric "$work/b.restored.metrics" loopguard_active_sessions)
plain "$work/b.log" | tail -n +"$from" | grep -E 'partition restored|revoked|assigned' >&2 || true
restored "$work/b.log" "$from" >"$work/b.restored"
max_part=$(awk '{ if ($2 > m) m = $2 } END { print m + 0 }' "$work/b.restored")
row "crash: kill -9 of A to B's \`partition restored\` for all of A's partitions ($a_parts)" "$(n "$restored_s" 2) s" \
  "6 s (session.timeout.ms) + $(n "$(calc "$a_sessions / 140000")" 1) s ($(n "$a_sessions") sessions at r ~140,000/s)" "B's serve log"
row "crash: kill -9 of A to B's /readyz 200 holding $PARTITIONS partitions" "$(n "$ready_s" 2) s" "" "curl /readyz and /metrics every 50 ms"
while read -r p s r ms; do
  exp=$(awk -v p="$p" '$1 == p { print $2 + $4 }' "$work/partitions.expected")
  row "crash: B's restore of partition $p (sessions, replayed events, ms: the whole assignment's)" "$(n "$s"), $r, $(n "$ms") ms" \
    "$(n "$exp") sessions (murmur2 of the keys)" "B's \`partition restored\` line"
done <"$work/b.restored"
read -r ap ar ams < <(plain "$work/b.log" | tail -n +"$from" | grep 'assignment restored' | tail -n 1 |
  sed -n 's/.* partitions=\([0-9]*\) replayed=\([0-9]*\) ms=\([0-9]*\).*/\1 \2 \3/p')
row "crash: B's restore of A's partitions, one assignment (partitions, replayed events, ms; sessions/s)" \
  "$ap, $ar, $(n "$ams") ms; $(n "$(calc "$a_sessions * 1000 / ($ams > 0 ? $ams : 1)")")/s" \
  "$(n "$(calc "$a_sessions / 140")") ms (r ~140,000 sessions/s)" "B's \`assignment restored\` line"
row "crash: B's CPU from the kill to ready" "$(n "$(calc "($cpu1 - $cpu0) / 1000000")" 2) s" "" "/proc/PID/stat fields 14+15"
row "crash: B's peak RSS (VmHWM) during the restore (reset at the kill; lifetime peak $(n "$(calc "$b_hwm_life / 1024")" 1) MiB)" \
  "$(n "$(calc "$b_hwm / 1024")" 1) MiB" "$(predict "$b_held" 0 0)" "/proc/PID/status VmHWM after echo 5 > /proc/PID/clear_refs"
row "crash: B's VmRSS after the restore, $(n "$b_held") sessions (loopguard_active_sessions)" "$(n "$(calc "$b_rss / 1024")" 1) MiB" \
  "$(predict "$b_held" 0 0)" "/proc/PID/status VmRSS; m0 + N x m_idle (decision (gq): restored frozen)"
sleep 10
row "crash: B's VmRSS 10 s later" "$(n "$(calc "$(kb "$gB" VmRSS) / 1024")" 1) MiB" "$(predict "$b_held" 0 0)" "/proc/PID/status VmRSS"
kill -TERM "$gB"
wait "$gB" || true
cp "$datadir/../server.log" "$work/broker.server.log" 2>/dev/null || true

# ---- 6. The table.
{
  echo "| figure | measured | formula's prediction | load average (1, 5, 15 min) | command |"
  echo "| --- | ---: | --- | --- | --- |"
  awk -F'\t' '{ printf "| %s | %s | %s | %s | `%s` |\n", $1, $2, ($3 == "" ? "-" : $3), $4, $5 }' "$work/rows"
  echo
  echo "Formula (docs/operations.md): memory per instance = m0 + held x (L x m_live + (1 - L) x m_idle), m0 15-25 MiB,"
  echo "m_idle 0.5-0.7 KB (KB = 1,000 B), m_live ~6 KB; live = sessions within 60-120 s of event time of their"
  echo "partition's last event ($(n "$live_lo")-$(n "$live_hi") of $(n "$SESSIONS") at SPREAD_MS=$SPREAD_MS). Guards: kafka.threads = $THREADS,"
  echo "session.timeout.ms 6000, engine.max_sessions_per_partition $MAX_PER_PARTITION, engine.session_ttl_secs $TTL_SECS. BIN $BIN."
} | tee "$work/fleet-sizing.md"
say "figures and logs in $work; load $(load)"
