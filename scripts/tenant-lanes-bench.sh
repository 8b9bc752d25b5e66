#!/usr/bin/env bash
# What each tenant's own events topic costs an idle guard (issue 44, decision (gs)): one
# `loopguard serve` with tenants from the writer and N tenants' topics on the broker, for
# each N of LANES; after it is ready and WARMUP s more, the guard's and the broker's CPU
# (from /proc, ticks) over SECS s with no events, the guard's RSS and threads, and how long
# it took to be ready. One run each, in one go, so the figures compare (docs/benchmarks.md).
#
#   KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092 scripts/tenant-lanes-bench.sh [BIN]
# Env: LANES ("0 10 30"), PARTITIONS (4), SECS (30), WARMUP (10), BROKER_PID (found from
#      the broker's port otherwise).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=$(realpath "${1:-target/debug/loopguard}")
: "${KAFKA_BOOTSTRAP_SERVERS:?a running broker (scripts/kafka.sh start PORT prints it)}"
port=${KAFKA_BOOTSTRAP_SERVERS##*:}
broker=${BROKER_PID:-$(pgrep -f "run-$port" | head -n 1)}
[ -n "$broker" ] || { echo "no broker process for port $port (set BROKER_PID)" >&2; exit 1; }
work=$(mktemp -d)
trap 'kill "${guard:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "| tenant topics | ready after (s) | guard CPU (% of a core) | broker CPU (% of a core) | guard RSS (MiB) | guard threads |"
echo "|---|---|---|---|---|---|"
for n in ${LANES:-0 10 30}; do
  name="lanes-$n-$$"
  admin=127.0.0.1:$((20000 + RANDOM % 20000))
  cat >"$work/$name.toml" <<EOF
[kafka]
bootstrap_servers = "$KAFKA_BOOTSTRAP_SERVERS"
group_id = "$name"
events_topic = "$name-events"
verdicts_topic = "$name-verdicts"
dlq_topic = "$name-dlq"
state_topic = "$name-state"
policy_topic = "$name-policy"
events_topic_template = "$name-events.{tenant}"
verdicts_topic_template = "$name-verdicts.{tenant}"
threads = 1
[admin]
listen = "$admin"
EOF
  tenants=()
  for i in $(seq 1 "$n"); do tenants+=(--tenant "t$i"); done
  "$BIN" topics create --config "$work/$name.toml" --partitions "${PARTITIONS:-4}" "${tenants[@]}" >/dev/null
  t0=$(date +%s.%N)
  "$BIN" serve --config "$work/$name.toml" >"$work/$name.log" 2>&1 &
  guard=$!
  until [ "$(curl -s -o /dev/null -w '%{http_code}' "$admin/readyz")" = 200 ]; do
    kill -0 "$guard" 2>/dev/null || { tail -n 5 "$work/$name.log" >&2; exit 1; }
    sleep 0.2
  done
  ready=$(echo "$(date +%s.%N) - $t0" | bc)
  sleep "${WARMUP:-10}"
  g0=$(ticks "$guard") b0=$(ticks "$broker")
  sleep "${SECS:-30}"
  g1=$(ticks "$guard") b1=$(ticks "$broker")
  rss=$(awk '$1 == "VmRSS:" {print int($2 / 1024)}' "/proc/$guard/status")
  threads=$(awk '$1 == "Threads:" {print $2}' "/proc/$guard/status")
  kill -TERM "$guard"
  wait "$guard" 2>/dev/null || true
  guard=
  secs=${SECS:-30}
  printf '| %s | %.1f | %.1f | %.1f | %s | %s |\n' "$n" "$ready" \
    "$(echo "($g1 - $g0) * 100 / $hz / $secs" | bc -l)" "$(echo "($b1 - $b0) * 100 / $hz / $secs" | bc -l)" \
    "$rss" "$threads"
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
