"""What a tool call costs an agent through the Python client (scripts/client-bench.sh).

Against a running `loopguard serve` on BOOTSTRAP with topics EVENTS / VERDICTS: for each
path (read_committed, read_uncommitted), HEALTHY timed calls of healthy sessions (distinct
reads: the guard answers with a judged-through marker; a new session every ten calls, its
first call timed with the rest), with the default deadline, and the share of them answered
by it; LOOPS looping sessions whose third identical call is blocked (timed); the first call
of FRESH (20) fresh processes (one call each, as a hook runs) and of FRESH fresh `Guard`s
in one process. With IDLE_SECONDS set, only an idle reader's fetch
requests per second instead, as librdkafka's statistics count them. Prints one JSON line.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import subprocess
import sys
import time
import uuid

from loopguard import Action, Guard


# Up to this long between an answer and the next call (uniform): the tool and the model.
THINK_S = float(os.environ.get("THINK_MS", "100")) / 1000


def quantiles(xs: list[float]) -> dict:
    xs = sorted(xs)
    pick = lambda q: round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 2)  # noqa: E731
    return {"n": len(xs), "p50_ms": pick(0.5), "p90_ms": pick(0.9), "p99_ms": pick(0.99), "max_ms": round(xs[-1] * 1000, 2)}


def _wall(rfc3339: str) -> float:
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


# One process, one call, as a hook runs: prints its Guard's construction, the call, the close.
FRESH_PROCESS = """
import json, sys, time
t0 = time.perf_counter()
from loopguard import Guard
t1 = time.perf_counter()
g = Guard(sys.argv[1], events_topic=sys.argv[2], verdicts_topic=sys.argv[3], read_uncommitted=sys.argv[4] == "1")
t2 = time.perf_counter()
s = g.session()
s.user_message("Read the code base.")
v = s.tool_call("read_file", {"path": "README.md"})
t3 = time.perf_counter()
deadlines = g.stats().tool_call_deadlines
g.close()
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "construct": t2 - t1, "call": t3 - t2, "close": t4 - t3, "deadlines": deadlines, "verdict": v is not None}))
"""


def fresh_processes(bootstrap: str, events: str, verdicts: str, uncommitted: bool, n: int) -> dict:
    """N processes, each a fresh Guard guarding one healthy call (a new session)."""
    runs, walls = [], []
    for _ in range(n):
        started = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", FRESH_PROCESS, bootstrap, events, verdicts, "1" if uncommitted else "0"],
            capture_output=True, text=True, timeout=60, check=True,
        )
        walls.append(time.perf_counter() - started)
        runs.append(json.loads(out.stdout))
        assert not runs[-1]["verdict"], runs[-1]
    return {
        "first_call": quantiles([r["call"] for r in runs]),
        "construct": quantiles([r["construct"] for r in runs]),
        "close": quantiles([r["close"] for r in runs]),
        "process_wall": quantiles(walls),
        "deadlines": sum(r["deadlines"] for r in runs),
    }


def fresh_guards(bootstrap: str, events: str, verdicts: str, uncommitted: bool, n: int) -> dict:
    """In one process, a fresh Guard per session: each Guard's first (healthy) call."""
    calls, deadlines = [], 0
    for _ in range(n):
        g = Guard(bootstrap, events_topic=events, verdicts_topic=verdicts, read_uncommitted=uncommitted)
        try:
            s = g.session(f"bench-py-f-{uuid.uuid4().hex[:8]}")
            s.user_message("Read the code base.")
            v, t = timed(lambda: s.tool_call("read_file", {"path": "README.md"}))
            assert v is None, v
            calls.append(t)
            deadlines += g.stats().tool_call_deadlines
        finally:
            g.close()
    return {"first_call": quantiles(calls), "deadlines": deadlines}


def run_path(bootstrap: str, events: str, verdicts: str, uncommitted: bool, healthy: int, loops: int) -> dict:
    # The default deadline (1 s): a call it answers is a call that ran unguarded.
    g = Guard(bootstrap, events_topic=events, verdicts_topic=verdicts, read_uncommitted=uncommitted)
    try:
        # Ten reads a session (a long run of reads alone earns a correct discovery warning),
        # a new session every ten calls: each session's first call is timed too, on a
        # partition this process may not have read before.
        sessions: list = []
        costs: list[float] = []
        for i in range(healthy):
            if i % 10 == 0:
                sessions.append(g.session(f"bench-py-h-{uuid.uuid4().hex[:8]}"))
                sessions[-1].user_message("Read the code base.")
            s = sessions[-1]
            v, t = timed(lambda: s.tool_call("read_file", {"path": f"src/m{i}.py"}))
            assert v is None, v
            costs.append(t)
            s.tool_result("read_file", "ok")
            s.turn_end()
            # The tool runs and the model thinks: without it, each call would start just
            # after the commit that answered the last one, and wait a whole commit interval.
            time.sleep(random.uniform(0, THINK_S))
        healthy_deadlines = g.stats().tool_call_deadlines
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
            "healthy_by_deadline": round(healthy_deadlines / max(1, len(costs)), 4),
            "block": quantiles(blocks),
            "block_call_to_written": quantiles(split_in),
            "block_written_to_agent": quantiles(split_out),
            "deadlines": st.tool_call_deadlines,
            "no_verdict_by_marker": st.tool_calls_no_verdict,
            "reader_swaps": getattr(g._reader, "swaps", 0),
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
    # Every consumer of the reader's (its spare too, which fetches nothing), summed.
    fetches = lambda x: sum(b.get("req", {}).get("Fetch", 0) for b in x["brokers"].values())  # noqa: E731
    rate = 0.0
    for name in {x["name"] for x in samples if x.get("type") == "consumer"}:
        mine = [x for x in samples if x.get("name") == name]
        if len(mine) >= 4:
            first, last = mine[2], mine[-1]
            rate += (fetches(last) - fetches(first)) / ((last["ts"] - first["ts"]) / 1e6)
    return round(rate, 2)


def main() -> None:
    bootstrap, events, verdicts = sys.argv[1:4]
    healthy, loops = int(os.environ.get("HEALTHY", "300")), int(os.environ.get("LOOPS", "20"))
    out = {"client": "python"}
    if os.environ.get("IDLE_SECONDS", "0") != "0":
        out["idle_reader_fetches_per_s"] = idle_fetches(bootstrap, events, verdicts, float(os.environ["IDLE_SECONDS"]))
    else:
        fresh = int(os.environ.get("FRESH", "20"))
        for name, unc in (("read_committed", False), ("read_uncommitted", True)):
            out[name] = run_path(bootstrap, events, verdicts, unc, healthy, loops)
            out[name]["fresh_process"] = fresh_processes(bootstrap, events, verdicts, unc, fresh)
            out[name]["fresh_guard"] = fresh_guards(bootstrap, events, verdicts, unc, fresh)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
