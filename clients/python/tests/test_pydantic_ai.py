"""The PydanticAI adapter in PydanticAI's own loop (`Agent.run`, its `FunctionModel`), a real
broker and a real `loopguard serve`: a model stuck on one call has the 3rd refused before it
runs and reads the guard's message; a healthy run finishes untouched."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, List

import pytest

pytest.importorskip("pydantic_ai", reason="the `pydantic-ai` extra is not installed")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.toolsets import FunctionToolset  # noqa: E402
from pydantic_ai.usage import RequestUsage  # noqa: E402

from loopguard import Guard  # noqa: E402
from loopguard.pydantic_ai import LoopguardToolset  # noqa: E402


def scripted(files: int, rounds: int, instructions: List[str]) -> FunctionModel:
    """Reads `files` paths in turn (the same one when 1: a loop), one call a response, until
    a tool's answer says it was blocked; then says what it read. Keeps each request's
    instructions."""

    def respond(messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        instructions.append(info.instructions or "")
        answers = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if hasattr(p, "tool_call_id") and hasattr(p, "content")]
        usage = RequestUsage(input_tokens=100, output_tokens=10)
        blocked = [str(p.content) for p in answers if "Blocked" in str(p.content)]
        if blocked:
            return ModelResponse(parts=[TextPart(f"I stopped: {blocked[-1][:30]}")], usage=usage)
        n = sum(isinstance(p, ToolReturnPart) for p in answers)
        if n >= rounds:
            return ModelResponse(parts=[TextPart(f"Read {n} files.")], usage=usage)
        path = "notes.txt" if files == 1 else f"src/part_{n}.py"
        return ModelResponse(parts=[ToolCallPart("read_file", {"path": path}, tool_call_id=f"call-{n}")], usage=usage)

    return FunctionModel(respond)


def tools(runs: List[str]) -> FunctionToolset[Any]:
    def read_file(path: str) -> str:
        """Read a file."""
        runs.append(path)
        return f"contents of {path}"

    return FunctionToolset([read_file])


def test_the_third_identical_call_is_refused_and_the_model_reads_why(guard: Guard) -> None:
    runs: List[str] = []
    session = guard.session(f"pa-{uuid.uuid4().hex[:10]}")
    agent = Agent(scripted(1, 10, []), toolsets=[LoopguardToolset(tools(runs), session, tool_call_deadline=3.0)])
    result = asyncio.run(agent.run("What is in notes.txt?"))

    assert runs == ["notes.txt", "notes.txt"]  # the third call was refused, not run
    assert result.output.startswith("I stopped: Blocked")  # the model read the message
    blocks = [v for v in session.verdicts if v.action.value == "block"]
    assert [v.rule for v in blocks] == ["tool.exact_repeat"]
    assert blocks[0].loop_cost is not None and blocks[0].loop_cost.tokens == 220  # usage went out
    assert guard.stats().background_errors == 0


def test_a_healthy_run_finishes_untouched(guard: Guard) -> None:
    runs: List[str] = []
    instructions: List[str] = []
    conversation = f"pa-healthy-{uuid.uuid4().hex[:8]}"
    toolset = LoopguardToolset(tools(runs), guard, tool_call_deadline=10.0)
    agent = Agent(scripted(12, 12, instructions), instructions="You read files.", toolsets=[toolset])
    started = time.perf_counter()
    result = agent.run_sync("Read the sources.", conversation_id=conversation)
    took = time.perf_counter() - started

    assert result.output == "Read 12 files."
    assert len(runs) == 12
    assert set(instructions) == {"You read files."}  # nothing injected
    stats = guard.stats()
    assert stats.tool_call_deadlines == 0, stats  # each call answered by a marker, not the deadline
    assert took < 12 * 1.0, took
    assert toolset.conversations is not None and toolset.conversations.named[conversation].session.verdicts == []


def test_an_abort_stops_the_run_with_loopguard_abort(guard: Guard) -> None:
    """A round budget of 3 announced with the prompt: the guard warns on the 3rd round (the
    warning is in the next request's instructions only) and aborts the 4th: its call raises
    `LoopguardAbort`, an `AgentRunError`, with the guard's message, and the tool does not run."""
    from pydantic_ai.exceptions import AgentRunError

    from loopguard import Limits
    from loopguard.pydantic_ai import LoopguardAbort

    runs: List[str] = []
    instructions: List[str] = []
    session = guard.session(f"pa-abort-{uuid.uuid4().hex[:8]}")
    toolset = LoopguardToolset(tools(runs), session, tool_call_deadline=3.0, limits=Limits(max_tool_rounds=3))
    agent = Agent(scripted(12, 12, instructions), instructions="You read files.", toolsets=[toolset])
    with pytest.raises(LoopguardAbort) as raised:
        agent.run_sync("Read the sources.")

    assert isinstance(raised.value, AgentRunError)
    assert str(raised.value).startswith("This request has used 4 model-tool rounds")
    assert raised.value.verdict.rule == "budget.tool_rounds"
    assert len(runs) == 3  # the 4th round's call was refused
    warned = [i for i in instructions if "3 of 3 tool rounds used" in i]
    assert len(warned) == 1, instructions  # the warning, in one request only


PARAGRAPH = "Let me check the config file again to be sure it is right. "
CHUNKS = 60


def test_a_streamed_reasoning_loop_is_steered_before_the_response_ends(guard: Guard) -> None:
    """`LoopguardCapability` and `agent.run_stream`, a `FunctionModel` whose first response
    streams one thinking paragraph 60 times (15 ms apart) before asking for a file: the
    guard steers on the thinking deltas before that response ends, and the steer is in the
    next request's instructions."""
    from pydantic_ai.models.function import DeltaThinkingPart, DeltaToolCall

    from loopguard.pydantic_ai import LoopguardCapability

    instructions: List[str] = []
    streamed: List[int] = []

    async def stream(messages: List[ModelMessage], info: AgentInfo) -> Any:
        instructions.append(info.instructions or "")
        if len(instructions) > 1:
            yield "The config is fine."
            return
        for _ in range(CHUNKS):
            await asyncio.sleep(0.015)
            streamed.append(1)
            yield {0: DeltaThinkingPart(content=PARAGRAPH)}
        yield {1: DeltaToolCall(name="read_file", json_args='{"path": "config.toml"}', tool_call_id="c1")}

    runs: List[str] = []
    session = guard.session(f"pa-stream-{uuid.uuid4().hex[:8]}")
    steered_at: List[int] = []
    session.on_verdict(lambda v: steered_at.append(len(streamed)) if v.action.value == "steer" else None)
    agent = Agent(
        FunctionModel(stream_function=stream),
        instructions="You read files.",
        toolsets=[tools(runs)],
        capabilities=[LoopguardCapability(session, tool_call_deadline=3.0)],
    )

    async def run() -> str:
        async with agent.run_stream("Why does the deploy fail?") as result:
            return await result.get_output()

    assert asyncio.run(run()) == "The config is fine."
    steers = [v for v in session.verdicts if v.action.value == "steer"]
    assert steers and steers[0].rule.startswith("reasoning."), session.verdicts
    assert steered_at and steered_at[0] < CHUNKS, (steered_at, CHUNKS)  # before the response ended
    assert len(instructions) == 2 and steers[0].message in instructions[1]
    assert runs == ["config.toml"]
    assert steers[0].loop_cost is not None
    assert guard.stats().background_errors == 0
