#!/usr/bin/env python3
"""Judged-through markers under broker faults (scripts/cluster-fault-test.sh, issue 36).

    scripts/fault_stalls.py stamp < CONSOLE_OUT > LIVE
    scripts/fault_stalls.py check EVENTS VERDICTS LIVE PHASES

`stamp` prefixes each line read with the time it arrived (epoch ms) and a tab: fed live
by Kafka's console consumer reading the verdicts topic read_committed, it says when each
marker became visible to a runtime.

`check`:
- the markers' guarantee, as a runtime relies on it (tests/kafka_env/markers.rs): per
  partition of VERDICTS (the topic read read_committed after the run), the first time a
  verdict id appears its event is not covered by a marker read before it, every marker
  speaks for its own partition, and the last one covers every event of the partition;
- the stalls: per event of EVENTS, the time from its Kafka timestamp (the load
  generator's send) to the arrival in LIVE of the first marker of its partition with
  `through_offset` past its offset. Events go to the phase of PHASES they were sent in
  (a phase starts LEAD_MS before its fault, so the events a fault caught in flight are
  its own); per phase the longest stall and its partition, the median and p99, a Markdown
  table, then the longest stall per phase and partition.

EVENTS: console consumer lines `CreateTime:T<TAB>Partition:P<TAB>Offset:O<TAB>VALUE`;
VERDICTS: `Partition:P<TAB>HEADERS<TAB>KEY<TAB>VALUE`; LIVE: `ARRIVAL_MS<TAB>Partition:P
<TAB>Offset:O<TAB>HEADERS<TAB>KEY<TAB>VALUE`; PHASES: one line per phase, tab-separated
`NAME START_MS NODES DOWN_S RECOVERED_S` (the first: the steady load before any fault).
Exit 0 when the markers keep their guarantee and cover every event, 1 otherwise.
"""
import json
import sys
import time
from collections import defaultdict

LEAD_MS = 2000


def stamp():
    out = sys.stdout
    for line in sys.stdin:
        out.write(f"{int(time.time() * 1000)}\t{line}")
        out.flush()


def field(s, name):
    if not s.startswith(name + ":"):
        raise ValueError(f"expected {name}:..., got {s[:80]!r}")
    return int(s[len(name) + 1:])


def is_marker(headers, key):
    return key == "null" and "loopguard-kind:judged" in headers.split(",")


def read_events(path):
    """partition -> list of (offset, send ms); event_id -> (partition, offset)."""
    events, where = defaultdict(list), {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            ts, p, o, value = line.split("\t", 3)
            p, o = field(p, "Partition"), field(o, "Offset")
            events[p].append((o, field(ts, "CreateTime")))
            where.setdefault(json.loads(value)["event_id"], (p, o))
    for p in events:
        events[p].sort()
    return events, where


def check_markers(path, events, where):
    """Problems with the guarantee, and the number of markers and verdicts read."""
    problems, covered, seen = [], {}, set()
    markers = verdicts = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            p, headers, key, value = line.split("\t", 3)
            p, v = field(p, "Partition"), json.loads(value)
            if is_marker(headers, key):
                markers += 1
                if v.get("kind") != "judged" or v.get("partition") != p:
                    problems.append(f"partition {p}: a marker for another partition: {value}")
                covered[p] = max(covered.get(p, 0), v["through_offset"])
                continue
            verdicts += 1
            if v["verdict_id"] in seen:
                continue  # a copy: a runtime already has the first (same_stream.py counts them)
            seen.add(v["verdict_id"])
            ep, eo = where.get(v["event_id"], (None, None))
            if ep is None:
                problems.append(f"verdict {v['verdict_id']} on an event not in the events topic")
            elif ep != p:
                problems.append(f"verdict {v['verdict_id']} on partition {p}, its event on {ep}")
            elif covered.get(p, 0) > eo:
                problems.append(f"partition {p}: verdict on offset {eo} after a marker through {covered[p]}")
    for p, evs in events.items():
        end = evs[-1][0] + 1
        if covered.get(p, 0) < end:
            problems.append(f"partition {p}: the last marker covers {covered.get(p, 0)}, the events end at {end}")
    return problems, markers, verdicts


def first_cover(path):
    """partition -> list of (through_offset, arrival ms), the live markers that moved it on."""
    moves = defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            parts = line.split("\t", 5)
            if len(parts) != 6 or not parts[1].startswith("Partition:"):
                continue  # the consumer's own output, or a line cut at the end
            arrival, p, _, headers, key, value = parts
            if not is_marker(headers, key):
                continue
            p, through = field(p, "Partition"), json.loads(value)["through_offset"]
            if not moves[p] or through > moves[p][-1][0]:
                moves[p].append((through, int(arrival)))
    return moves


def pct(xs, q):
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0


def secs(ms):
    return f"{ms / 1000:.2f} s"


def check(events_path, verdicts_path, live_path, phases_path):
    events, where = read_events(events_path)
    problems, markers, verdicts = check_markers(verdicts_path, events, where)
    phases = []
    with open(phases_path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                name, start, nodes, down, rec = line.rstrip("\n").split("\t")
                phases.append({"name": name, "start": int(start), "nodes": nodes, "down": down,
                               "rec": rec, "stalls": [], "worst": defaultdict(int)})
    starts = [ph["start"] - (LEAD_MS if i else 0) for i, ph in enumerate(phases)]
    moves = first_cover(live_path)
    uncovered = 0
    for p, evs in events.items():
        mv, j = moves.get(p, []), 0
        for o, sent in evs:
            while j < len(mv) and mv[j][0] <= o:
                j += 1
            if j == len(mv):
                uncovered += 1
                continue
            stall = max(0, mv[j][1] - sent)
            k = max((i for i, s in enumerate(starts) if s <= sent), default=0)
            phases[k]["stalls"].append((stall, p))
            phases[k]["worst"][p] = max(phases[k]["worst"][p], stall)
    if uncovered:
        problems.append(f"{uncovered} events no live marker covered (the live reader missed the end?)")
    parts = sorted(events)
    print("| phase | node(s) | down | until ISRs full | events | stall p50 | stall p99 | longest stall (partition) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for ph in phases:
        st = sorted(s for s, _ in ph["stalls"])
        worst = max(ph["stalls"], default=(0, "-"))
        print(f"| {ph['name']} | {ph['nodes']} | {ph['down']} | {ph['rec']} | {len(st):,} | "
              f"{secs(pct(st, 0.5))} | {secs(pct(st, 0.99))} | **{secs(worst[0])}** (p{worst[1]}) |")
    print("\nLongest stall per partition (s):\n")
    print("| phase | " + " | ".join(f"p{p}" for p in parts) + " |")
    print("| --- |" + " ---: |" * len(parts))
    for ph in phases:
        print(f"| {ph['name']} | " + " | ".join(f"{ph['worst'].get(p, 0) / 1000:.2f}" for p in parts) + " |")
    total = sum(len(e) for e in events.values())
    print(f"\nmarkers: {markers:,} read read_committed over {total:,} events in {len(parts)} partitions; "
          f"{verdicts:,} verdict records", file=sys.stderr)
    if problems:
        print("judged-through markers broke their guarantee:", file=sys.stderr)
        for p in problems[:20]:
            print(f"- {p}", file=sys.stderr)
        return 1
    print("markers keep their guarantee: no verdict after a marker covering its event, "
          "the last marker of each partition covers all its events", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "stamp":
        stamp()
    elif len(sys.argv) == 6 and sys.argv[1] == "check":
        sys.exit(check(*sys.argv[2:]))
    else:
        sys.exit(__doc__)
