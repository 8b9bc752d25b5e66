#!/usr/bin/env python3
"""Judged-through markers under broker faults (scripts/cluster-fault-test.sh, issue 36).

    scripts/fault_stalls.py stamp < CONSOLE_OUT > LIVE
    scripts/fault_stalls.py roles DESCRIBE NODE CONTROLLER TOPIC_PREFIX GROUP TRANSACTIONAL_ID...
    scripts/fault_stalls.py check EVENTS VERDICTS LIVE PHASES
    scripts/fault_stalls.py events EVENTS PRODUCED > TOPIC_JSONL

`stamp` prefixes each line read with the time it arrived (epoch ms) and a tab: fed live
by Kafka's console consumer reading the verdicts topic read_committed, it says when each
marker became visible to a runtime.

`roles` says what node NODE does in the cluster, from DESCRIBE (`kafka.sh describe`) and
the controller's id: the partitions of the run's topics (TOPIC_PREFIX*) it leads, whether
it coordinates the group GROUP and which of the TRANSACTIONAL_IDs (the partitions of
__consumer_offsets and __transaction_state Kafka hashes them to: abs(String.hashCode) %
partitions), whether it is the active controller. One line, for the report.

`check`:
- the markers' guarantee, as a runtime relies on it (tests/kafka_env/markers.rs): per
  partition of VERDICTS (the topic read read_committed after the run), the first time a
  verdict id appears its event is not covered by a marker read before it, every marker
  speaks for its own partition, and the last one covers every event of the partition;
- the stalls: per event of EVENTS, the time from its Kafka timestamp (the load
  generator's send) to the arrival in LIVE of the first marker of its partition with
  `through_offset` past its offset (and, apart, to that marker's own timestamp: when
  the guard wrote it, before its transaction committed). A stall counts in the phase of
  PHASES it ended in (a phase runs from its fault to the next one's), so the events a
  fault caught waiting are its own; per phase the longest stall and its partition, the
  median and p99, a Markdown table, then the longest stall per phase and partition.

`events` writes the events topic's records as `loopguard replay` takes them, partition by
partition in offset order (each session's events in the order the guard read them), and
checks that every event of PRODUCED (the load's JSONL) is there: the producer retries
through broker failures, so an event may be in the topic twice (its copy is a repeat
the guard and replay both skip), never missing. A summary line on stderr.

EVENTS: console consumer lines `CreateTime:T<TAB>Partition:P<TAB>Offset:O<TAB>VALUE`;
VERDICTS: `Partition:P<TAB>HEADERS<TAB>KEY<TAB>VALUE`; LIVE: `ARRIVAL_MS<TAB>CreateTime:T
<TAB>Partition:P<TAB>Offset:O<TAB>HEADERS<TAB>KEY<TAB>VALUE`; PRODUCED: the load's JSONL;
PHASES: one line per phase, tab-separated `NAME START_MS NODES DOWN RECOVERED CAUGHT_UP`
(the first ones: the load before any fault).
Exit 0 when the markers keep their guarantee and cover every event, 1 otherwise.
"""
import json
import sys
import time
from collections import defaultdict


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
    """partition -> list of (through_offset, arrival ms, written ms), the live markers
    that moved it on."""
    moves = defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            parts = line.split("\t", 6)
            if len(parts) != 7 or not parts[2].startswith("Partition:"):
                continue  # the consumer's own output, or a line cut at the end
            arrival, written, p, _, headers, key, value = parts
            if not is_marker(headers, key):
                continue
            p, through = field(p, "Partition"), json.loads(value)["through_offset"]
            if not moves[p] or through > moves[p][-1][0]:
                moves[p].append((through, int(arrival), field(written, "CreateTime")))
    return moves


def java_partition(s, partitions):
    """Kafka's partition of a group or transactional id: Utils.abs(String.hashCode) % n."""
    h = 0
    for unit in utf16(s):
        h = (31 * h + unit) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def utf16(s):
    b = s.encode("utf-16-be")
    return [b[i] << 8 | b[i + 1] for i in range(0, len(b), 2)]


def roles(describe, node, controller, prefix, group, *txn_ids):
    leaders, counts = {}, defaultdict(int)
    with open(describe, encoding="utf-8") as f:
        for line in f:
            kv = dict((k.strip(), v.strip()) for k, v in
                      (x.split(": ", 1) for x in line.rstrip("\n").split("\t") if ": " in x))
            if "Partition" in kv and "Leader" in kv:
                leaders[(kv["Topic"].strip(), int(kv["Partition"]))] = kv["Leader"]
            elif "PartitionCount" in kv:
                counts[kv["Topic"].strip()] = int(kv["PartitionCount"])
    ours = [k for k in leaders if k[0].startswith(prefix)]
    led = sum(1 for k in ours if leaders[k] == node)
    out = [f"leader of {led}/{len(ours)} partitions"]
    if counts.get("__consumer_offsets") and \
            leaders.get(("__consumer_offsets", java_partition(group, counts["__consumer_offsets"]))) == node:
        out.append("group coordinator")
    if counts.get("__transaction_state"):
        mine = [t for t in txn_ids
                if leaders.get(("__transaction_state", java_partition(t, counts["__transaction_state"]))) == node]
        out.append(f"coordinator of {len(mine)}/{len(txn_ids)} transactional ids")
    if controller == node:
        out.append("active controller")
    print(f"{node} ({', '.join(out)})")


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
                name, start, nodes, down, rec, caught = line.rstrip("\n").split("\t")
                phases.append({"name": name, "start": int(start), "nodes": nodes, "down": down,
                               "rec": rec, "caught": caught, "stalls": [], "written": 0,
                               "worst": defaultdict(int)})
    starts = [ph["start"] for ph in phases]
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
            k = max((i for i, s in enumerate(starts) if s <= mv[j][1]), default=0)
            phases[k]["stalls"].append((stall, p))
            phases[k]["written"] = max(phases[k]["written"], mv[j][2] - sent)
            phases[k]["worst"][p] = max(phases[k]["worst"][p], stall)
    if uncovered:
        problems.append(f"{uncovered} events no live marker covered (the live reader missed the end?)")
    parts = sorted(events)
    print("| phase | node (its roles) | down | ISRs full, guards ready | guards caught up | events "
          "| stall p50 | stall p99 | longest stall (partition) | longest, to the marker's write |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for ph in phases:
        st = sorted(s for s, _ in ph["stalls"])
        worst = max(ph["stalls"], default=(0, "-"))
        print(f"| {ph['name']} | {ph['nodes']} | {ph['down']} | {ph['rec']} | {ph['caught']} | {len(st):,} | "
              f"{secs(pct(st, 0.5))} | {secs(pct(st, 0.99))} | **{secs(worst[0])}** (p{worst[1]}) "
              f"| {secs(ph['written'])} |")
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


def topic_events(events_path, produced_path):
    records = []
    with open(events_path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                _, p, o, value = line.split("\t", 3)
                records.append((field(p, "Partition"), field(o, "Offset"), value))
    records.sort()
    ids = {}
    for _, _, value in records:
        i = json.loads(value)["event_id"]
        ids[i] = ids.get(i, 0) + 1
    with open(produced_path, encoding="utf-8") as f:
        produced = [json.loads(line)["event_id"] for line in f if line.strip()]
    missing = [i for i in produced if i not in ids]
    extra = set(ids) - set(produced)
    sys.stdout.writelines(v + "\n" for _, _, v in records)
    twice = sum(c - 1 for c in ids.values())
    print(f"events topic: {len(records):,} records, {len(produced):,} events produced, "
          f"{twice:,} written twice by producer retries, {len(missing):,} missing", file=sys.stderr)
    if missing or extra:
        print(f"events topic differs from the load: {len(missing)} produced events missing "
              f"(e.g. {missing[:3]}), {len(extra)} unknown ones", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "stamp":
        stamp()
    elif len(sys.argv) >= 7 and sys.argv[1] == "roles":
        roles(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "events":
        sys.exit(topic_events(*sys.argv[2:]))
    elif len(sys.argv) == 6 and sys.argv[1] == "check":
        sys.exit(check(*sys.argv[2:]))
    else:
        sys.exit(__doc__)
