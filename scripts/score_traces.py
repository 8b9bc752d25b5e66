#!/usr/bin/env python3
"""Scores a loopguard build (and optionally a candidate policy) against recorded traffic
labelled by hand: `loopguard replay` runs over each labelled file, and its verdicts are
judged session by session against the labels.

    scripts/score_traces.py BIN [--labels DIR] [--config FILE] [--verbose] [--check]

DIR holds `labels.json` and the JSONL event files it names (default: the 24 published
agent sessions of tests/data/real/agent-traces). `labels.json` is
`{"sessions": {SESSION_ID: {"file": NAME, "loop": BOOL, "intervene_at": EVENT_ID | null,
"kind": TEXT}}}`: `intervene_at` is the tool call at which a careful person would step in.
Sessions without a label are not scored.

The judgement, counted in tool calls of the session (the Nth call is call N):
- a loop is caught when a verdict of a non-budget rule comes from 3 calls before to 2 calls
  after its labelled call; otherwise it is missed;
- a `block` or `abort` on a healthy session, or more than 3 calls before a loop's labelled
  call, is hard (an agent stopped for nothing);
- any other verdict on a healthy session is soft (advice to read and accept or not);
  advice more than 3 calls before a loop is not counted either way.

Prints the misses and the hard verdicts (the soft ones too with --verbose), then one line:
`loops caught C/L, block/abort on healthy work H, other verdicts on healthy work S`.
Exit 0; with --check, 1 when a loop is missed or a verdict is hard; 2 on a usage or replay
error.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
from collections import defaultdict
from typing import Dict, List, Tuple

REPO = pathlib.Path(__file__).resolve().parent.parent
BEFORE, AFTER = 3, 2  # the window around a loop's labelled call, in calls


def call_numbers(path: pathlib.Path) -> Dict[Tuple[str, str], int]:
    """(session, event id) -> how many tool calls the session had made by that event."""
    seen: Dict[str, int] = defaultdict(int)
    numbers = {}
    with path.open() as f:
        for line in f:
            if not line.strip():
                continue
            event = json.loads(line)
            sid = event["session_id"]
            if event.get("type") == "tool_call":
                seen[sid] += 1
            numbers[(sid, event["event_id"])] = seen[sid]
    return numbers


def replay(binary: str, path: pathlib.Path, config: str | None) -> List[dict]:
    argv = [binary, "replay"] + (["--config", config] if config else []) + [str(path)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def score(labels: dict, calls: Dict[Tuple[str, str], int], verdicts: Dict[str, List[dict]],
          say) -> Tuple[int, int, int, int]:
    loops = caught = hard = soft = 0
    for sid, label in sorted(labels.items()):
        at = lambda v: calls.get((sid, v["event_id"]), 0)  # noqa: E731
        if label["loop"]:
            loops += 1
            due = calls[(sid, label["intervene_at"])]
            flagged = [at(v) for v in verdicts[sid]
                       if at(v) + BEFORE >= due and not v["rule"].startswith("budget.")]
            if flagged and min(flagged) <= due + AFTER:
                caught += 1
            else:
                first = min(flagged) if flagged else "none"
                say(f"miss  {sid} ({label.get('kind', 'loop')}): due by call {due + AFTER}, first flagged at {first}")
        for v in verdicts[sid]:
            c, hard_action = at(v), v["action"] in ("block", "abort")
            early = label["loop"] and c + BEFORE < calls[(sid, label["intervene_at"])]
            if hard_action and (not label["loop"] or early):
                hard += 1
                say(f"hard  {sid}: {v['rule']} {v['action']} at call {c}")
            elif not label["loop"]:
                soft += 1
                say(f"soft  {sid}: {v['rule']} {v['action']} at call {c}", verbose_only=True)
    return loops, caught, hard, soft


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary", help="the loopguard binary, e.g. target/release/loopguard")
    ap.add_argument("--labels", default=str(REPO / "tests" / "data" / "real" / "agent-traces"),
                    help="directory with labels.json and the event files it names")
    ap.add_argument("--config", help="a configuration (candidate policy) passed to replay")
    ap.add_argument("--verbose", action="store_true", help="list the soft verdicts too")
    ap.add_argument("--check", action="store_true", help="exit 1 on a missed loop or a hard verdict")
    args = ap.parse_args()

    root = pathlib.Path(args.labels)
    try:
        labels = json.loads((root / "labels.json").read_text())["sessions"]
        calls: Dict[Tuple[str, str], int] = {}
        verdicts: Dict[str, List[dict]] = defaultdict(list)
        for name in sorted({label["file"] for label in labels.values()}):
            calls.update(call_numbers(root / name))
            for v in replay(args.binary, root / name, args.config):
                verdicts[v["session_id"]].append(v)
        for sid, label in labels.items():
            if label["loop"] and (sid, label.get("intervene_at")) not in calls:
                raise RuntimeError(f"{sid}: intervene_at {label.get('intervene_at')!r} is not one of its events")
    except (OSError, KeyError, ValueError, RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"score_traces: {e}", file=sys.stderr)
        return 2

    def say(line: str, verbose_only: bool = False) -> None:
        if args.verbose or not verbose_only:
            print("  " + line)

    loops, caught, hard, soft = score(labels, calls, verdicts, say)
    print(f"loops caught {caught}/{loops}, block/abort on healthy work {hard}, "
          f"other verdicts on healthy work {soft}")
    return 1 if args.check and (caught < loops or hard) else 0


if __name__ == "__main__":
    sys.exit(main())
