#!/usr/bin/env bash
# Runs every test of loopguard: unit, rule, golden, property and metric-name tests, the
# integration tests against a real Apache Kafka broker (started here unless
# KAFKA_BOOTSTRAP_SERVERS is set), a rolling restart of two guards under load on that
# broker (scripts/scale-out.sh, short), the deployment checks (promtool, helm), the client
# libraries' suites against that broker (Python venvs and npm, installed by the script) and
# the alert rules on a live Prometheus (Debian's package, installed if missing), the guard and
# its clients on a secured broker of their own (scripts/secured-test.sh); and that
# `cargo install` gives a working `loopguard`; last, two guards on a three-broker cluster
# of their own through broker failures (scripts/cluster-fault-test.sh, 4-7 minutes).
#
#   scripts/test.sh
# Env: CLUSTER_FAULTS (1; 0 skips the three-broker fault test, for a quick run: CI runs it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  # The first port pair (broker, controller) from 19092 on that nothing listens on, so a
  # broker left running elsewhere on this machine does not fail the run.
  port=19092
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || (exec 3<>"/dev/tcp/127.0.0.1/$((port + 1))") 2>/dev/null; do
    port=$((port + 2))
    ((port < 19200)) || { echo "no free port pair in 19092-19199 on 127.0.0.1" >&2; exit 1; }
  done
  echo "== starting a real Kafka broker (KRaft, 127.0.0.1:$port)"
  eval "$(scripts/kafka.sh start "$port")"
  trap 'scripts/kafka.sh stop "$port" >/dev/null 2>&1 || true' EXIT
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

echo "== the configurations the deployment files render are valid for this loopguard"
cargo build --locked -q
for values in "" helm/loopguard/ci/all-on-values.yaml helm/loopguard/ci/hpa-values.yaml; do
  out=build/rendered-${values//\//_}.toml
  build/bin/helm template lg helm/loopguard ${values:+-f "$values"} --kube-version "${KUBE_VERSION:-1.30.0}" \
    | python3 -c 'import sys, yaml
for d in yaml.safe_load_all(sys.stdin):
    if d and d.get("kind") == "ConfigMap" and "loopguard.toml" in (d.get("data") or {}):
        sys.stdout.write(d["data"]["loopguard.toml"])' > "$out"
  target/debug/loopguard check-config "$out"
done
target/debug/loopguard check-config deploy/loopguard.toml

echo "== a rolling restart under load: 2 guards x 2 threads over 8 partitions, each SIGTERM'd and restarted in turn; the verdicts read_committed are loopguard replay's"
# The short form of scripts/scale-out.sh (docs/benchmarks.md, issue 19): ~1 minute.
INSTANCES=2 PARTITIONS=8 RATE=1000 CHUNK_SECS=5 WARMUP=3 TAIL=3 MAX_EVENTS=100000 DRAIN_EVENTS=0 \
  scripts/scale-out.sh target/debug/loopguard

echo "== cargo install, as the README says, into a scratch root; the installed binary runs"
root=$(mktemp -d)
# --debug, in the shared target dir: the debug build above is reused (seconds). The README's
# release install (`cargo install --locked --path .`) takes ~9 minutes on 2 cores and checks
# nothing more about installing: the same manifest, lock file and binary target. Offline:
# `cargo test --locked` above fetched every crate, and the index needs no update.
CARGO_TARGET_DIR=target cargo install --debug --locked --offline --quiet --path . --root "$root"
want="loopguard $(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
got=$("$root/bin/loopguard" --version)
[ "$got" = "$want" ] || { echo "installed loopguard --version: '$got', expected '$want'" >&2; exit 1; }
echo "$got"
rm -rf "$root"

echo "== client libraries (Python, TypeScript) against the broker and a real loopguard serve"
scripts/clients-test.sh

echo "== the MCP proxy between the MCP SDK's client and server, against the broker, a real serve and edge"
scripts/mcp-proxy-test.sh

echo "== a secured broker of its own (SASL_SSL, SCRAM-SHA-512, ACLs): operator, guard, two tenants, edge, hook, both clients, each guard ACL removed in turn"
PYTHON=build/pyclient-2.16.1/bin/python TS_DIR=clients/typescript SECURED_CHECK_SETUP=0 \
  scripts/secured-test.sh target/debug/loopguard

echo "== alerts on a live stack: a real Prometheus with the project's rules, scraping a real serve"
scripts/alerts-live-test.sh

if [ "${CLUSTER_FAULTS:-1}" != 0 ]; then
  echo "== three brokers under faults: 2 guards, replication 3; a partition leader, a transaction coordinator and the active controller killed -9, every broker restarted in turn; the verdicts read_committed are loopguard replay's, markers keep their guarantee, stalls measured"
  # Starts its own three-node KRaft cluster (scripts/kafka.sh start-cluster) and stops it
  # on exit (docs/benchmarks.md, "Three brokers under faults").
  scripts/cluster-fault-test.sh target/debug/loopguard
fi
