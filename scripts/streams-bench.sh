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
# rotating from round to round (a GUARD_VARIANT guard drains its own copy of the backlog):
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
#   scripts/streams-bench.sh --summary build/bench/<run>   (the tables again, from its files)
# Env: PORT (first free pair from 19400), EVENTS (200000), SESSIONS (3000), PARTITIONS (4),
#      ROUNDS (3), RATE (1000), DURATION (40 s), WARM (60 s), ADMIN_PORT (first free from
#      19464), KAFKA_VERSION (4.1.2), STREAMS_THREADS (1: Streams' default),
#      STREAMS_STORE (rocksdb or memory), STREAMS_JVM_OPTS (-Xms256m -Xmx1g),
#      REGIMES ("backlog trickle": either or both), GUARD_VARIANT (empty; e.g.
#      "LOOPGUARD__KAFKA__THREADS=1": a third processor, the guard with these settings in
#      its environment, measured in the same rounds: what a setting changes against the
#      same Streams figures), and any LOOPGUARD__* setting for the guard itself.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=$(realpath "${1:-target/release/loopguard}" 2>/dev/null || echo "${1:-}")
EVENTS=${EVENTS:-200000} SESSIONS=${SESSIONS:-3000} PARTITIONS=${PARTITIONS:-4}
ROUNDS=${ROUNDS:-3} RATE=${RATE:-1000} DURATION=${DURATION:-40} WARM=${WARM:-60}
STREAMS_THREADS=${STREAMS_THREADS:-1} STREAMS_STORE=${STREAMS_STORE:-rocksdb}
STREAMS_JVM_OPTS=${STREAMS_JVM_OPTS:--Xms256m -Xmx1g}
REGIMES=${REGIMES:-backlog trickle} GUARD_VARIANT=${GUARD_VARIANT:-}
export KAFKA_VERSION=${KAFKA_VERSION:-4.1.2}
run=anchor-$(date +%s)-$$
work=build/bench/$run
say() { echo "streams-bench: $(date +%T) $*" >&2; }
die() { say "FAILED: $*"; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
. scripts/lib/ports.sh # port_open, free_port
# summary DIR: the Markdown tables of a run's raw figures (DIR/rows, DIR/params).
summary() {
  python3 - "$1" <<'EOF'
import os, statistics, sys
work = sys.argv[1]
l0, l1, rate, duration, events, parts, gthreads, sthreads, store, variant = open(os.path.join(work, "params")).read().splitlines()
rows = [dict(kv.split("=", 1) for kv in line.split()) for line in open(os.path.join(work, "rows"))]

def snap(path):
    d = {}
    if path != "none":
        for line in open(path):
            k, v = line.split()
            d[k] = int(v)
    return d

def own(path):
    """(output records, markers, marker bytes, own commit count) from the guard's /metrics
    or the anchor's stats"""
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
    a, b = snap(r["jmx0"]), snap(r["jmx1"])
    d = {k: b[k] - a.get(k, 0) for k in b}
    o = [x - y for x, y in zip(own(r["m1"]), own(r["m0"]))]
    # FetchConsumer and FetchFollower are Fetch counted again by its origin.
    reqs = {k[4:]: v for k, v in d.items() if k.startswith("req.") and k not in ("req.FetchConsumer", "req.FetchFollower")}
    f = dict(r)
    f.update(secs=float(r["secs"]), events=int(r["events"]), proc=int(r["proc_us"]),
             proc_nojit=int(r["proc_us"]) - int(r["proc_jit_us"]),
             broker=int(r["broker_us"]) - int(r["broker_jit_us"]), broker_all=int(r["broker_us"]),
             outputs=o[0], markers=o[1], marker_bytes=o[2], own_commits=o[3],
             endtxn=reqs.get("EndTxn", 0), produce=reqs.get("Produce", 0), fetch=reqs.get("Fetch", 0),
             reqs=sum(reqs.values()), reqmap=reqs,
             out_bytes=d.get("bytes_in." + r["out_topic"], 0), state_bytes=d.get("bytes_in." + r["state_topic"], 0))
    return f

F = [figures(r) for r in rows]
med = statistics.median
procs = ["guard", "streams"] + (["variant"] if variant != "-" else [])
names = {"guard": "guard", "streams": "Kafka Streams", "variant": "guard variant"}
def pick(regime, who):
    return [f for f in F if f["regime"] == regime and f["who"] == who]
B = {w: pick("backlog", w) for w in procs}
T = {w: pick("trickle", w) for w in procs + ["load", "idle"]}
startup = {w: med([int(f["startup_us"]) for f in T[w]]) if T[w] else 0 for w in procs}

def bfig(f):
    e, w = f["events"], f["who"]
    fig = {
        "broker CPU per event (us, its JIT compilers out)": f["broker"] / e,
        "broker CPU per event (us, JIT in)": f["broker_all"] / e,
        "processor CPU per event (us, start-up in)": f["proc"] / e,
    }
    if all(T[x] for x in procs):  # start-up CPU is measured in the trickle rounds
        fig["processor CPU per event (us, start-up out)"] = (f["proc"] - startup[w]) / e
    fig.update({
        "processor CPU per event (us, start-up in, its JIT compilers out)": f["proc_nojit"] / e,
        "drain rate from its start (events/s)": e / f["secs"],
        "output records (verdicts)": f["outputs"],
        "judged-through markers": f["markers"],
        "transactions (EndTxn requests at the broker)": f["endtxn"],
        "transactions per second of drain": f["endtxn"] / f["secs"],
        "own commit count": f["own_commits"],
        "produce requests": f["produce"],
        "broker requests, all APIs": f["reqs"],
        "KB produced to the output topic": f["out_bytes"] / 1024,
        "KB produced to the state/changelog topic": f["state_bytes"] / 1024,
    })
    return fig

def tfig(f):
    r = f["round"]
    idle = [x for x in T["idle"] if x["round"] == r][0]
    load = [x for x in T["load"] if x["round"] == r][0]
    e, s = f["events"], f["secs"]
    idle_rate, load_rate = idle["broker"] / idle["secs"], load["broker"] / load["secs"]
    lp = lambda k: load[k] / load["secs"]
    return {
        "broker CPU per event above the idle broker (us)": (f["broker"] - idle_rate * s) / e,
        "broker CPU per event above the load alone (us)": (f["broker"] - load_rate * s) / e,
        "broker cores above the idle broker": (f["broker"] / s - idle_rate) / 1e6,
        "processor CPU per event (us)": f["proc"] / e,
        "processor CPU per event (us, its JIT compilers out)": f["proc_nojit"] / e,
        "output records per s (verdicts)": f["outputs"] / s,
        "judged-through markers per s": f["markers"] / s,
        "transactions per s (EndTxn requests at the broker)": f["endtxn"] / s,
        "own commits per s": f["own_commits"] / s,
        "produce requests per s above the load alone": f["produce"] / s - lp("produce"),
        "fetch requests per s": f["fetch"] / s,
        "broker requests per s above the load alone": f["reqs"] / s - lp("reqs"),
        "KB/s produced to the output topic": f["out_bytes"] / s / 1024,
        "KB/s produced to the state/changelog topic": f["state_bytes"] / s / 1024,
    }

out = []
p = out.append
p(f"Load average {l0} at the start, {l1} at the end. Backlog {int(events):,} events; trickle {rate} events/s "
  f"for {duration} s; {parts} partitions; guard {gthreads} stream threads, Kafka Streams {sthreads} "
  f"({store} store)" + (f"; guard variant: `{variant}`" if variant != "-" else "") + ".")

def table(title, per):
    if not all(per[w] for w in procs):
        return
    keys = list(per["guard"][0].keys())
    p(f"\n### {title}\n")
    head = "| figure (median of rounds) | guard | Kafka Streams | guard / Streams |"
    line = "| --- | ---: | ---: | ---: |"
    if "variant" in procs:
        head += " guard variant | variant / Streams |"
        line += " ---: | ---: |"
    p(head)
    p(line)
    def fmt(v, big):
        return f"{v:,.0f}" if big else f"{v:.2f}"
    for k in keys:
        m = {w: med([x[k] for x in per[w]]) for w in procs}
        big = max(abs(v) for v in m.values()) >= 100
        ratio = lambda w: f"{m[w] / m['streams']:.2f}" if m["streams"] else "-"
        row = f"| {k} | {fmt(m['guard'], big)} | {fmt(m['streams'], big)} | {ratio('guard')} |"
        if "variant" in procs:
            row += f" {fmt(m['variant'], big)} | {ratio('variant')} |"
        p(row)

table("Backlog drain", {w: [bfig(f) for f in B[w]] for w in procs})
if all(T[w] for w in procs):
    p(f"\nStart-up CPU (process start to ready on empty topics, median of the trickle rounds): "
      + ", ".join(f"{names[w]} {startup[w] / 1e6:.2f} s" for w in procs) + ".")
    table(f"Steady trickle, {rate} events/s", {w: [tfig(f) for f in T[w]] for w in procs})
    idle_c = med([x["broker"] / x["secs"] / 1e6 for x in T["idle"]])
    load_c = med([x["broker"] / x["secs"] / 1e6 - [i for i in T["idle"] if i["round"] == x["round"]][0]["broker"]
                  / [i for i in T["idle"] if i["round"] == x["round"]][0]["secs"] / 1e6 for x in T["load"]])
    p(f"\nIdle broker: {idle_c:.3f} cores (its JIT compilers out); the load alone adds {load_c:.3f} cores "
      f"({med([x['produce'] / x['secs'] for x in T['load']]):.0f} produce requests/s).")

p("\n### Per round\n")
p("| regime | round | processor | broker cores (JIT out) | broker us/event (JIT out) | processor us/event | records | markers | EndTxn | own commits | secs | load |")
p("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for f in F:
    e = f["events"]
    per = (lambda v: f"{v / e:.2f}") if e else (lambda v: "-")
    p(f"| {f['regime']} | {f['round']} | {f['who']} | {f['broker'] / f['secs'] / 1e6:.3f} | {per(f['broker'])} "
      f"| {per(f['proc']) if f['who'] not in ('idle', 'load') else '-'} | {f['outputs']} | {f['markers']} "
      f"| {f['endtxn']} | {f['own_commits']} | {f['secs']:.1f} | {f['load']} |")

cols = ["idle", "load"] + procs
if all(T[w] for w in cols):
    p("\n### Broker requests per second in the trickle, by API (median; the load's own included)\n")
    p("| API | idle | load alone | " + " | ".join(names[w] for w in procs) + " |")
    p("| --- |" + " ---: |" * len(cols))
    for a in sorted({k for w in cols for f in T[w] for k in f["reqmap"]}):
        vals = [med([f["reqmap"].get(a, 0) / f["secs"] for f in T[w]]) for w in cols]
        if max(vals) >= 0.05:
            p(f"| {a} | " + " | ".join(f"{v:.1f}" for v in vals) + " |")
print("\n".join(out))
EOF
}
if [ "${1:-}" = --summary ]; then summary "$2"; exit 0; fi
mkdir -p "$work"
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

# The guard on the current topics: the default one (WHO guard) or, for WHO variant, with
# the assignments of GUARD_VARIANT in its environment.
start_guard() {
  local who=${1:-guard}
  if [ "$who" = variant ]; then
    # shellcheck disable=SC2086 # GUARD_VARIANT is a list of VAR=VALUE words
    RUST_LOG=${RUST_LOG:-info,rdkafka=warn} env $GUARD_VARIANT "$BIN" serve >"$work/$tag.serve.log" 2>&1 &
  else
    RUST_LOG=${RUST_LOG:-info,rdkafka=warn} "$BIN" serve >"$work/$tag.serve.log" 2>&1 &
  fi
  guard=$!
}
# Until every stream thread has its partitions and the guard says ready.
wait_guard() {
  local who=${1:-guard} threads=${LOOPGUARD__KAFKA__THREADS:-$(nproc)} n
  if [ "$who" = variant ]; then
    n=$(sed -n 's/.*LOOPGUARD__KAFKA__THREADS=\([0-9]*\).*/\1/p' <<<"$GUARD_VARIANT")
    threads=${n:-$threads}
  fi
  [ "$threads" = 0 ] && threads=$(nproc)
  [ "$threads" -gt "$PARTITIONS" ] && threads=$PARTITIONS
  for _ in $(seq 600); do
    n=$(grep -c 'assignment restored' "$work/$tag.serve.log" 2>/dev/null) || n=0
    if [ "$n" -ge "$threads" ] && curl -fs "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1; then
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
    grep -q 'anchor: state RUNNING' "$work/$1.log" 2>/dev/null && [ -s "$work/$1.stats" ] && return 0
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

# WHO's consumer group, output topic and state topic on the current topics.
group_of() { if [ "$1" = streams ]; then echo "$tag-streams"; else echo "$tag"; fi; }
topics_of() {
  if [ "$1" = streams ]; then echo "$tag-anchor $tag-streams-sessions-changelog"; else echo "$tag-verdicts $tag-state"; fi
}
# Starts WHO (guard, variant or streams) on the current topics: its pid in $pid.
start_proc() {
  if [ "$1" = streams ]; then start_anchor "$tag-streams"; pid=$anchor; else start_guard "$1"; pid=$guard; fi
}
wait_proc() { if [ "$1" = streams ]; then wait_anchor "$tag-streams"; else wait_guard "$1"; fi; }
# Its counters (the guard's /metrics, the anchor's stats) to FILE.
counters() { if [ "$1" = streams ]; then anchor_stats "$tag-streams" "$2"; else guard_metrics "$2"; fi; }
stop_proc() { if [ "$1" = streams ]; then stop_anchor; else stop_guard; fi; }

# One line of raw figures per measurement, key=value, for the summary.
rec() { echo "$*" >>"$work/rows"; }

# ---- Backlog: WHO drains the preloaded topic $tag-events, timed from its start.
drain() {
  local who=$1 r=$2 id=$work/b$2-$1 pid b0 j0 t0 t1 b1 j1 p pj out st
  jmx "$id.jmx0"
  b0=$(cpu_us "$broker") j0=$(jit_us "$broker") t0=$(now)
  start_proc "$who"
  lg drain --group "$(group_of "$who")" --timeout 900 >>"$work/drain.log"
  t1=$(now)
  p=$(cpu_us "$pid") pj=$(jit_us "$pid")
  b1=$(cpu_us "$broker") j1=$(jit_us "$broker")
  jmx "$id.jmx1"
  counters "$who" "$id.m1"
  stop_proc "$who"
  read -r out st < <(topics_of "$who")
  rec "regime=backlog round=$r who=$who events=$EVENTS secs=$(echo "$t1 - $t0" | bc) startup_us=0" \
    "proc_us=$p proc_jit_us=$pj broker_us=$((b1 - b0)) broker_jit_us=$((j1 - j0))" \
    "jmx0=$id.jmx0 jmx1=$id.jmx1 m0=none m1=$id.m1 out_topic=$out state_topic=$st load=$(load | cut -d' ' -f1)"
  say "backlog round $r, $who: $(echo "$t1 - $t0" | bc | cut -c1-5) s, broker $(((b1 - b0 - j1 + j0) / 1000)) ms (JIT out)"
}

# ---- Trickle: RATE events/s for DURATION s through WHO, started and ready before (or
# through nothing: WHO load).
trickle() {
  local who=$1 r=$2 id=$work/t$2-$1 pid=0 ps=0 b0 j0 t0 t1 b1 j1 p0=0 pj0=0 p1=0 pj1=0
  local out=none st=none m0=none m1=none
  if [ "$who" != load ]; then
    start_proc "$who"; wait_proc "$who"; ps=$(cpu_us "$pid")
  fi
  sleep 5 # the group settled, the start-up's requests passed
  jmx "$id.jmx0"
  if [ "$who" != load ]; then
    m0=$id.m0 m1=$id.m1
    counters "$who" "$m0"
    read -r out st < <(topics_of "$who")
    p0=$(cpu_us "$pid") pj0=$(jit_us "$pid")
  fi
  b0=$(cpu_us "$broker") j0=$(jit_us "$broker") t0=$(now)
  lg preload --file "$work/trickle.jsonl" --rate "$RATE" >>"$work/trickle.log" 2>&1
  [ "$who" = load ] || lg drain --group "$(group_of "$who")" --timeout 120 >>"$work/trickle.log"
  t1=$(now)
  b1=$(cpu_us "$broker") j1=$(jit_us "$broker")
  [ "$who" = load ] || p1=$(cpu_us "$pid") pj1=$(jit_us "$pid")
  jmx "$id.jmx1"
  if [ "$who" != load ]; then counters "$who" "$m1"; stop_proc "$who"; fi
  rec "regime=trickle round=$r who=$who events=$TRICKLE secs=$(echo "$t1 - $t0" | bc) startup_us=$ps" \
    "proc_us=$((p1 - p0)) proc_jit_us=$((pj1 - pj0)) broker_us=$((b1 - b0)) broker_jit_us=$((j1 - j0))" \
    "jmx0=$id.jmx0 jmx1=$id.jmx1 m0=$m0 m1=$m1 out_topic=$out state_topic=$st load=$(load | cut -d' ' -f1)"
  say "trickle round $r, $who: $(echo "$t1 - $t0" | bc | cut -c1-5) s, broker $(((b1 - b0 - j1 + j0) / 1000)) ms (JIT out)"
}
idle() {
  local r=$1 id=$work/t$1-idle b0 j0 t0 t1 b1 j1
  sleep 5
  jmx "$id.jmx0"
  b0=$(cpu_us "$broker") j0=$(jit_us "$broker") t0=$(now)
  sleep "$DURATION"
  t1=$(now)
  b1=$(cpu_us "$broker") j1=$(jit_us "$broker")
  jmx "$id.jmx1"
  rec "regime=trickle round=$r who=idle events=0 secs=$(echo "$t1 - $t0" | bc) startup_us=0 proc_us=0 proc_jit_us=0" \
    "broker_us=$((b1 - b0)) broker_jit_us=$((j1 - j0)) jmx0=$id.jmx0 jmx1=$id.jmx1 m0=none m1=none" \
    "out_topic=none state_topic=none load=$(load | cut -d' ' -f1)"
  say "idle round $r: broker $(((b1 - b0 - j1 + j0) / 1000)) ms over $DURATION s (JIT out)"
}

procs="guard streams"
[ -z "$GUARD_VARIANT" ] || procs="guard streams variant"
gthreads=${LOOPGUARD__KAFKA__THREADS:-$(nproc)}
load_start=$(load)
say "run $run on 127.0.0.1:$PORT: regimes $REGIMES; $EVENTS-event backlog, $RATE events/s for $DURATION s, $ROUNDS rounds, $PARTITIONS partitions; guard threads $gthreads${GUARD_VARIANT:+, variant: $GUARD_VARIANT}, Streams threads $STREAMS_THREADS ($STREAMS_STORE store); load: $load_start"
TRICKLE=$((RATE * DURATION))
"$BIN" loadgen dump --events "$EVENTS" --sessions "$SESSIONS" >"$work/backlog.jsonl"
"$BIN" loadgen dump --events "$TRICKLE" --sessions "$SESSIONS" >"$work/trickle.jsonl"
head -n $((RATE * WARM)) "$work/backlog.jsonl" >"$work/warm.jsonl"
head -n 50000 "$work/backlog.jsonl" >"$work/warm-backlog.jsonl"
: >"$work/rows"

# ---- Warm-up: the guard and the anchor at once on one topic, a trickle then a backlog.
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
  # The processors' order rotates from round to round.
  read -ra order <<<"$procs"
  k=$(((r - 1) % ${#order[@]}))
  order=("${order[@]:k}" "${order[@]:0:k}")
  if [[ " $REGIMES " == *" backlog "* ]]; then
    # The guard and the anchor drain one preloaded topic (their own groups); the variant,
    # a guard too, its own copy (a guard's group, transactional ids and state topic are
    # named after its topics).
    for t in b ${GUARD_VARIANT:+bv}; do
      use_topics "$run-r$r-$t"
      lg preload --file "$work/backlog.jsonl" >>"$work/preload.log" 2>&1
    done
    sleep 2
    for who in "${order[@]}"; do
      if [ "$who" = variant ]; then use_topics "$run-r$r-bv"; else use_topics "$run-r$r-b"; fi
      drain "$who" "$r"
    done
  fi
  if [[ " $REGIMES " == *" trickle "* ]]; then
    idle "$r"
    use_topics "$run-r$r-tl"
    trickle load "$r"
    for who in "${order[@]}"; do
      use_topics "$run-r$r-t$who"
      trickle "$who" "$r"
    done
  fi
  say "round $r done; load: $(load)"
done
load_end=$(load)
printf '%s\n' "$load_start" "$load_end" "$RATE" "$DURATION" "$EVENTS" "$PARTITIONS" "$gthreads" \
  "$STREAMS_THREADS" "$STREAMS_STORE" "${GUARD_VARIANT:--}" >"$work/params"
summary "$work" | tee "$work/summary.md"
# The event files are large (~290 bytes an event).
rm -f "$work"/*.jsonl
rm -rf "$work/streams-state"
say "logs and raw figures in $work; load: $(load)"
