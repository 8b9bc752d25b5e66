#!/usr/bin/env python3
"""List the loopguard metric names that the alert rules and the Grafana dashboard use.

Writes one metric family name per line, sorted, e.g. `loopguard_verdicts_total`. Series
suffixes of histograms are folded into the family name: `_bucket` always (no loopguard
metric ends in it), `_sum` and `_count` when the same base also appears as `_bucket` or
ends in a base unit (`_seconds`, `_bytes`). Recording-rule names (they contain a colon),
label names, label values and metrics of other exporters (`up`) are not listed.

With --exported FILE (the text of a loopguard /metrics page) it also reports every used
name that the page does not export, and exits 1 if there is one.

    python3 scripts/used_metrics.py -o build/used-metrics.txt
    python3 scripts/used_metrics.py --exported metrics.txt
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Iterable, Iterator

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RULES = [ROOT / "deploy/prometheus/loopguard-alerts.yaml"]
DEFAULT_DASHBOARDS = [ROOT / "deploy/grafana/loopguard.json"]

# A PromQL identifier not preceded by a character that would make it part of something
# else (a longer name, a recording-rule name with colons, a $variable, a number).
IDENT = re.compile(r"(?<![\w:$.])[A-Za-z_:][A-Za-z0-9_:]*")
STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
COMMENT = re.compile(r"#[^\n]*")
UNIT_SUFFIXES = ("_seconds", "_bytes")


def rule_exprs(path: Path) -> Iterator[str]:
    import yaml  # PyYAML; deploy-checks.sh installs it when missing

    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for group in doc.get("groups", []):
        for rule in group.get("rules", []):
            expr = rule.get("expr")
            if expr is not None:
                yield str(expr)


def dashboard_exprs(path: Path) -> Iterator[str]:
    def walk(node: object) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "definition") and isinstance(value, str):
                    yield value
                elif key == "query" and isinstance(value, str) and node.get("type") == "query":
                    yield value
                else:
                    yield from walk(value)
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)

    yield from walk(json.loads(path.read_text(encoding="utf-8")))


def names_in(expr: str, prefix: str) -> set[str]:
    # Grafana macros ($__rate_interval) and variables never match IDENT thanks to the
    # look-behind on "$"; strings hold label values, comments hold prose.
    text = STRING.sub('""', COMMENT.sub("", expr))
    return {m.group(0) for m in IDENT.finditer(text)
            if m.group(0).startswith(prefix) and ":" not in m.group(0)}


def fold_suffixes(names: Iterable[str]) -> list[str]:
    names = set(names)
    histograms = {n[: -len("_bucket")] for n in names if n.endswith("_bucket")}
    folded = set()
    for name in names:
        if name.endswith("_bucket"):
            folded.add(name[: -len("_bucket")])
            continue
        for suffix in ("_sum", "_count"):
            base = name[: -len(suffix)]
            if name.endswith(suffix) and (base in histograms or base.endswith(UNIT_SUFFIXES)):
                folded.add(base)
                break
        else:
            folded.add(name)
    return sorted(folded)


def exported_families(text: str) -> set[str]:
    families = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 3:
                families.add(parts[2])
        elif line and not line.startswith("#"):
            name = re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line)
            if name:
                families.add(name.group(0))
    return set(fold_suffixes(families)) | families


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=Path, action="append",
                        help="Prometheus rules file (repeatable); default: deploy/prometheus/loopguard-alerts.yaml")
    parser.add_argument("--dashboard", type=Path, action="append",
                        help="Grafana dashboard JSON (repeatable); default: deploy/grafana/loopguard.json")
    parser.add_argument("--prefix", default="loopguard_", help="metric name prefix to keep (default: %(default)s)")
    parser.add_argument("-o", "--output", type=Path, help="write the list here instead of stdout")
    parser.add_argument("--exported", type=Path,
                        help="a /metrics page; fail if a used metric is missing from it")
    args = parser.parse_args(argv)

    found: set[str] = set()
    for path in args.rules or DEFAULT_RULES:
        for expr in rule_exprs(path):
            found |= names_in(expr, args.prefix)
    for path in args.dashboard or DEFAULT_DASHBOARDS:
        for expr in dashboard_exprs(path):
            found |= names_in(expr, args.prefix)
    used = fold_suffixes(found)
    if not used:
        print("no metric names found", file=sys.stderr)
        return 1

    listing = "".join(f"{name}\n" for name in used)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(listing, encoding="utf-8")
    else:
        sys.stdout.write(listing)

    if args.exported:
        exported = exported_families(args.exported.read_text(encoding="utf-8"))
        missing = [name for name in used if name not in exported]
        for name in missing:
            print(f"used but not exported: {name}", file=sys.stderr)
        if missing:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
