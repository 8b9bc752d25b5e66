"""The OpenAI Agents SDK adapter in the SDK's own loop (`Runner.run`, the SDK's
`ScriptedModel`), a real broker and a real `loopguard serve`: a model stuck on one call has
the 3rd refused before it runs and reads the guard's message; a healthy run finishes
untouched."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, List

import pytest

pytest.importorskip("agents", reason="the `openai-agents` extra is not installed")

from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call  # noqa: E402
from agents.usage import Usage as AgentsUsage  # noqa: E402

from loopguard import Guard  # noqa: E402
from loopguard.openai_agents import guard_agent  # noqa: E402

INSTRUCTIONS = "You read files."
set_tracing_disabled(True)  # nothing to export traces to


def scripted(files: int, rounds: int = 10) -> ScriptedModel:
    """Reads `files` paths in turn (the same one when 1: a loop), one call a response, until
    a tool output says it was blocked; then says what it read."""

    def respond(call: ModelCall) -> ModelStep:
        outputs = [str(i.get("output")) for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        usage = AgentsUsage(requests=1, input_tokens=100, output_tokens=10, total_tokens=110)
        blocked = [o for o in outputs if o.startswith("Blocked")]
        if blocked:
            return ModelStep(output=[assistant_message(f"I stopped: {blocked[-1][:30]}")], usage=usage)
        n = len(outputs)
        if n >= rounds:
            return ModelStep(output=[assistant_message(f"Read {n} files.")], usage=usage)
        path = "notes.txt" if files == 1 else f"src/part_{n}.py"
        return ModelStep(output=[function_call("read_file", {"path": path}, call_id=f"call-{n}")], usage=usage)

    return ScriptedModel([ModelStep.respond(respond) for _ in range(rounds + 2)])


def reading_agent(model: ScriptedModel, runs: List[str]) -> Agent[Any]:
    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        runs.append(path)
        return f"contents of {path}"

    return Agent(name="reader", instructions=INSTRUCTIONS, model=model, tools=[read_file])


def test_the_third_identical_call_is_refused_and_the_model_reads_why(guard: Guard) -> None:
    runs: List[str] = []
    session = guard.session(f"oa-{uuid.uuid4().hex[:10]}")
    agent = reading_agent(scripted(files=1), runs)
    result = asyncio.run(Runner.run(guard_agent(agent, session, tool_call_deadline=3.0), "What is in notes.txt?"))

    assert runs == ["notes.txt", "notes.txt"]  # the third call was refused, not run
    assert result.final_output.startswith("I stopped: Blocked")  # the model read the message
    blocks = [v for v in session.verdicts if v.action.value == "block"]
    assert [v.rule for v in blocks] == ["tool.exact_repeat"]
    assert blocks[0].loop_cost is not None and blocks[0].loop_cost.tokens == 220  # usage went out
    assert agent.tools[0].tool_input_guardrails in (None, [])  # the agent passed in is unchanged
    assert guard.stats().background_errors == 0


def test_a_healthy_run_finishes_untouched(guard: Guard) -> None:
    runs: List[str] = []
    model = scripted(files=12, rounds=12)
    session = guard.session(f"oa-healthy-{uuid.uuid4().hex[:8]}")
    started = time.perf_counter()
    result = Runner.run_sync(guard_agent(reading_agent(model, runs), session, tool_call_deadline=10.0), "Read the sources.", max_turns=20)
    took = time.perf_counter() - started

    assert result.final_output == "Read 12 files."
    assert len(runs) == 12
    assert all(call.system_instructions == INSTRUCTIONS for call in model.calls)  # nothing injected
    stats = guard.stats()
    assert stats.tool_call_deadlines == 0, stats  # each call answered by a marker, not the deadline
    assert took < 12 * 1.0, took
    assert session.verdicts == []


def test_an_abort_stops_the_run_with_the_sdks_exception(guard: Guard) -> None:
    """A round budget of 3 announced with the user input: the 4th round's call is refused
    with `LoopguardAbort`, an `AgentsException`, carrying the guard's message."""
    from agents.exceptions import AgentsException

    from loopguard import Limits
    from loopguard.openai_agents import LoopguardAbort

    runs: List[str] = []
    session = guard.session(f"oa-abort-{uuid.uuid4().hex[:8]}")
    agent = guard_agent(reading_agent(scripted(files=12, rounds=12), runs), session, tool_call_deadline=3.0, limits=Limits(max_tool_rounds=3))
    with pytest.raises(LoopguardAbort) as raised:
        Runner.run_sync(agent, "Read the sources.", max_turns=20)

    assert isinstance(raised.value, AgentsException)
    assert str(raised.value).startswith("This request has used 4 model-tool rounds")
    assert raised.value.verdict.rule == "budget.tool_rounds"
    assert len(runs) == 3


PARAGRAPH = "Let me check the config file again to be sure it is right. "
CHUNKS = 60


def test_a_streamed_reasoning_loop_is_steered_before_the_response_ends(guard: Guard) -> None:
    """`Runner.run_streamed`, a scripted model whose first response streams one reasoning
    paragraph 60 times (15 ms apart) before asking for a file: the guard steers on the
    reasoning deltas before that response ends, and the steer is in the next call's
    instructions."""
    from agents import ModelSettings
    from agents.models.interface import ModelTracing
    from openai.types.responses import ResponseReasoningItem
    from openai.types.responses.response_reasoning_item import Summary

    usage = AgentsUsage(requests=1, input_tokens=100, output_tokens=10, total_tokens=110)
    looping = ModelStep(
        output=[
            ResponseReasoningItem(id="rs_1", type="reasoning", summary=[Summary(type="summary_text", text=PARAGRAPH)] * CHUNKS),
            function_call("read_file", {"path": "config.toml"}, call_id="c1"),
        ],
        usage=usage,
    )
    streamed: List[int] = []

    async def slowly(call: ModelCall) -> Any:
        """The SDK's own stream of the looping step, each reasoning delta 15 ms after the last."""
        events = ScriptedModel([looping]).stream_response(
            None, [], ModelSettings(), [], None, [], ModelTracing.DISABLED, previous_response_id=None, conversation_id=None, prompt=None
        )
        async for event in events:
            if event.type == "response.reasoning_summary_text.delta":
                await asyncio.sleep(0.015)
                streamed.append(1)
            yield event

    model = ScriptedModel([ModelStep.stream(slowly), ModelStep(output=[assistant_message("The config is fine.")], usage=usage)])
    runs: List[str] = []
    session = guard.session(f"oa-stream-{uuid.uuid4().hex[:8]}")
    steered_at: List[int] = []
    session.on_verdict(lambda v: steered_at.append(len(streamed)) if v.action.value == "steer" else None)

    async def run() -> Any:
        result = Runner.run_streamed(guard_agent(reading_agent(model, runs), session, tool_call_deadline=3.0), "Why does the deploy fail?")
        async for _ in result.stream_events():
            pass
        return result

    result = asyncio.run(run())
    assert result.final_output == "The config is fine."
    steers = [v for v in session.verdicts if v.action.value == "steer"]
    assert steers and steers[0].rule.startswith("reasoning."), session.verdicts
    assert steered_at and steered_at[0] < CHUNKS, (steered_at, CHUNKS)  # before the response ended
    assert len(model.calls) == 2 and steers[0].message in (model.calls[1].system_instructions or "")
    assert runs == ["config.toml"]
    assert guard.stats().background_errors == 0
