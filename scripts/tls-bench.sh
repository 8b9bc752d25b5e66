#!/usr/bin/env bash
# What TLS and SASL cost (issue 31): the same backlog of fleet events drained by a fresh
# `loopguard serve` from a plaintext broker and from a SASL_SSL one (PLAIN over TLS: docs/
# decisions.md (gg); StandardAuthorizer; the guard logs in as the broker's super user, so the ACL table is not
# what is measured), each broker of its own started here, rounds alternating. Per round: the
# drain's events/s, the guard's CPU per event (user + system from /proc, from its start to
# the end of its drain, start-up included) and the broker's over the same span, its JIT
# compiler threads taken out. A Markdown table with the medians, and the load average.
#
#   scripts/tls-bench.sh [BIN]
# Env: EVENTS (100000), SESSIONS (3000), PARTITIONS (4), ROUNDS (3), WARM (30 s: each broker
#      is warmed up by one untimed drain first), PORT (first free from 19500).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=$(realpath "${1:-target/release/loopguard}")
EVENTS=${EVENTS:-100000} SESSIONS=${SESSIONS:-3000} PARTITIONS=${PARTITIONS:-4} ROUNDS=${ROUNDS:-3}
run=tls-$(date +%s)-$$
work=build/bench/$run
mkdir -p "$work"
say() { echo "tls-bench: $*" >&2; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_triple() {
  local p=$1
  while port_open "$p" || port_open $((p + 1)) || port_open $((p + 2)); do p=$((p + 3)); done
  echo "$p"
}
. scripts/lib/proc_cpu.sh
plain_port=$(free_triple "${PORT:-19500}")
secured_port=$(free_triple $((plain_port + 3)))
guard=
cleanup() {
  [ -n "$guard" ] && kill -9 "$guard" 2>/dev/null || true
  scripts/kafka.sh stop "$plain_port" >/dev/null 2>&1 || true
  scripts/kafka.sh stop "$secured_port" >/dev/null 2>&1 || true
}
trap cleanup EXIT
scripts/kafka.sh start "$plain_port" >/dev/null
eval "$(scripts/kafka.sh start-secured "$secured_port")"
admin=$(dirname "$KAFKA_SECURED_ENV")/clients/admin.plain.properties

# The librdkafka properties of MODE's broker: none, or the admin's SASL_SSL file.
props() {
  [ "$1" = secured ] || return 0
  grep -v '^bootstrap.servers=' "$admin"
}
port_of() { if [ "$1" = secured ]; then echo "$secured_port"; else echo "$plain_port"; fi; }

"$BIN" loadgen dump --events "$EVENTS" --sessions "$SESSIONS" >"$work/fleet.jsonl"

# One drain: fresh topics, the backlog preloaded with no guard, then a guard started and
# timed until its group committed the end of the events topic. Prints
# "events/s guard_us broker_us".
drain() {
  local mode=$1 tag=$2 port
  port=$(port_of "$mode")
  local cfg=$work/$tag.toml
  {
    echo "[kafka]"
    echo "bootstrap_servers = \"127.0.0.1:$port\""
    for k in events verdicts dlq state policy; do echo "${k}_topic = \"$tag-$k\""; done
    echo "group_id = \"$tag\""
    echo "transactional_id_prefix = \"$tag\""
    echo "[kafka.properties]"
    props "$mode" | sed -E 's/^([^=]+)=(.*)$/"\1" = "\2"/'
    echo "[admin]"
    echo "listen = \"127.0.0.1:$((port + 50))\""
  } >"$cfg"
  local lg_props=()
  while IFS= read -r p; do lg_props+=(--property "$p"); done < <(props "$mode")
  lg() {
    "$BIN" loadgen --bootstrap-servers "127.0.0.1:$port" --events-topic "$tag-events" \
      --verdicts-topic "$tag-verdicts" "${lg_props[@]}" "$@"
  }
  "$BIN" topics create --config "$cfg" --partitions "$PARTITIONS" >/dev/null
  lg preload --file "$work/fleet.jsonl" >>"$work/load.log" 2>&1
  sleep 1
  local broker b0 j0 t0
  broker=$(cat "build/kafka/run-$port/kafka.pid")
  b0=$(cpu_us "$broker") j0=$(jit_us "$broker") t0=$(date +%s.%N)
  RUST_LOG=info,rdkafka=warn "$BIN" serve --config "$cfg" >"$work/$tag.serve.log" 2>&1 &
  guard=$!
  lg drain --group "$tag" >>"$work/load.log" 2>&1
  local secs guard_us broker_us
  secs=$(echo "$(date +%s.%N) - $t0" | bc)
  guard_us=$(cpu_us "$guard")
  broker_us=$(($(cpu_us "$broker") - b0 - ($(jit_us "$broker") - j0)))
  kill -TERM "$guard"; wait "$guard" || true; guard=
  echo "$(echo "$EVENTS / $secs" | bc) $((guard_us / (EVENTS / 1000))) $((broker_us / (EVENTS / 1000)))"
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
say "warming both brokers up (one untimed drain each)"
drain plain "$run-warm-plain" >/dev/null
drain secured "$run-warm-secured" >/dev/null
: >"$work/rounds"
for r in $(seq "$ROUNDS"); do
  for mode in plain secured; do
    line=$(drain "$mode" "$run-r$r-$mode")
    say "round $r, $mode: $line (events/s, guard us per 1000 events, broker us per 1000 events)"
    echo "$mode $line" >>"$work/rounds"
  done
done
python3 - "$work/rounds" "$EVENTS" "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for mode in ("plain", "secured"):
    r = [list(map(int, x[1:])) for x in rows if x[0] == mode]
    med[mode] = [statistics.median(c) for c in zip(*r)]
print(f"{int(sys.argv[2]):,} events, {len(rows)//2} rounds each; load average {sys.argv[3]} before, {sys.argv[4]} after\n")
print("| broker | events/s (median) | guard CPU per event | broker CPU per event |")
print("|---|---:|---:|---:|")
for mode, label in (("plain", "PLAINTEXT"), ("secured", "SASL_SSL (PLAIN over TLS), authorizer on")):
    e, g, b = med[mode]
    print(f"| {label} | {e:,.0f} | {g / 1000:.1f} us | {b / 1000:.1f} us |")
p, s = med["plain"], med["secured"]
print(f"| ratio secured / plain | {s[0] / p[0]:.2f} | {s[1] / p[1]:.2f} | {s[2] / p[2]:.2f} |")
EOF
