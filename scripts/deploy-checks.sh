#!/usr/bin/env bash
# Checks the deployment files: Prometheus rules and their unit tests, the Grafana
# dashboard, the Helm chart, docker-compose, and writes build/used-metrics.txt (the metric
# names the dashboard and the rules use, for the Rust test that compares them with what
# loopguard exports).
#
#   scripts/deploy-checks.sh
#
# Installs what it lacks: promtool from Debian's `prometheus` package (apt, as root), helm
# built from source with `go install` into build/bin (once; later runs reuse it), PyYAML
# with pip. Prints a PASS/FAIL line per check and exits 1 if any check failed.
#
# Environment: HELM_VERSION (default below), HELM (use this helm binary instead),
# KUBE_VERSION (Kubernetes version helm renders for; default below).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

HELM_VERSION=${HELM_VERSION:-v3.22.0}
KUBE_VERSION=${KUBE_VERSION:-1.30.0}
BIN="$ROOT/build/bin"
LOGS="$ROOT/build/deploy-checks"
CHART=helm/loopguard
RULES=deploy/prometheus/loopguard-alerts.yaml
DASHBOARD=deploy/grafana/loopguard.json
mkdir -p "$BIN" "$LOGS"
export PATH="$BIN:$PATH"

results=()
failed=0

# run NAME COMMAND...: runs a check, logs its output, records PASS or FAIL.
run() {
  local name=$1; shift
  local log
  log="$LOGS/$(echo "$name" | tr -c 'A-Za-z0-9_.-' '_').log"
  if "$@" >"$log" 2>&1; then
    results+=("PASS  $name")
    printf 'PASS  %s\n' "$name"
  else
    results+=("FAIL  $name")
    failed=$((failed + 1))
    printf 'FAIL  %s (log: %s)\n' "$name" "${log#"$ROOT"/}"
    tail -n 40 "$log" | sed 's/^/      /'
  fi
}

# expect_failure PATTERN COMMAND...: succeeds when COMMAND fails with PATTERN in its output.
expect_failure() {
  local pattern=$1; shift
  local out
  if out=$("$@" 2>&1); then
    echo "expected a failure, but it succeeded"; return 1
  fi
  if ! grep -q -- "$pattern" <<<"$out"; then
    echo "failed, but without '$pattern':"; echo "$out"; return 1
  fi
  echo "refused as expected: $(grep -m1 -- "$pattern" <<<"$out")"
}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "need root to run: $*" >&2; return 1; fi
}

# ---------------------------------------------------------------- tools
install_promtool() {
  command -v promtool >/dev/null && { promtool --version | head -n1; return 0; }
  command -v apt-get >/dev/null || { echo "promtool missing and no apt-get"; return 1; }
  as_root apt-get update -qq || return 1
  if ! apt-cache show prometheus >/dev/null 2>&1; then
    echo "Debian package 'prometheus' is not available from the configured apt sources"; return 1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus || return 1
  promtool --version | head -n1
}

install_helm() {
  if [ -n "${HELM:-}" ]; then "$HELM" version --short; return; fi
  local stamp="$BIN/.helm-version"
  if [ -x "$BIN/helm" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$HELM_VERSION" ]; then
    echo "cached: $BIN/helm ($HELM_VERSION)"; return 0
  fi
  command -v go >/dev/null || { echo "helm missing and no go toolchain to build it"; return 1; }
  echo "building helm $HELM_VERSION with go install (once; cached in build/bin)"
  GOBIN="$BIN" nice -n 10 go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" || return 1
  echo "$HELM_VERSION" >"$stamp"
  "$BIN/helm" version --short
}

install_pyyaml() {
  python3 -c 'import yaml' 2>/dev/null && return 0
  python3 -m pip install --quiet pyyaml
}

run "tools: promtool" install_promtool
run "tools: helm $HELM_VERSION" install_helm
run "tools: python3 with PyYAML" install_pyyaml
HELM=${HELM:-$BIN/helm}

# ---------------------------------------------------------------- Prometheus
run "promtool check rules $RULES" promtool check rules "$RULES"
run "promtool test rules deploy/prometheus/tests/*.yaml" promtool test rules deploy/prometheus/tests/*.yaml
run "promtool check config deploy/prometheus/prometheus.yml" promtool check config deploy/prometheus/prometheus.yml
run "alert conventions and runbook anchors" python3 scripts/deploy_lint.py rules "$RULES" docs/runbook.md

# ---------------------------------------------------------------- copies in the chart
run "chart rules copy equals $RULES" cmp "$RULES" "$CHART/files/loopguard-alerts.yaml"
run "chart dashboard copy equals $DASHBOARD" cmp "$DASHBOARD" "$CHART/files/loopguard.json"

# ---------------------------------------------------------------- Grafana
run "dashboard JSON parses, uses \${datasource}" python3 scripts/deploy_lint.py dashboard "$DASHBOARD"
check_provisioning() {
  python3 - <<'PY'
import pathlib, yaml
for path in sorted(pathlib.Path("deploy/grafana/provisioning").rglob("*.yaml")):
    doc = yaml.safe_load(path.read_text())
    assert doc.get("apiVersion") == 1, f"{path}: apiVersion 1 expected"
    print("ok", path)
PY
}
run "grafana provisioning files parse" check_provisioning

# ---------------------------------------------------------------- Helm
helm_lint() {
  local out
  out=$("$HELM" lint --strict "$CHART" --kube-version "$KUBE_VERSION" "$@" 2>&1); local rc=$?
  echo "$out"
  # In lint mode a template's `fail` is only logged: treat it as an error.
  if grep -q 'Fail:' <<<"$out"; then return 1; fi
  return $rc
}
helm_template() {
  local out=$1; shift
  "$HELM" template loopguard "$CHART" --namespace guard --kube-version "$KUBE_VERSION" "$@" >"$out" || return 1
  python3 scripts/deploy_lint.py rendered "$out" "$RULES"
}

run "helm lint (default values)" helm_lint
run "helm template (default values)" helm_template "$LOGS/rendered-default.yaml"
for values in "$CHART"/ci/*.yaml; do
  name=$(basename "$values" .yaml)
  run "helm lint (ci/$name)" helm_lint -f "$values"
  run "helm template (ci/$name)" helm_template "$LOGS/rendered-$name.yaml" -f "$values"
done
run "helm template refuses KEDA maxReplicaCount > partitions" \
  expect_failure "exceeds partitions" "$HELM" template loopguard "$CHART" --kube-version "$KUBE_VERSION" \
  --set partitions=6,autoscaling.keda.enabled=true,autoscaling.keda.minReplicaCount=2,autoscaling.keda.maxReplicaCount=7
run "helm template refuses HPA maxReplicas > partitions" \
  expect_failure "exceeds partitions" "$HELM" template loopguard "$CHART" --kube-version "$KUBE_VERSION" \
  --set partitions=6,autoscaling.hpa.enabled=true,autoscaling.hpa.maxReplicas=8
run "helm template refuses replicaCount > partitions" \
  expect_failure "exceeds partitions" "$HELM" template loopguard "$CHART" --kube-version "$KUBE_VERSION" \
  --set partitions=2,replicaCount=3
run "values.schema.json rejects an unknown delivery mode" \
  expect_failure "delivery" "$HELM" template loopguard "$CHART" --kube-version "$KUBE_VERSION" \
  --set config.kafka.delivery=sometimes

# ---------------------------------------------------------------- compose and image
run "docker-compose.yml services and mounts" python3 scripts/deploy_lint.py compose deploy/docker-compose.yml
check_dockerfile() {
  local f=Dockerfile
  grep -Eq '^USER 65532' $f && grep -q 'ENTRYPOINT \["loopguard"\]' $f && grep -q 'CMD \["serve"\]' $f \
    && grep -q 'EXPOSE 9464' $f && grep -q 'cargo build --release --locked' $f \
    && grep -q '^ENV LOOPGUARD__ADMIN__LISTEN=0.0.0.0:9464' $f \
    && [ "$(grep -c '^FROM ' $f)" -ge 2 ] && echo "Dockerfile: multi-stage, non-root, loopguard serve on 9464 (every interface; the built-in default is loopback)"
}
run "Dockerfile essentials" check_dockerfile

# ---------------------------------------------------------------- used metrics
run "build/used-metrics.txt" python3 scripts/used_metrics.py -o build/used-metrics.txt
[ -s build/used-metrics.txt ] && echo "      $(wc -l <build/used-metrics.txt) metric names in build/used-metrics.txt"

# ---------------------------------------------------------------- summary
echo
echo "deploy-checks summary"
printf '  %s\n' "${results[@]}"
total=${#results[@]}
echo "$((total - failed)) passed, $failed failed"
if [ "$failed" -ne 0 ]; then
  echo "deploy-checks: FAIL"
  exit 1
fi
echo "deploy-checks: PASS"
