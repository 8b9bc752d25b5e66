#!/usr/bin/env python3
"""Is the verdict stream a guard fleet committed the one `loopguard replay` gives for the
same events? The bar of tests/kafka_it.rs, for a dump of the verdicts topic read
read_committed (scripts/scale-out.sh): the same verdicts (`emitted_at` aside), none
missing, none doubled (one record per `verdict_id`), per session in replay's order, and
every verdict of a session on one partition. Judged-through markers (header
`loopguard-kind:judged`, no key) are counted and set aside.

    scripts/same_stream.py TOPIC_DUMP REPLAY_OUT

TOPIC_DUMP: Kafka's console consumer output with print.partition, print.headers and
print.key on (`Partition:P<TAB>HEADERS<TAB>KEY<TAB>VALUE` per record); REPLAY_OUT: the
verdicts `loopguard replay` printed, one JSON per line.
Exit 0 when they agree (one summary line), 1 with the differences.
"""
import json
import sys
from collections import Counter, defaultdict


def comparable(v):
    v = dict(v)
    v.pop("emitted_at", None)
    return json.dumps(v, sort_keys=True)


def read_topic(path):
    verdicts, markers = [], 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            parts = line.split("\t", 3)
            if len(parts) != 4 or not parts[0].startswith("Partition:"):
                sys.exit(f"{path}:{n}: not a console consumer record line: {line[:200]}")
            partition, headers, key, value = parts
            if "loopguard-kind:judged" in headers.split(","):
                markers += 1
                continue
            verdicts.append((int(partition.split(":")[1]), key, json.loads(value)))
    return verdicts, markers


def main(dump, replay):
    got, markers = read_topic(dump)
    with open(replay, encoding="utf-8") as f:
        want = [json.loads(line) for line in f if line.strip()]
    problems = []
    ids = Counter(v["verdict_id"] for _, _, v in got)
    doubled = [i for i, c in ids.items() if c > 1]
    if doubled:
        problems.append(f"{len(doubled)} verdict ids written more than once, e.g. {doubled[:3]}")
    by_id = {v["verdict_id"]: v for v in want}
    if len(by_id) != len(want):
        problems.append("replay itself gave a verdict id twice")
    got_ids = {v["verdict_id"] for _, _, v in got}
    missing = [i for i in by_id if i not in got_ids]
    extra = [i for i in got_ids if i not in by_id]
    if missing:
        problems.append(f"{len(missing)} of replay's {len(want)} verdicts missing, e.g. "
                        + "; ".join(comparable(by_id[i]) for i in missing[:3]))
    if extra:
        problems.append(f"{len(extra)} verdicts replay does not give, e.g. {extra[:3]}")
    changed = [v["verdict_id"] for _, _, v in got
               if v["verdict_id"] in by_id and comparable(v) != comparable(by_id[v["verdict_id"]])]
    if changed:
        i = changed[0]
        g = next(v for _, _, v in got if v["verdict_id"] == i)
        problems.append(f"{len(changed)} verdicts differ from replay's, e.g.\n  got  {comparable(g)}\n"
                        f"  want {comparable(by_id[i])}")
    order_got, order_want = defaultdict(list), defaultdict(list)
    parts = defaultdict(set)
    for p, key, v in got:
        order_got[v["session_id"]].append(v["verdict_id"])
        parts[v["session_id"]].add(p)
        if key != v["session_id"]:
            problems.append(f"verdict {v['verdict_id']} keyed {key!r}, not by its session")
    for v in want:
        order_want[v["session_id"]].append(v["verdict_id"])
    out_of_order = [s for s in order_want if order_got.get(s) != order_want[s]]
    if out_of_order and not (missing or extra or doubled):
        s = out_of_order[0]
        problems.append(f"{len(out_of_order)} sessions' verdicts in another order than replay's, "
                        f"e.g. {s}:\n  got  {order_got.get(s)}\n  want {order_want[s]}")
    split = [s for s, ps in parts.items() if len(ps) > 1]
    if split:
        problems.append(f"{len(split)} sessions with verdicts on several partitions, e.g. "
                        f"{split[0]}: {sorted(parts[split[0]])}")
    if problems:
        print("verdict stream differs from `loopguard replay`:", file=sys.stderr)
        for p in problems[:20]:
            print(f"- {p}", file=sys.stderr)
        return 1
    print(f"same verdicts as replay: {len(want)} verdicts of {len(order_want)} sessions, "
          f"none missing, none doubled, per session in replay's order; {markers} markers set aside")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
