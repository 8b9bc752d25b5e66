#!/usr/bin/env bash
# The cost anchor (issue 36): the guard against a minimal Kafka Streams application doing
# the same job (benches/streams-anchor: exactly_once_v2, commit.interval.ms 100, a
# per-session store with a changelog topic, an output record for the events that get a
# verdict), measured in one run on the same events, on one broker started here
# (scripts/kafka.sh start PORT; stopped at the end).
#
# The anchor is built from Maven first (mvn -B -q package, into build/streams-anchor/),
# against the broker's Kafka version. The broker is warmed up (WARM seconds of the fleet
# at RATE events/s through both processors at once, then a short backlog through both),
# then ROUNDS rounds of two regimes; within a round the processors take turns, the order
# alternating between rounds:
#   backlog  EVENTS fleet events preloaded on fresh topics with nothing running, then
#            drained by one fresh `loopguard serve` (its group) and, from the same topic,
#            by one fresh anchor (its own application id); each timed from its start to
#            its group committing the end of the topic (`loopguard loadgen drain`).
#   trickle  the broker idle for DURATION seconds (nothing running), then RATE events/s for
#            DURATION seconds (`loadgen preload --rate`) with no processor, then through each
#            processor in turn, each on fresh topics, started and ready before the load.
# Per processor and regime: the broker's CPU per event (user + system of its process from
# /proc, its JIT compiler threads taken out; in the trickle above the idle broker and
# above the load alone), the processor's own CPU per event (its process, start-up
# included in the backlog), output records (the guard's verdicts and judged-through
# markers: its /metrics; the anchor's records: its counter), transactions (EndTxn
# requests the broker handled, both sides alike; and each side's own count: the guard's
# loopguard_transactions_total{outcome="commit"}, Streams' stream-thread commit-total),
# the broker's requests by API and the bytes produced to each topic (its own counters,
# read over JMX by attaching to its pid: benches/streams-anchor BrokerJmx), and the drain
# rate. Prints a Markdown table of the medians with the ratios guard / Streams, the load
# average, and per-round rows; raw figures in build/bench/<run>/.
#
#   scripts/streams-bench.sh [BIN]
# Env: PORT (first free pair from 19400), EVENTS (200000), SESSIONS (3000), PARTITIONS (4),
#      ROUNDS (3), RATE (1000), DURATION (40 s), WARM (60 s), ADMIN_PORT (first free from
#      19464), KAFKA_VERSION (4.1.2), STREAMS_THREADS (1: Streams' default),
#      STREAMS_STORE (rocksdb or memory), STREAMS_JVM_OPTS (-Xms256m -Xmx1g), and any
#      LOOPGUARD__* setting for the guard (e.g. LOOPGUARD__KAFKA__THREADS=1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=$(realpath "${1:-target/release/loopguard}")
EVENTS=${EVENTS:-200000} SESSIONS=${SESSIONS:-3000} PARTITIONS=${PARTITIONS:-4}
ROUNDS=${ROUNDS:-3} RATE=${RATE:-1000} DURATION=${DURATION:-40} WARM=${WARM:-60}
STREAMS_THREADS=${STREAMS_THREADS:-1} STREAMS_STORE=${STREAMS_STORE:-rocksdb}
STREAMS_JVM_OPTS=${STREAMS_JVM_OPTS:--Xms256m -Xmx1g}
export KAFKA_VERSION=${KAFKA_VERSION:-4.1.2}
run=anchor-$(date +%s)-$$
work=build/bench/$run
mkdir -p "$work"
say() { echo "streams-bench: $(date +%T) $*" >&2; }
die() { say "FAILED: $*"; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { # first P from $1 (step $2) with P .. P+$2-1 all free
  local p=$1 i busy
  while :; do
    busy=0
    for ((i = 0; i < $2; i++)); do port_open $((p + i)) && busy=1; done
    ((busy)) || break
    p=$((p + $2))
  done
  echo "$p"
}
[ -x "$BIN" ] || die "no binary at $BIN (cargo build --release, or pass BIN)"
PORT=${PORT:-$(free_port 19400 2)}
ADMIN_PORT=${ADMIN_PORT:-$(free_port 19464 1)}

# ---- The anchor, built from Maven (its classes and a lib/ of jars for a classpath).
say "building benches/streams-anchor (Kafka Streams $KAFKA_VERSION) with mvn"
mvn -B -q -f benches/streams-anchor/pom.xml -Dkafka.version="$KAFKA_VERSION" package >"$work/mvn.log" 2>&1 ||
  { cat "$work/mvn.log" >&2; die "mvn package failed"; }
ACP="build/streams-anchor/streams-anchor-0.jar:build/streams-anchor/lib/*"

# ---- Our broker, stopped at the end; the processors we start, stopped by pid.
guard= anchor=
cleanup() {
  local p
  for p in $guard $anchor; do kill -KILL "$p" 2>/dev/null || true; done
  scripts/kafka.sh stop "$PORT" >/dev/null 2>&1 || true
}
trap cleanup EXIT
eval "$(scripts/kafka.sh start "$PORT")"
export KAFKA_BOOTSTRAP_SERVERS

# use_topics TAG (fresh topics, group and transactional ids for the guard), lg ARGS.
. scripts/lib/bench_topics.sh
# cpu_us PID, jit_us PID, broker_pid.
. scripts/lib/proc_cpu.sh
broker=$(broker_pid)

# The broker's request and byte counters since its start, to FILE.
jmx() { java -cp "$ACP" loopguard.anchor.BrokerJmx "$broker" >"$1" 2>"$1.err" || die "JMX read failed: $1.err"; }
now() { date +%s.%N; }

start_guard() { # on the current topics; waits until every stream thread has its partitions
  RUST_LOG=${RUST_LOG:-info,rdkafka=warn} "$BIN" serve >"$work/$tag.serve.log" 2>&1 &
  guard=$!
}
wait_guard() {
  local threads=${LOOPGUARD__KAFKA__THREADS:-$(nproc)}
  [ "$threads" -gt "$PARTITIONS" ] && threads=$PARTITIONS
  for _ in $(seq 600); do
    if [ "$(grep -c 'assignment restored' "$work/$tag.serve.log")" -ge "$threads" ] &&
      curl -fs "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1; then
      return 0
    fi
    kill -0 "$guard" 2>/dev/null || die "the guard exited: $work/$tag.serve.log"
    sleep 0.1
  done
  die "guard not ready after 60 s: $work/$tag.serve.log"
}
guard_metrics() { curl -fs "http://127.0.0.1:$ADMIN_PORT/metrics" >"$1" || die "no guard metrics"; }
stop_guard() { kill -TERM "$guard"; wait "$guard" || true; guard=; }

# The anchor on the current events topic; its output topic $tag-anchor, app id APP.
start_anchor() {
  local app=$1
  # shellcheck disable=SC2086 # STREAMS_JVM_OPTS is a list of flags
  java $STREAMS_JVM_OPTS -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$ACP" \
    loopguard.anchor.StreamsAnchor "bootstrap=$KAFKA_BOOTSTRAP_SERVERS" "input=$tag-events" \
    "output=$tag-anchor" "app-id=$app" "state-dir=$work/streams-state" "stats=$work/$app.stats" \
    "threads=$STREAMS_THREADS" "store=$STREAMS_STORE" >"$work/$app.log" 2>&1 &
  anchor=$!
}
wait_anchor() {
  for _ in $(seq 1200); do
    grep -q 'anchor: state RUNNING' "$work/$1.log" && [ -s "$work/$1.stats" ] && return 0
    kill -0 "$anchor" 2>/dev/null || die "the anchor exited: $work/$1.log"
    sleep 0.1
  done
  die "anchor not running after 120 s: $work/$1.log"
}
# Its counters as they stand (rewritten every 250 ms), to FILE.
anchor_stats() { sleep 0.6; cp "$work/$1.stats" "$2"; }
stop_anchor() {
  kill -TERM "$anchor"
  for _ in $(seq 400); do kill -0 "$anchor" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$anchor" 2>/dev/null || true
  wait "$anchor" || true
  anchor=
}

# One line of raw figures per measurement, key=value, for the summary.
rec() { echo "$*" >>"$work/rows"; }
: >"$work/rows"

# ---- Backlog: WHO (guard or streams) drains the preloaded topic $tag-events.
drain() {
  local who=$1 r=$2 id=$work/b$2-$1 app="$tag-streams" b0 j0 t0 t1 pid group p pj out st rate
  jmx "$id.jmx0"
  b0=$(cpu_us "$broker") j0=$(jit_us "$broker") t0=$(now)
  if [ "$who" = guard ]; then
    start_guard; pid=$guard group=$tag
  else
    start_anchor "$app"; pid=$anchor group=$app
  fi
  rate=$(lg drain --group "$group" --timeout 900 | tee -a "$work/drain.log" |
    sed -n 's/.*(\([0-9]*\) events\/s).*/\1/p')
  t1=$(now)
  p=$(cpu_us "$pid") pj=$(jit_us "$pid")
  local b1 j1
  b1=$(cpu_us "$broker") j1=$(jit_us "$broker")
  jmx "$id.jmx1"
  if [ "$who" = guard ]; then
    guard_metrics "$id.m1"; stop_guard; out=$tag-verdicts st=$tag-state
  else
    anchor_stats "$app" "$id.m1"; stop_anchor; out=$tag-anchor st=$app-sessions-changelog
  fi
  rec "regime=backlog round=$r who=$who events=$EVENTS secs=$(echo "$t1 - $t0" | bc) rate_first_commit=${rate:-0}" \
    "proc_us=$p proc_jit_us=$pj broker_us=$((b1 - b0)) broker_jit_us=$((j1 - j0))" \
    "jmx0=$id.jmx0 jmx1=$id.jmx1 m0=none m1=$id.m1 out_topic=$out state_topic=$st load=$(load | cut -d' ' -f1)"
  say "backlog round $r, $who: $(tail -n1 "$work/drain.log")"
}

# ---- Trickle: RATE events/s for DURATION s through WHO (or through nothing: load).
trickle() {
  local who=$1 r=$2 id=$work/t$2-$1 app="$tag-streams" p=0 ps=0 b0 j0 t0 t1 out=none st=none m0=none m1=none
  if [ "$who" = guard ]; then
    start_guard; wait_guard; p=$guard; ps=$(cpu_us "$guard")
  elif [ "$who" = streams ]; then
    start_anchor "$app"; wait_anchor "$app"; p=$anchor; ps=$(cpu_us "$anchor")
  fi
  sleep 5 # let the group settle and the start-up's requests pass
  jmx "$id.jmx0"
  case $who in
    guard) guard_metrics "$id.m0"; out=$tag-verdicts st=$tag-state m0=$id.m0 m1=$id.m1 ;;
    streams) anchor_stats "$app" "$id.m0"; out=$tag-anchor st=$app-sessions-changelog m0=$id.m0 m1=$id.m1 ;;
  esac
  local p0=0 pj0=0
  [ "$p" = 0 ] || p0=$(cpu_us "$p") pj0=$(jit_us "$p")
  b0=$(cpu_us "$broker") j0=$(jit_us "$broker") t0=$(now)
  lg preload --file "$work/trickle.jsonl" --rate "$RATE" >>"$work/trickle.log" 2>&1
  case $who in
    guard) lg drain --group "$tag" --timeout 120 >>"$work/trickle.log" ;;
    streams) lg drain --group "$app" --timeout 120 >>"$work/trickle.log" ;;
  esac
  t1=$(now)
  local b1 j1 p1=0 pj1=0
  b1=$(cpu_us "$broker") j1=$(jit_us "$broker")
  [ "$p" = 0 ] || p1=$(cpu_us "$p") pj1=$(jit_us "$p")
  jmx "$id.jmx1"
  case $who in
    guard) guard_metrics "$id.m1"; stop_guard ;;
    streams) anchor_stats "$app" "$id.m1"; stop_anchor ;;
  esac
  rec "regime=trickle round=$r who=$who events=$TRICKLE secs=$(echo "$t1 - $t0" | bc) startup_us=$ps" \
    "proc_us=$((p1 - p0)) proc_jit_us=$((pj1 - pj0)) broker_us=$((b1 - b0)) broker_jit_us=$((j1 - j0))" \
    "jmx0=$id.jmx0 jmx1=$id.jmx1 m0=$m0 m1=$m1 out_topic=$out state_topic=$st load=$(load | cut -d' ' -f1)"
  say "trickle round $r, $who: $(echo "$t1 - $t0" | bc | cut -c1-5) s, broker $(((b1 - b0 - j1 + j0) / 1000)) ms (JIT out)"
}
idle() {
  local r=$1 id=$work/t$1-idle b0 j0 t0 t1
  sleep 5
  jmx "$id.jmx0"
  b0=$(cpu_us "$broker") j0=$(jit_us "$broker") t0=$(now)
  sleep "$DURATION"
  t1=$(now)
  local b1 j1
  b1=$(cpu_us "$broker") j1=$(jit_us "$broker")
  jmx "$id.jmx1"
  rec "regime=trickle round=$r who=idle events=0 secs=$(echo "$t1 - $t0" | bc) startup_us=0 proc_us=0 proc_jit_us=0" \
    "broker_us=$((b1 - b0)) broker_jit_us=$((j1 - j0)) jmx0=$id.jmx0 jmx1=$id.jmx1 m0=none m1=none" \
    "out_topic=none state_topic=none load=$(load | cut -d' ' -f1)"
  say "idle round $r: broker $(((b1 - b0 - j1 + j0) / 1000)) ms over $DURATION s (JIT out)"
}

load_start=$(load)
say "run $run on 127.0.0.1:$PORT: $EVENTS-event backlog, $RATE events/s for $DURATION s, $ROUNDS rounds, $PARTITIONS partitions; guard threads ${LOOPGUARD__KAFKA__THREADS:-$(nproc)}, Streams threads $STREAMS_THREADS ($STREAMS_STORE store); load: $load_start"
TRICKLE=$((RATE * DURATION))
"$BIN" loadgen dump --events "$EVENTS" --sessions "$SESSIONS" >"$work/backlog.jsonl"
"$BIN" loadgen dump --events "$TRICKLE" --sessions "$SESSIONS" >"$work/trickle.jsonl"
head -n $((RATE * WARM)) "$work/backlog.jsonl" >"$work/warm.jsonl"
head -n 50000 "$work/backlog.jsonl" >"$work/warm-backlog.jsonl"

# ---- Warm-up: both processors at once on one topic, a trickle then a short backlog.
say "warming the broker up: $WARM s at $RATE events/s through both, then 50,000 events"
use_topics "$run-warm"
start_guard; wait_guard
start_anchor "$tag-streams"; wait_anchor "$tag-streams"
lg preload --file "$work/warm.jsonl" --rate "$RATE" >>"$work/warm.log" 2>&1
lg preload --file "$work/warm-backlog.jsonl" >>"$work/warm.log" 2>&1
lg drain --group "$tag" --timeout 300 >>"$work/warm.log"
lg drain --group "$tag-streams" --timeout 300 >>"$work/warm.log"
stop_guard; stop_anchor
say "warm; load: $(load)"

for r in $(seq "$ROUNDS"); do
  order="guard streams"
  ((r % 2)) || order="streams guard"
  use_topics "$run-r$r-b"
  lg preload --file "$work/backlog.jsonl" >>"$work/preload.log" 2>&1
  sleep 2
  for who in $order; do drain "$who" "$r"; done
  idle "$r"
  use_topics "$run-r$r-tl"
  trickle load "$r"
  for who in $order; do
    use_topics "$run-r$r-t$who"
    trickle "$who" "$r"
  done
  say "round $r done; load: $(load)"
done
load_end=$(load)

python3 - "$work/rows" "$load_start" "$load_end" "$RATE" "$DURATION" "$EVENTS" "$PARTITIONS" \
  "${LOOPGUARD__KAFKA__THREADS:-$(nproc)}" "$STREAMS_THREADS" "$STREAMS_STORE" <<'EOF' | tee "$work/summary.md"
import statistics, sys
rows_path, l0, l1, rate, duration, events, parts, gthreads, sthreads, store = sys.argv[1:]
rows = [dict(kv.split("=", 1) for kv in line.split()) for line in open(rows_path)]

def snap(path):
    d = {}
    if path == "none":
        return d
    for line in open(path):
        k, v = line.split()
        d[k] = int(v)
    return d

def delta(r, prefix=None):
    a, b = snap(r["jmx0"]), snap(r["jmx1"])
    return {k: b[k] - a.get(k, 0) for k in b if prefix is None or k.startswith(prefix)}

def own(path):
    """guard /metrics or anchor stats -> (outputs, markers, marker_bytes, own commits)"""
    if path == "none":
        return (0, 0, 0, 0)
    text = open(path).read()
    if text.startswith("processed="):
        kv = dict(x.split("=") for x in text.split())
        return (int(kv["outputs"]), 0, 0, int(kv["commits"]))
    out = markers = mbytes = commits = 0
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, val = line.rsplit(" ", 1)
        v = float(val)
        if name.startswith("loopguard_verdicts_total{"):
            out += v
        elif name == "loopguard_judged_markers_total":
            markers = v
        elif name == "loopguard_judged_marker_bytes_total":
            mbytes = v
        elif name == 'loopguard_transactions_total{outcome="commit"}':
            commits = v
    return (int(out), int(markers), int(mbytes), int(commits))

def figures(r):
    d = delta(r)
    o1, o0 = own(r["m1"]), own(r["m0"])
    o = [x - y for x, y in zip(o1, o0)]
    reqs = {k[4:]: v for k, v in d.items() if k.startswith("req.")}
    f = dict(r)
    f.update(secs=float(r["secs"]), events=int(r["events"]), proc=int(r["proc_us"]),
             proc_nojit=int(r["proc_us"]) - int(r["proc_jit_us"]),
             broker=int(r["broker_us"]) - int(r["broker_jit_us"]), broker_all=int(r["broker_us"]),
             outputs=o[0], markers=o[1], marker_bytes=o[2], own_commits=o[3],
             endtxn=reqs.get("EndTxn", 0), produce=reqs.get("Produce", 0), fetch=reqs.get("Fetch", 0),
             reqs=sum(reqs.values()), reqmap=reqs,
             out_bytes=d.get("bytes_in." + r["out_topic"], 0), out_msgs=d.get("msgs_in." + r["out_topic"], 0),
             state_bytes=d.get("bytes_in." + r["state_topic"], 0), state_msgs=d.get("msgs_in." + r["state_topic"], 0),
             internal_bytes=sum(v for k, v in d.items() if k.startswith("bytes_in.__")))
    return f

F = [figures(r) for r in rows]
med = statistics.median
def pick(regime, who):
    return [f for f in F if f["regime"] == regime and f["who"] == who]

out = []
p = out.append
p(f"Load average {l0} at the start, {l1} at the end. {events} events backlog; trickle {rate} events/s for "
  f"{duration} s; {parts} partitions; guard {gthreads} stream threads, Streams {sthreads} ({store} store).\n")

# Backlog.
B = {w: pick("backlog", w) for w in ("guard", "streams")}
T = {w: pick("trickle", w) for w in ("guard", "streams", "load", "idle")}
startup = {w: med([int(f["startup_us"]) for f in T[w]]) if T[w] else 0 for w in ("guard", "streams")}
def bfig(f, w):
    e = f["events"]
    return {
        "broker CPU per event (us, JIT out)": f["broker"] / e,
        "broker CPU per event (us, JIT in)": f["broker_all"] / e,
        "processor CPU per event (us, start-up in)": f["proc"] / e,
        "processor CPU per event (us, start-up out)": (f["proc"] - startup[w]) / e,
        "processor CPU per event (us, start-up in, its JIT compilers out)": f["proc_nojit"] / e,
        "drain rate, from the start (events/s)": e / f["secs"],
        "output records (verdicts)": f["outputs"],
        "judged-through markers": f["markers"],
        "transactions (EndTxn at the broker)": f["endtxn"],
        "transactions per second of drain": f["endtxn"] / f["secs"],
        "own commit count": f["own_commits"],
        "produce requests": f["produce"],
        "broker requests, all APIs": f["reqs"],
        "bytes to the output topic (KB)": f["out_bytes"] / 1024,
        "bytes to the state/changelog topic (KB)": f["state_bytes"] / 1024,
    }
# Trickle: above the idle broker and above the load alone, per round.
def tfig(f, w, r):
    idle = [x for x in T["idle"] if x["round"] == r][0]
    load = [x for x in T["load"] if x["round"] == r][0]
    e, s = f["events"], f["secs"]
    idle_rate, load_rate = idle["broker"] / idle["secs"], load["broker"] / load["secs"]
    lp = lambda k: load[k] / load["secs"]
    return {
        "broker CPU per event above idle (us)": (f["broker"] - idle_rate * s) / e,
        "broker CPU per event above the load alone (us)": (f["broker"] - load_rate * s) / e,
        "broker cores above idle": f["broker"] / s / 1e6 - idle_rate / 1e6,
        "processor CPU per event (us)": f["proc"] / e,
        "processor CPU per event (us, its JIT compilers out)": f["proc_nojit"] / e,
        "output records per s (verdicts)": f["outputs"] / s,
        "judged-through markers per s": f["markers"] / s,
        "transactions per s (EndTxn at the broker)": f["endtxn"] / s,
        "own commits per s": f["own_commits"] / s,
        "produce requests per s above the load alone": f["produce"] / s - lp("produce"),
        "fetch requests per s above the load alone": f["fetch"] / s - lp("fetch"),
        "broker requests per s above the load alone": f["reqs"] / s - lp("reqs"),
        "bytes per s to the output topic (KB)": f["out_bytes"] / s / 1024,
        "bytes per s to the state/changelog topic (KB)": f["state_bytes"] / s / 1024,
    }

def table(title, per):
    keys = list(next(iter(per["guard"])).keys()) if per["guard"] else []
    p(f"\n### {title}\n")
    p("| figure (median of rounds) | guard | Kafka Streams | guard / Streams |")
    p("| --- | ---: | ---: | ---: |")
    for k in keys:
        g = med([x[k] for x in per["guard"]]); s = med([x[k] for x in per["streams"]])
        ratio = f"{g / s:.2f}" if s else "-"
        fmt = (lambda v: f"{v:,.0f}") if abs(g) >= 100 or abs(s) >= 100 else (lambda v: f"{v:.2f}")
        p(f"| {k} | {fmt(g)} | {fmt(s)} | {ratio} |")

table("Backlog drain", {w: [bfig(f, w) for f in B[w]] for w in ("guard", "streams")})
p(f"\nStart-up CPU (process start to ready on empty topics, trickle rounds, median): guard "
  f"{startup['guard'] / 1e6:.2f} s, Streams {startup['streams'] / 1e6:.2f} s.")
table(f"Steady trickle, {rate} events/s", {w: [tfig(f, w, f["round"]) for f in T[w]] for w in ("guard", "streams")})
idle_c = med([x["broker"] / x["secs"] / 1e6 for x in T["idle"]])
load_c = med([x["broker"] / x["secs"] / 1e6 - [i for i in T["idle"] if i["round"] == x["round"]][0]["broker"] / x["secs"] / 1e6 for x in T["load"]])
p(f"\nIdle broker: {idle_c:.3f} cores (JIT out); the load alone adds {load_c:.3f} cores "
  f"({med([x['produce'] / x['secs'] for x in T['load']]):.0f} produce requests/s).")

p("\n### Per round\n")
p("| regime | round | processor | broker cores (JIT out) | broker us/event (JIT out) | processor us/event | records | markers | EndTxn | own commits | secs | load |")
p("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for f in F:
    e = f["events"]
    per = (lambda v: f"{v / e:.2f}") if e else (lambda v: "-")
    p(f"| {f['regime']} | {f['round']} | {f['who']} | {f['broker'] / f['secs'] / 1e6:.3f} | {per(f['broker'])} "
      f"| {per(f['proc'])} | {f['outputs']} | {f['markers']} | {f['endtxn']} | {f['own_commits']} | {f['secs']:.1f} | {f['load']} |")

p("\n### Broker requests per second in the trickle, by API (median; the load alone's included)\n")
apis = sorted({k for w in ("load", "guard", "streams") for f in T[w] for k in f["reqmap"]})
p("| API | idle | load alone | guard | Kafka Streams |")
p("| --- | ---: | ---: | ---: | ---: |")
for a in apis:
    vals = [med([f["reqmap"].get(a, 0) / f["secs"] for f in T[w]]) for w in ("idle", "load", "guard", "streams")]
    if max(vals) >= 0.05:
        p(f"| {a} | " + " | ".join(f"{v:.1f}" for v in vals) + " |")
print("\n".join(out))
EOF
# The event files are large (~290 bytes an event).
rm -f "$work"/*.jsonl
rm -rf "$work/streams-state"
say "logs and raw figures in $work; load: $(load)"
