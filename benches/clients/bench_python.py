"""What a tool call costs an agent through the Python client (scripts/client-bench.sh).

Against a running `loopguard serve` on BOOTSTRAP with topics EVENTS / VERDICTS: for each
path (read_committed, read_uncommitted), HEALTHY timed calls of healthy sessions (distinct
reads: the guard answers with a judged-through marker) and LOOPS looping sessions whose
third identical call is blocked (timed). With IDLE_SECONDS set, only an idle reader's fetch
requests per second instead, as librdkafka's statistics count them. Prints one JSON line.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import sys
import time
import uuid

from loopguard import Action, Guard


# Up to this long between an answer and the next call (uniform): the tool and the model.
THINK_S = float(os.environ.get("THINK_MS", "100")) / 1000


def quantiles(xs: list[float]) -> dict:
    xs = sorted(xs)
    pick = lambda q: round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 2)  # noqa: E731
    return {"n": len(xs), "p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": round(xs[-1] * 1000, 2)}


def _wall(rfc3339: str) -> float:
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def run_path(bootstrap: str, events: str, verdicts: str, uncommitted: bool, healthy: int, loops: int) -> dict:
    g = Guard(bootstrap, events_topic=events, verdicts_topic=verdicts, read_uncommitted=uncommitted, tool_call_deadline=5.0)
    try:
        # Ten reads a session: a long run of reads alone earns a (correct) discovery warning.
        sessions = [g.session(f"bench-py-h-{uuid.uuid4().hex[:8]}") for _ in range((healthy + 9) // 10)]
        for s in sessions:
            s.user_message("Read the code base.")
            s.tool_call("read_file", {"path": "warm"})  # the partition is read from here on
        costs = []
        for i in range(healthy):
            s = sessions[i % len(sessions)]
            v, t = timed(lambda: s.tool_call("read_file", {"path": f"src/m{i}.py"}))
            assert v is None, v
            costs.append(t)
            s.tool_result("read_file", "ok")
            s.turn_end()
            # The tool runs and the model thinks: without it, each call would start just
            # after the commit that answered the last one, and wait a whole commit interval.
            time.sleep(random.uniform(0, THINK_S))
        blocks: list[float] = []
        split_in: list[float] = []
        split_out: list[float] = []
        for _ in range(loops):
            s = g.session(f"bench-py-l-{uuid.uuid4().hex[:8]}")
            s.user_message("Fix the build.")
            for n in range(3):
                v, t = timed(lambda: s.tool_call("bash", {"cmd": "cargo build"}))
                if n < 2:
                    assert v is None, v
                    s.tool_result("bash", "error", error="linker `cc` not found")
                    s.turn_end()
            assert v is not None and v.action is Action.BLOCK, v
            blocks.append(t)
            # Where a block's time goes: to the guard writing it, then to the agent having it.
            sent = v.received_at - t  # the call's start, on the wall clock
            split_in.append(_wall(v.emitted_at) - sent)
            split_out.append(v.received_at - _wall(v.emitted_at))
        st = g.stats()
        return {
            "healthy": quantiles(costs),
            "block": quantiles(blocks),
            "block_call_to_written": quantiles(split_in),
            "block_written_to_agent": quantiles(split_out),
            "deadlines": st.tool_call_deadlines,
            "no_verdict_by_marker": st.tool_calls_no_verdict,
        }
    finally:
        g.close()


def idle_fetches(bootstrap: str, events: str, verdicts: str, seconds: float) -> float:
    samples: list[dict] = []
    g = Guard(
        bootstrap,
        events_topic=events,
        verdicts_topic=verdicts,
        kafka={"statistics.interval.ms": "1000", "stats_cb": lambda s: samples.append(json.loads(s))},
    )
    try:
        s = g.session(f"bench-py-idle-{uuid.uuid4().hex[:8]}")
        s.user_message("hello")  # one partition assigned, then nothing
        time.sleep(seconds)
    finally:
        g.close()
    readers = [x for x in samples if x.get("type") == "consumer"]
    readers = [x for x in readers if x["name"] == readers[-1]["name"]]  # the verdict reader's
    fetches = lambda x: sum(b.get("req", {}).get("Fetch", 0) for b in x["brokers"].values())  # noqa: E731
    first, last = readers[2], readers[-1]
    return round((fetches(last) - fetches(first)) / ((last["ts"] - first["ts"]) / 1e6), 2)


def main() -> None:
    bootstrap, events, verdicts = sys.argv[1:4]
    healthy, loops = int(os.environ.get("HEALTHY", "300")), int(os.environ.get("LOOPS", "20"))
    out = {"client": "python"}
    if os.environ.get("IDLE_SECONDS", "0") != "0":
        out["idle_reader_fetches_per_s"] = idle_fetches(bootstrap, events, verdicts, float(os.environ["IDLE_SECONDS"]))
    else:
        for name, unc in (("read_committed", False), ("read_uncommitted", True)):
            out[name] = run_path(bootstrap, events, verdicts, unc, healthy, loops)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
