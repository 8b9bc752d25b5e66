#!/usr/bin/env bash
# Runs every test of loopguard: unit, rule, golden, property and metric-name tests, the
# integration tests against a real Apache Kafka broker (started here unless
# KAFKA_BOOTSTRAP_SERVERS is set), and the deployment checks (promtool, helm).
#
#   scripts/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  echo "== starting a real Kafka broker (KRaft, 127.0.0.1)"
  eval "$(scripts/kafka.sh start)"
  trap 'scripts/kafka.sh stop >/dev/null 2>&1 || true' EXIT
fi
export KAFKA_BOOTSTRAP_SERVERS
# Fail, never skip, when the broker is missing.
export LOOPGUARD_REQUIRE_KAFKA=1

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== all cargo tests (unit, rules, golden, properties, real data, metric names, Kafka at $KAFKA_BOOTSTRAP_SERVERS)"
cargo test --locked

echo "== deployment checks"
scripts/deploy-checks.sh
