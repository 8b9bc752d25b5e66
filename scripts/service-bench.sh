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
# Costs, as CPU time per event from /proc (ratios within one run: the machine is shared),
# measured twice: with the guard running while the events are loaded (a live tail that falls
# behind), and as the drain of a backlog loaded before the guard starts (like for like with
# replay, which reads a file, and with the plain consumer, which reads a full topic):
# the guard's threads during its drain against `loopguard replay`'s process; the broker's
# during the guard's preload and drain, less a preload alone, against a plain consumer's
# drain, with and without its JIT compiler threads (a broker compiles for many minutes
# after its start; their share is printed); the broker's cores over IDLE seconds with the guard idle and with no guard; the
# bytes per session state a checkpoint wrote (the guard's "batch committed" lines); and
# the memory per idle session: `loopguard replay`'s peak RSS over two files of idle
# sessions (examples/idle_sessions.rs), short ones and ones after a ~20 KB response.
#
#   scripts/service-bench.sh [BIN]
# Env: KAFKA_BOOTSTRAP_SERVERS (127.0.0.1:19092), EVENTS (200000), SESSIONS (3000),
#      PARTITIONS (4), ROUNDS (3), RATE (1000), DURATION (20 s; 0 skips the latency runs),
#      ADMIN_PORT (19464), IDLE (20 s; 0 skips the idle broker figure), IDLE_GEN
#      (target/release/examples/idle_sessions; absent: no memory figures), and any
#      LOOPGUARD__KAFKA__* setting for the guard (e.g. LOOPGUARD__KAFKA__THREADS=2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-target/release/loopguard}
export KAFKA_BOOTSTRAP_SERVERS=${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:19092}
EVENTS=${EVENTS:-200000} SESSIONS=${SESSIONS:-3000} PARTITIONS=${PARTITIONS:-4}
ROUNDS=${ROUNDS:-3} RATE=${RATE:-1000} DURATION=${DURATION:-20} ADMIN_PORT=${ADMIN_PORT:-19464}
IDLE=${IDLE:-20} IDLE_GEN=${IDLE_GEN:-target/release/examples/idle_sessions}
run=bench-$(date +%s)-$$
work=build/bench/$run
mkdir -p "$work"
say() { echo "service-bench: $*" >&2; }
guard=
trap '[ -n "$guard" ] && kill $guard 2>/dev/null || true' EXIT

# use_topics TAG: the guard and the load tool on topics named after TAG.
. scripts/lib/bench_topics.sh

# cpu_us / sys_us PID: CPU time so far (us); broker_pid: the broker of the bootstrap port.
. scripts/lib/proc_cpu.sh
broker=$(broker_pid)

# Starts the guard on the current topics and waits until it is ready: every stream
# thread in the group with its partitions restored. Ready alone can be the first thread
# holding all the partitions before the second has joined (this broker runs with
# group.initial.rebalance.delay.ms=0); the load would then land on a hand-over. Its
# commits are logged (debug) for the checkpoint sizes.
start_guard() {
  RUST_LOG=${RUST_LOG:-info,rdkafka=warn,loopguard::service::stream::worker::commit=debug} "$BIN" serve >"$work/$tag.serve.log" 2>&1 &
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
idle_with=0 idle_without=0
for r in $(seq "$ROUNDS"); do
  use_topics "$run-r$r"
  start=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$work/replay.time" "$BIN" replay "$work/fleet.jsonl" >/dev/null 2>&1
  replay_s=$(echo "$(date +%s.%N) - $start" | bc)
  replay_cpu=$(awk '{ printf "%d", ($1 + $2) * 1000000 }' "$work/replay.time")
  start_guard
  g0=$(cpu_us "$guard") gs0=$(sys_us "$guard") b0=$(cpu_us "$broker") j0=$(jit_us "$broker")
  lg preload --file "$work/fleet.jsonl" >&2
  drain=$(lg drain --group "$tag" | tee /dev/stderr | rate_of)
  guard_cpu=$(($(cpu_us "$guard") - g0)) guard_sys=$(($(sys_us "$guard") - gs0))
  broker_guard=$(($(cpu_us "$broker") - b0)) jit_guard=$(($(jit_us "$broker") - j0))
  if [ "$r" = 1 ] && [ "$IDLE" != 0 ]; then
    # The broker's cores with the guard idle, then with no guard, after a settling pause.
    sleep 5; b0=$(cpu_us "$broker"); sleep "$IDLE"; idle_with=$(($(cpu_us "$broker") - b0))
  fi
  stop_guard
  if [ "$r" = 1 ] && [ "$IDLE" != 0 ]; then
    sleep 5; b0=$(cpu_us "$broker"); sleep "$IDLE"; idle_without=$(($(cpu_us "$broker") - b0))
  fi
  b0=$(cpu_us "$broker") j0=$(jit_us "$broker")
  raw=$(lg raw-consume | tee /dev/stderr | rate_of)
  broker_raw=$(($(cpu_us "$broker") - b0)) jit_raw=$(($(jit_us "$broker") - j0))
  # The preload's own share of the broker's work during the guard's drain.
  use_topics "$run-r$r-preload"
  b0=$(cpu_us "$broker") j0=$(jit_us "$broker")
  lg preload --file "$work/fleet.jsonl" >&2
  broker_preload=$(($(cpu_us "$broker") - b0)) jit_preload=$(($(jit_us "$broker") - j0))
  # A drain of a backlog, like for like with replay (a file) and the plain consumer (a full
  # topic): the events preloaded with no guard running, then the guard started; its CPU
  # and the broker's work (its JIT compilers taken out) from the guard's start to the end
  # of its drain, start-up included, then a plain consumer of the same topic.
  use_topics "$run-r$r-backlog"
  lg preload --file "$work/fleet.jsonl" >&2
  sleep 1
  b0=$(cpu_us "$broker") j0=$(jit_us "$broker")
  RUST_LOG=${RUST_LOG:-info,rdkafka=warn} "$BIN" serve >"$work/$tag.serve.log" 2>&1 &
  guard=$!
  lg drain --group "$tag" >&2
  backlog_guard=$(cpu_us "$guard")
  backlog_broker=$(($(cpu_us "$broker") - b0 - ($(jit_us "$broker") - j0)))
  stop_guard
  b0=$(cpu_us "$broker") j0=$(jit_us "$broker")
  lg raw-consume >&2
  backlog_raw=$(($(cpu_us "$broker") - b0 - ($(jit_us "$broker") - j0)))
  rounds+=("$replay_s $drain $raw $replay_cpu $guard_cpu $broker_guard $broker_preload $broker_raw $guard_sys $jit_guard $jit_preload $jit_raw $backlog_guard $backlog_broker $backlog_raw")
  say "round $r: replay $replay_s s, drain $drain events/s, raw $raw events/s; load: $(cut -d' ' -f1-3 /proc/loadavg)"
done

# Bytes per checkpointed session state: every "batch committed" line of the drains.
states=$(cat "$work"/*-r[0-9]*.serve.log | sed -n 's/.*states=\([0-9]*\) state_bytes=\([0-9]*\).*/\1 \2/p' |
  awk '{ n += $1; b += $2 } END { printf "%d %d", n, b }')

# Memory per idle session: peak RSS of replay over two counts of each kind of session.
memory=""
if [ -x "$IDLE_GEN" ]; then
  for spec in "short 20000 120000" "long 500 3000"; do
    set -- $spec
    for n in "$2" "$3"; do
      "$IDLE_GEN" "$1" "$n" >"$work/idle-$1-$n.jsonl"
      /usr/bin/time -f "%M" -o "$work/idle.rss" "$BIN" replay "$work/idle-$1-$n.jsonl" >/dev/null 2>&1
      memory+="$1 $n $(cat "$work/idle.rss");"
      rm "$work/idle-$1-$n.jsonl"
    done
  done
fi

python3 - "$EVENTS" "$lc" "$lu" "$IDLE" "$idle_with $idle_without" "$states" "$memory" "${rounds[@]}" <<'EOF'
import statistics, sys
events, lc, lu = int(sys.argv[1]), sys.argv[2], sys.argv[3]
idle_s, (idle_with, idle_without) = int(sys.argv[4]), map(int, sys.argv[5].split())
state_records, state_bytes = map(int, sys.argv[6].split())
memory = [m.split() for m in sys.argv[7].split(";") if m]
rows, costs = [], []
for i, r in enumerate(sys.argv[8:], 1):
    replay_s, drain, raw, *cpu = r.split()
    (replay_cpu, guard_cpu, broker_guard, broker_preload, broker_raw, guard_sys,
     jit_guard, jit_preload, jit_raw, backlog_guard, backlog_broker, backlog_raw) = map(int, cpu)
    # The broker's work less its JIT compilers' (still warming up: their time is
    # printed apart).
    work_guard = max((broker_guard - jit_guard) - (broker_preload - jit_preload), 0)
    costs.append((replay_cpu / events, guard_cpu / events,
                  max(broker_guard - broker_preload, 0) / events, broker_raw / events,
                  work_guard / events, (broker_raw - jit_raw) / events,
                  backlog_guard / events, backlog_broker / events, backlog_raw / events))
    c = costs[-1]
    print(f"round {i}: CPU us/event: replay {c[0]:.1f}, guard {c[1]:.1f} ({c[1] / c[0]:.2f}x replay; "
          f"{guard_sys / events:.1f} of it in the kernel); "
          f"broker during the guard's drain {c[2]:.1f} (preload's {broker_preload / events:.1f} taken out), "
          f"during a plain consumer's {c[3]:.1f} ({c[2] / max(c[3], 0.01):.2f}x); "
          f"without its JIT compilers {c[4]:.1f} and {c[5]:.1f} ({c[4] / max(c[5], 0.01):.2f}x; "
          f"JIT {jit_guard / events:.1f}, {jit_preload / events:.1f} and {jit_raw / events:.1f})")
    print(f"round {i}: a backlog's drain, CPU us/event: guard {c[6]:.1f} ({c[6] / c[0]:.2f}x replay's), "
          f"broker without its JIT compilers {c[7]:.1f} ({c[7] / max(c[8], 0.01):.2f}x a plain consumer's {c[8]:.1f})")
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
m = [statistics.median(c[k] for c in costs) for k in range(9)]
print(f"median CPU us/event: replay {m[0]:.1f}, guard {m[1]:.1f} = {m[1] / m[0]:.2f}x replay (target <= 1.2x); "
      f"broker {m[2]:.1f} during the guard's drain, {m[3]:.1f} during a plain consumer's = {m[2] / max(m[3], 0.01):.2f}x (target <= 3x); "
      f"without the broker's JIT compilers {m[4]:.1f} and {m[5]:.1f} = {m[4] / max(m[5], 0.01):.2f}x")
print(f"median CPU us/event, a backlog's drain (start-up included): guard {m[6]:.1f} = {m[6] / m[0]:.2f}x replay (target <= 1.2x); "
      f"broker without its JIT compilers {m[7]:.1f}, a plain consumer's {m[8]:.1f} = {m[7] / max(m[8], 0.01):.2f}x (target <= 3x)")
if idle_s:
    w, wo = idle_with / 1e6 / idle_s, idle_without / 1e6 / idle_s
    print(f"broker cores over {idle_s} s: {w:.3f} with the guard idle, {wo:.3f} without; the idle guard adds {w - wo:.3f} (target <= 0.05)")
if state_records:
    print(f"checkpointed session states: {state_records} records, {state_bytes / state_records:,.0f} bytes each")
for kind in ("short", "long"):
    pts = [(int(n), int(kb)) for k, n, kb in memory if k == kind]
    if len(pts) == 2:
        (n1, kb1), (n2, kb2) = pts
        print(f"idle {kind} sessions: peak RSS {kb1:,} KB at {n1:,}, {kb2:,} KB at {n2:,}: {(kb2 - kb1) * 1024 / (n2 - n1):,.0f} bytes per session"
              + (" (target <= 1 KB)" if kind == "short" else " (target <= 8 KB)"))
EOF
say "logs in $work; load: $(cut -d' ' -f1-3 /proc/loadavg)"
