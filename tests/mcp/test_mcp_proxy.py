"""`loopguard mcp-proxy` between the MCP SDK's own client and a real small MCP server
(small_server.py, the SDK's server), against a real broker, guard and edge: a polling loop
is refused on the third identical call with the tool's error result, healthy calls pass
untouched, an abort ends the session, a steer on repeated errors reaches the model with the
next result, and with the edge away every call is forwarded."""

from __future__ import annotations

import asyncio
import os
import pathlib
import time
import uuid
from typing import Any, Dict, List, Tuple

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from conftest import Stack, free_port


def texts(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


async def session_calls(
    command: List[str], calls: List[Tuple[str, Dict[str, Any]]], log: pathlib.Path
) -> List[Any]:
    """Runs the calls in one MCP session through `command`; each result, or the exception
    that ended the session."""
    return await session_calls_paced(command, calls, log, pause=0.0)


async def session_calls_paced(
    command: List[str], calls: List[Tuple[str, Dict[str, Any]]], log: pathlib.Path, pause: float
) -> List[Any]:
    """As `session_calls`, with `pause` seconds between calls (a model's time to answer)."""
    params = StdioServerParameters(
        command=command[0], args=command[1:], env={**os.environ, "SMALL_SERVER_LOG": str(log)}
    )
    out: List[Any] = []
    try:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                for name, args in calls:
                    out.append(await s.call_tool(name, args, read_timeout_seconds=10))
                    await asyncio.sleep(pause)
    except Exception as e:  # the session ended under the client (an abort)
        out.append(e)
    return out


def ran(log: pathlib.Path) -> List[str]:
    return log.read_text().split() if log.exists() else []


def test_a_polling_loop_is_refused_on_the_third_identical_call(stack: Stack, tmp_path: pathlib.Path) -> None:
    log = tmp_path / "ran.log"
    session = f"poll-{uuid.uuid4().hex[:8]}"
    results = asyncio.run(session_calls(stack.proxy(session), [("build_status", {"job": "42"})] * 3, log))
    assert [r.is_error for r in results] == [False, False, True]
    assert texts(results[0]) == "job 42: running"
    assert texts(results[2]).startswith("Blocked: `build_status` was called with the same arguments 3 times")
    assert ran(log) == ["build_status", "build_status"], "the refused call never reached the server"


def test_healthy_calls_pass_untouched(stack: Stack, tmp_path: pathlib.Path) -> None:
    log = tmp_path / "ran.log"
    calls: List[Tuple[str, Dict[str, Any]]] = [("next_number", {})] * 5 + [("build_status", {"job": str(i)}) for i in range(3)]
    results = asyncio.run(session_calls(stack.proxy(f"ok-{uuid.uuid4().hex[:8]}"), calls, log))
    assert [r.is_error for r in results] == [False] * 8
    # next_number answers differently each time: the guard sees change, never a loop.
    assert [texts(r) for r in results[:5]] == ["1", "2", "3", "4", "5"]
    assert len(ran(log)) == 8


def test_an_abort_answers_the_call_and_ends_the_session(stack: Stack, tmp_path: pathlib.Path) -> None:
    log = tmp_path / "ran.log"
    session = f"abort-{uuid.uuid4().hex[:8]}"
    calls: List[Tuple[str, Dict[str, Any]]] = [("build_status", {"job": "9"})] * 4
    results = asyncio.run(session_calls(stack.proxy(session, tenant="aborter"), calls, log))
    assert results[2].is_error and "3 times" in texts(results[2])
    assert len(results) == 4 and isinstance(results[3], Exception), f"the session ended: {results}"
    assert ran(log) == ["build_status", "build_status"]


def test_with_the_edge_away_every_call_is_forwarded_within_the_deadline(stack: Stack, tmp_path: pathlib.Path) -> None:
    log = tmp_path / "ran.log"
    away = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    results = asyncio.run(
        session_calls(stack.proxy(f"away-{uuid.uuid4().hex[:8]}", edge=away), [("build_status", {"job": "1"})] * 4, log)
    )
    assert [r.is_error for r in results] == [False] * 4, "fail open: nothing refused"
    assert ran(log) == ["build_status"] * 4
    assert time.monotonic() - started < 15


def test_a_steer_on_repeated_errors_reaches_the_model_with_the_next_result(stack: Stack, tmp_path: pathlib.Path) -> None:
    log = tmp_path / "ran.log"
    regions = ["eu", "us", "ap", "sa"]
    calls: List[Tuple[str, Dict[str, Any]]] = [("fetch_quota", {"region": r}) for r in regions]

    session = f"errors-{uuid.uuid4().hex[:8]}"
    params_calls = asyncio.run(session_calls_paced(stack.proxy(session), calls, log, pause=0.5))
    assert all(r.is_error for r in params_calls), "every call fails, none is refused"
    extra = [texts(r).split("\n")[1:] for r in params_calls]
    assert extra[:3] == [[], [], []]
    assert extra[3] and "failed 3 times in a row with the same error" in extra[3][0], extra
    assert ran(log) == ["fetch_quota"] * 4, "a steer refuses nothing"
