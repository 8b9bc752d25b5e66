#!/usr/bin/env bash
# The client libraries' test suites (clients/python, clients/typescript) against the real
# broker at KAFKA_BOOTSTRAP_SERVERS and real `loopguard serve` processes that the suites
# start and stop themselves. Installs what they need: a venv per tested confluent-kafka
# version under build/, `npm ci` for the TypeScript client. Event-to-verdict latencies as
# the clients see them go to build/client-latency-*.json.
#
#   KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092 scripts/clients-test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${KAFKA_BOOTSTRAP_SERVERS:?set KAFKA_BOOTSTRAP_SERVERS (scripts/test.sh starts a broker)}"
export KAFKA_BOOTSTRAP_SERVERS
export LOOPGUARD_BIN="${LOOPGUARD_BIN:-$PWD/target/debug/loopguard}"
[ -x "$LOOPGUARD_BIN" ] || cargo build --locked -q
mkdir -p build

# The TypeScript package first: `npm ci` builds dist/, which docs/integration.md's
# TypeScript blocks (run by the Python suite's doc test) import.
(cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error)

# Both ends of the supported range (pyproject.toml): 2.16 is the release whose delivery
# callback hangs a consumer call made from it, the pattern this client avoids. The doc
# test (every block of docs/integration.md, the framework blocks included), mypy, the
# framework adapters' tests (each extra installed), the broker restart (a private broker of
# its own) and both clients against `loopguard demo`'s embedded broker (tests/test_demo.py)
# run once, with the newest.
adapter_tests=(langchain langgraph langgraph_stream openai_agents pydantic_ai claude_agent_sdk)
for ck in 2.16.1 2.15.1; do
  venv="build/pyclient-$ck"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  extras=test; [ "$ck" != 2.16.1 ] || extras=test,langchain,langgraph,openai-agents,pydantic-ai,claude-agent-sdk
  "$venv/bin/pip" install -q --disable-pip-version-check "confluent-kafka==$ck" "./clients/python[$extras]"
  echo "-- python client, confluent-kafka $ck"
  only_once=(); [ "$ck" = 2.16.1 ] || only_once=(--ignore=tests/test_integration_doc.py \
    --ignore=tests/test_broker_restart.py --ignore=tests/test_demo.py)
  [ "$ck" = 2.16.1 ] || for t in "${adapter_tests[@]}"; do only_once+=(--ignore="tests/test_$t.py"); done
  [ "$ck" != 2.16.1 ] || (cd clients/python && "../../$venv/bin/mypy" --strict --no-error-summary src/loopguard)
  # With the extras installed, the doc test fails rather than leave a framework block unrun.
  doc_extras=; [ "$ck" != 2.16.1 ] || doc_extras=required
  (cd clients/python && LOOPGUARD_LATENCY_OUT="$PWD/../../build/client-latency-python-$ck.json" LOOPGUARD_DOC_EXTRAS="$doc_extras" \
    "../../$venv/bin/python" -m pytest -q -p no:cacheprovider "${only_once[@]}")
done

echo "-- typescript client"
(cd clients/typescript && LOOPGUARD_LATENCY_OUT="$PWD/../../build/client-latency-typescript.json" npm test --silent)
cat build/client-latency-*.json
