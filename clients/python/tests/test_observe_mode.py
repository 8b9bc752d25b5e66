"""Observe-mode verdicts (`enforce` false) against a real guard: the guard's test config
puts tenant `observer` in observe mode. They are delivered apart and counted; they never
answer a tool call, never reach `verdicts`/`take_verdicts`, so they never block a call."""

from __future__ import annotations

import asyncio
import time
import uuid

from loopguard import AsyncGuard, Evidence, Guard, Verdict

from guardproc import GuardProcess

WAIT = 10.0


def _looping_session_rounds(s, deadline: float) -> list:
    """Three identical failing calls: tool.exact_repeat would block the third."""
    answers = []
    for _ in range(3):
        v = s.tool_call("bash", {"cmd": "cargo build --locked"}, deadline=deadline)
        answers.append(v)
        s.tool_result("bash", "error", error="error: linker `cc` not found", evidence=Evidence.observed("cc not found"))
        s.turn_end()
    return answers


def test_observe_verdicts_never_block_a_call(guard_process: GuardProcess) -> None:
    g = Guard(guard_process.bootstrap, events_topic=guard_process.events_topic,
              verdicts_topic=guard_process.verdicts_topic, tenant="observer", agent="coder")
    try:
        seen: list[Verdict] = []
        s = g.session(f"observe-{uuid.uuid4().hex[:12]}", on_observed=seen.append)
        s.user_message("The build is broken, fix it.")
        started = time.monotonic()
        answers = _looping_session_rounds(s, deadline=WAIT)
        # Each call is answered "no verdict" by a judged-through marker, not by the deadline.
        assert answers == [None, None, None]
        assert time.monotonic() - started < 3 * WAIT
        deadline = time.monotonic() + WAIT
        while not s.observed and time.monotonic() < deadline:
            time.sleep(0.05)
        observed = s.observed
        assert [v.rule for v in observed] == ["tool.exact_repeat"], observed
        assert observed[0].enforce is False and observed[0].action.value == "block"
        assert observed[0].policy_version and observed[0].policy_version.startswith("sha256:")
        assert seen == observed
        assert s.verdicts == [] and s.take_verdicts(0.0) == []
        stats = g.stats()
        assert stats.verdicts_observed == 1 and stats.verdicts_delivered == 0, stats
        assert stats.tool_call_deadlines == 0 and stats.tool_calls_no_verdict == 3, stats
    finally:
        g.close()


def test_the_async_session_yields_observe_verdicts_apart(guard_process: GuardProcess) -> None:
    async def run() -> None:
        async with AsyncGuard(guard_process.bootstrap, events_topic=guard_process.events_topic,
                              verdicts_topic=guard_process.verdicts_topic, tenant="observer") as g:
            s = g.session(f"observe-async-{uuid.uuid4().hex[:12]}")
            observed = s.observed()
            first = asyncio.ensure_future(observed.__anext__())
            await asyncio.sleep(0)
            await s.user_message("The build is broken, fix it.")
            for _ in range(3):
                assert await s.tool_call("bash", {"cmd": "make"}, deadline=WAIT) is None
                await s.tool_result("bash", "error", error="make: *** no rule", evidence=Evidence.observed("no rule"))
                await s.turn_end()
            v = await asyncio.wait_for(first, WAIT)
            assert v.enforce is False and v.rule == "tool.exact_repeat"
            assert s.verdicts_so_far == []
            assert g.stats().verdicts_observed == 1

    asyncio.run(run())
