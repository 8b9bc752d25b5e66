"""What a healthy tool call costs through the edge, the hook command and the MCP proxy, side
by side in one run (docs/benchmarks.md, "The edge, hooks and the MCP proxy").

    python bench_edge.py EDGE_URL LOOPGUARD_BIN LABEL

EDGE_URL is a running `loopguard edge` (on one read path; LABEL names it). Prints one JSON
line per measurement: through the edge's HTTP (request to answer), through `loopguard hook
claude-code` (a new process per call, as Claude Code runs it: wall time from spawn to exit),
and through `loopguard mcp-proxy` (an MCP SDK client's call, minus the same call to the
server direct). Env: HEALTHY (200), HOOKS (60), MCP_CALLS (200), THINK_MS (100).
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any, Dict, List

HERE = pathlib.Path(__file__).resolve().parent
SERVER = HERE.parents[1] / "tests" / "mcp" / "small_server.py"
HEALTHY = int(os.environ.get("HEALTHY", "200"))
HOOKS = int(os.environ.get("HOOKS", "60"))
MCP_CALLS = int(os.environ.get("MCP_CALLS", "200"))
THINK = int(os.environ.get("THINK_MS", "100")) / 1000


def quantiles(ms: List[float]) -> Dict[str, float]:
    s = sorted(ms)
    at = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return {"n": len(s), "p50": round(statistics.median(s), 2), "p90": round(at(0.9), 2),
            "p99": round(at(0.99), 2), "max": round(s[-1], 2)}


def post(url: str, body: Any) -> Dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return dict(json.loads(r.read() or b"{}"))


def event(session: str, n: int, kind: str, **fields: Any) -> Dict[str, Any]:
    return {"v": 1, "event_id": f"{session}-{kind}-{n}", "session_id": session,
            "ts": int(time.time() * 1000), "type": kind, "agent": "bench", **fields}


def edge_http(edge: str) -> Dict[str, Any]:
    """Healthy calls: ten sessions, each call a different file, with its result between."""
    took: List[float] = []
    fail_open = 0
    sessions = [f"bench-http-{uuid.uuid4().hex[:8]}" for _ in range(10)]
    for i in range(HEALTHY):
        s = sessions[i % len(sessions)]
        call = event(s, i, "tool_call", turn_id=f"t{i}", call_id=f"c{i}", tool="read_file", args={"path": f"src/f{i}.rs"})
        t0 = time.perf_counter()
        answer = post(f"{edge}/v1/check", call)
        took.append((time.perf_counter() - t0) * 1000)
        fail_open += answer.get("answer") == "fail_open"
        assert answer.get("verdict") is None, f"a healthy call got a verdict: {answer}"
        post(f"{edge}/v1/events", event(s, i, "tool_result", call_id=f"c{i}", tool="read_file", status="ok"))
        time.sleep(random.uniform(0, THINK))
    return {"fail_open": fail_open, **quantiles(took)}


def hook_processes(edge: str, binary: str) -> Dict[str, Any]:
    """A new `loopguard hook claude-code` per call, as Claude Code runs it."""
    took: List[float] = []
    allowed = 0
    session = f"bench-hook-{uuid.uuid4().hex[:8]}"
    for i in range(HOOKS):
        payload = {"session_id": session, "hook_event_name": "PreToolUse", "cwd": "/tmp", "tool_name": "Bash",
                   "tool_input": {"command": f"cat notes/{i}.md"}, "tool_use_id": f"toolu_{i}"}
        t0 = time.perf_counter()
        out = subprocess.run([binary, "hook", "claude-code", "--edge", edge], input=json.dumps(payload),
                             capture_output=True, text=True, timeout=10)
        took.append((time.perf_counter() - t0) * 1000)
        allowed += out.stdout.strip() == "{}" and not out.stderr
        time.sleep(random.uniform(0, THINK))
    return {"allowed_without_fail_open": allowed, **quantiles(took)}


async def mcp_calls(command: List[str]) -> List[float]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    took: List[float] = []
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            for _ in range(MCP_CALLS):
                t0 = time.perf_counter()
                r = await s.call_tool("next_number", {})
                took.append((time.perf_counter() - t0) * 1000)
                assert not r.is_error
                await asyncio.sleep(random.uniform(0, THINK / 4))
    return took


def mcp_proxy(edge: str, binary: str) -> Dict[str, Any]:
    direct = asyncio.run(mcp_calls([sys.executable, str(SERVER)]))
    proxied = asyncio.run(mcp_calls([binary, "mcp-proxy", "--edge", edge, "--session",
                                     f"bench-mcp-{uuid.uuid4().hex[:8]}", "--", sys.executable, str(SERVER)]))
    d, p = quantiles(direct), quantiles(proxied)
    return {"direct": d, "proxied": p, "added_p50": round(p["p50"] - d["p50"], 2)}


def main() -> None:
    edge, binary, label = sys.argv[1:4]
    for name, run in (("edge_http", lambda: edge_http(edge)), ("hook_process", lambda: hook_processes(edge, binary)),
                      ("mcp_proxy", lambda: mcp_proxy(edge, binary))):
        print(json.dumps({"path": label, "what": name, **run()}), flush=True)


if __name__ == "__main__":
    main()
