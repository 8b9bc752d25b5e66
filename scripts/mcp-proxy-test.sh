#!/usr/bin/env bash
# The MCP proxy's suite (tests/mcp): the official MCP Python SDK's client and a small server
# built on the same SDK, through `loopguard mcp-proxy`, against the real broker at
# KAFKA_BOOTSTRAP_SERVERS and a real `loopguard serve` and `loopguard edge` that the suite
# starts. Installs the SDK (pinned) in a venv under build/.
#
#   KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092 scripts/mcp-proxy-test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${KAFKA_BOOTSTRAP_SERVERS:?set KAFKA_BOOTSTRAP_SERVERS (scripts/test.sh starts a broker)}"
export KAFKA_BOOTSTRAP_SERVERS
export LOOPGUARD_BIN="${LOOPGUARD_BIN:-$PWD/target/debug/loopguard}"
[ -x "$LOOPGUARD_BIN" ] || cargo build --locked -q
venv=build/mcp-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "mcp==2.3.0" "pytest>=8,<9"
(cd tests/mcp && "../../$venv/bin/python" -m pytest -q -p no:cacheprovider)
