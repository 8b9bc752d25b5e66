#!/usr/bin/env bash
# The alert rules on a live stack: a real Prometheus server (Debian's `prometheus` package,
# the binary run directly with its own data dir and port on 127.0.0.1) with
# deploy/prometheus/loopguard-alerts.yaml, scraping a real `loopguard serve` on the broker at
# KAFKA_BOOTSTRAP_SERVERS; traffic through Kafka with the Python client
# (deploy/prometheus/live/test_loop_spike_alert.py says what is asserted).
#
#   KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092 scripts/alerts-live-test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${KAFKA_BOOTSTRAP_SERVERS:?set KAFKA_BOOTSTRAP_SERVERS (scripts/test.sh starts a broker)}"
export KAFKA_BOOTSTRAP_SERVERS
export LOOPGUARD_BIN="${LOOPGUARD_BIN:-$PWD/target/debug/loopguard}"
[ -x "$LOOPGUARD_BIN" ] || cargo build --locked -q

if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
fi
prometheus --version 2>&1 | head -n1

venv=build/pyclient-alerts
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "./clients/python[test]"
"$venv/bin/python" -m pytest -q -p no:cacheprovider deploy/prometheus/live
