#!/usr/bin/env python3
"""Consistency checks on the deployment files, called by scripts/deploy-checks.sh.

    deploy_lint.py rules RULES_FILE RUNBOOK_MD   alert naming, labels, annotations, runbook anchors
    deploy_lint.py dashboard DASHBOARD_JSON      parses; ${datasource} variable; no fixed datasource uid
    deploy_lint.py rendered MANIFESTS RULES_FILE a `helm template` output: config TOML, hardening, rules
    deploy_lint.py compose COMPOSE_FILE          services, mounted files, loopback-only ports

Each prints what it checked and exits 1 with one line per problem.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

try:
    import tomllib  # Python 3.11+
except ModuleNotFoundError:  # pragma: no cover - older interpreters
    import tomli as tomllib

import yaml

SEVERITIES = {"critical", "warning", "info"}
ALERT_NAME = re.compile(r"^Loopguard(?:[A-Z][a-z0-9]*)+$")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def check_rules(rules_path: str, runbook_path: str) -> list[str]:
    problems = []
    doc = yaml.safe_load(Path(rules_path).read_text(encoding="utf-8"))
    runbook = Path(runbook_path).read_text(encoding="utf-8") if Path(runbook_path).exists() else ""
    anchors = {github_anchor(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", runbook, re.M)}
    anchors |= set(re.findall(r'<a\s+(?:name|id)="([^"]+)"', runbook))
    alerts = 0
    seen = set()
    for group in doc.get("groups", []):
        for rule in group.get("rules", []):
            if "record" in rule:
                if ":" not in rule["record"]:
                    problems.append(f"recording rule {rule['record']}: name should be level:metric:operations")
                continue
            alerts += 1
            name = rule.get("alert", "")
            where = f"alert {name or '?'}"
            if not ALERT_NAME.match(name):
                problems.append(f"{where}: name must be CamelCase and start with Loopguard")
            if name in seen:
                problems.append(f"{where}: defined twice")
            seen.add(name)
            severity = (rule.get("labels") or {}).get("severity")
            if severity not in SEVERITIES:
                problems.append(f"{where}: labels.severity must be one of {sorted(SEVERITIES)}, got {severity!r}")
            annotations = rule.get("annotations") or {}
            for key in ("summary", "description", "runbook_url"):
                if not annotations.get(key):
                    problems.append(f"{where}: annotation {key} missing")
            url = annotations.get("runbook_url", "")
            match = re.fullmatch(r"docs/runbook\.md#([\w-]+)", url)
            if not match:
                problems.append(f"{where}: runbook_url must be docs/runbook.md#<anchor>, got {url!r}")
            elif match.group(1) not in anchors:
                problems.append(f"{where}: {runbook_path} has no heading with anchor #{match.group(1)}")
    print(f"{alerts} alerts checked against {len(anchors)} runbook anchors")
    return problems


def check_dashboard(path: str) -> list[str]:
    problems = []
    try:
        dash = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        return [f"{path}: not valid JSON: {err}"]
    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append("templating: need a variable `datasource` of type datasource with query prometheus")

    def walk(node, where):
        if isinstance(node, dict):
            if "datasource" in node:
                ref = node["datasource"]
                uid = ref.get("uid") if isinstance(ref, dict) else ref
                ok = uid in ("${datasource}", "$datasource", "-- Grafana --") or (
                    isinstance(ref, dict) and ref.get("type") == "grafana")
                if not ok:
                    problems.append(f"{where}: datasource {ref!r} is hard-coded; use ${{datasource}}")
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{where}[{i}]")

    walk(dash, "dashboard")
    ids = [p.get("id") for p in dash.get("panels", [])]
    if len(ids) != len(set(ids)):
        problems.append("panels: ids are not unique")
    exprs = sum(1 for p in dash.get("panels", []) for t in p.get("targets", []) if t.get("expr"))
    if exprs == 0:
        problems.append("panels: no PromQL target found")
    print(f"{len(ids)} panels, {exprs} queries, variables: {', '.join(sorted(variables))}")
    return problems


def check_rendered(manifests_path: str, rules_path: str) -> list[str]:
    problems = []
    docs = [d for d in yaml.safe_load_all(Path(manifests_path).read_text(encoding="utf-8")) if d]
    kinds = {}
    for d in docs:
        kinds.setdefault(d["kind"], []).append(d)
    for kind in ("Deployment", "Service", "ConfigMap"):
        if kind not in kinds:
            problems.append(f"no {kind} rendered")
    if problems:
        return problems

    deployment = kinds["Deployment"][0]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container.get("args", [])
    if args[:1] != ["serve"] or "--config" not in args:
        problems.append(f"container args should be serve --config <file>, got {args}")
    sc = container.get("securityContext", {})
    psc = pod.get("securityContext", {})
    expectations = {
        "runAsNonRoot": sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True,
        "readOnlyRootFilesystem": sc.get("readOnlyRootFilesystem") is True,
        "allowPrivilegeEscalation false": sc.get("allowPrivilegeEscalation") is False,
        "capabilities drop ALL": "ALL" in (sc.get("capabilities", {}).get("drop") or []),
        "seccomp RuntimeDefault": (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault",
    }
    for what, ok in expectations.items():
        if not ok:
            problems.append(f"container securityContext: {what} not set")
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        if container.get(probe, {}).get("httpGet", {}).get("path") != path:
            problems.append(f"{probe} should GET {path}")
    ports = {p.get("containerPort") for p in container.get("ports", [])}
    if 9464 not in ports:
        problems.append(f"container ports {ports} lack 9464")

    configs = [c for c in kinds["ConfigMap"] if "loopguard.toml" in c.get("data", {})]
    if not configs:
        problems.append("no ConfigMap with loopguard.toml")
    else:
        try:
            config = tomllib.loads(configs[0]["data"]["loopguard.toml"])
        except tomllib.TOMLDecodeError as err:
            problems.append(f"loopguard.toml does not parse: {err}")
        else:
            for section in ("kafka", "admin", "metrics", "engine"):
                if section not in config:
                    problems.append(f"loopguard.toml: [{section}] missing")
            props = config.get("kafka", {}).get("properties", {})
            for key in props:
                if "password" in key or "username" in key:
                    problems.append(f"loopguard.toml: credential {key} must come from a Secret, not the ConfigMap")
            if not all(isinstance(v, str) for v in props.values()):
                problems.append("loopguard.toml: [kafka.properties] values must all be strings")

    for rule in kinds.get("PrometheusRule", []):
        expected = yaml.safe_load(Path(rules_path).read_text(encoding="utf-8"))
        # The chart turns each docs/runbook.md#<anchor> into an absolute <runbookUrl>#<anchor>.
        for group in rule["spec"].get("groups", []):
            for r in group.get("rules", []):
                annotations = r.get("annotations") or {}
                if "runbook_url" not in annotations:
                    continue
                url = annotations["runbook_url"]
                match = re.fullmatch(r"https?://[^\s#]+#([\w-]+)", url)
                if not match:
                    problems.append(f"PrometheusRule {r.get('alert')}: runbook_url {url!r} is not an absolute link")
                else:
                    annotations["runbook_url"] = f"docs/runbook.md#{match.group(1)}"
        if rule["spec"] != expected:
            problems.append("PrometheusRule spec differs from " + rules_path)
    for obj in kinds.get("ScaledObject", []) + kinds.get("HorizontalPodAutoscaler", []):
        spec = obj["spec"]
        high = spec.get("maxReplicaCount", spec.get("maxReplicas"))
        behavior = (spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
                    or spec.get("behavior") or {})
        window = behavior.get("scaleDown", {}).get("stabilizationWindowSeconds", 0)
        if window < 300:
            problems.append(f"{obj['kind']}: scale-down stabilization window {window}s is short")
        if high is None:
            problems.append(f"{obj['kind']}: no max replica count")
    for cm in kinds["ConfigMap"]:
        if "loopguard.json" in cm.get("data", {}):
            if cm["metadata"].get("labels", {}).get("grafana_dashboard") != "1":
                problems.append("dashboard ConfigMap lacks label grafana_dashboard: \"1\"")
            json.loads(cm["data"]["loopguard.json"])
    summary = ", ".join(f"{k} x{len(v)}" if len(v) > 1 else k for k, v in sorted(kinds.items()))
    print(f"rendered: {summary}")
    return problems


def check_compose(path: str) -> list[str]:
    problems = []
    base = Path(path).parent
    doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    services = doc.get("services", {})
    for name in ("kafka", "loopguard", "fleet", "prometheus", "grafana"):
        if name not in services:
            problems.append(f"service {name} missing")
    if "apache/kafka" not in str(services.get("kafka", {}).get("image", "")):
        problems.append("kafka should use the apache/kafka image")
    fleet = services.get("fleet", {}).get("command", [])
    if fleet[:2] != ["demo", "--fleet-only"] or "kafka:9092" not in fleet:
        problems.append(f"fleet command should be demo --fleet-only --bootstrap-servers kafka:9092, got {fleet}")
    for name, svc in services.items():
        image = str(svc.get("image", ""))
        if image and ":" not in image:
            problems.append(f"{name}: image {image} has no tag")
        for port in svc.get("ports", []):
            if not str(port).startswith("127.0.0.1:"):
                problems.append(f"{name}: port {port} is not bound to 127.0.0.1")
        for volume in svc.get("volumes", []):
            source = str(volume).split(":", 1)[0]
            if source.startswith(".") and not (base / source).exists():
                problems.append(f"{name}: mounted file {source} does not exist")
        build = svc.get("build")
        if isinstance(build, dict):
            dockerfile = base / build.get("context", ".") / build.get("dockerfile", "Dockerfile")
            if not dockerfile.exists():
                problems.append(f"{name}: {dockerfile} does not exist")
    print(f"services: {', '.join(services)}")
    return problems


def main(argv: list[str]) -> int:
    checks = {"rules": check_rules, "dashboard": check_dashboard,
              "rendered": check_rendered, "compose": check_compose}
    if not argv or argv[0] not in checks:
        print(__doc__, file=sys.stderr)
        return 2
    problems = checks[argv[0]](*argv[1:])
    for problem in problems:
        print(f"problem: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
