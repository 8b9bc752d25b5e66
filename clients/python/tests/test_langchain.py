"""The LangChain adapter on a real agent loop (`create_agent`), a real broker and a real
`loopguard serve`: a model stuck on one call gets it refused on the 3rd try, the tool is not
run, and the model sees the guard's message and answers."""

from __future__ import annotations

import uuid
from typing import Any, List, Optional

import pytest

langchain = pytest.importorskip("langchain", reason="the `langchain` extra is not installed")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

from loopguard import Guard  # noqa: E402
from loopguard.langchain import LoopguardMiddleware  # noqa: E402


class LoopingModel(BaseChatModel):
    """Asks for the same file again and again until a tool answer is an error, then says
    what it saw."""

    @property
    def _llm_type(self) -> str:
        return "looping-test-model"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "LoopingModel":
        return self

    def _generate(self, messages: List[BaseMessage], stop: Optional[List[str]] = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        errors = [m for m in messages if isinstance(m, ToolMessage) and m.status == "error"]
        if errors:
            reply = AIMessage(content=f"I stopped: {errors[-1].content[:30]}")
        else:
            n = sum(isinstance(m, ToolMessage) for m in messages)
            reply = AIMessage(content="", tool_calls=[{"name": "read_file", "args": {"path": "notes.txt"}, "id": f"call-{n}"}])
        reply.usage_metadata = {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_the_third_identical_call_is_refused_and_never_runs(guard: Guard) -> None:
    runs: List[str] = []

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        runs.append(path)
        return "the same three lines"

    session = guard.session(f"lc-{uuid.uuid4().hex[:10]}")
    # A deadline for a loaded CI machine; the calls that get no verdict wait it out too.
    middleware = LoopguardMiddleware(session, tool_call_deadline=3.0)
    model = LoopingModel()
    agent = create_agent(model, [read_file], middleware=[middleware])
    out = agent.invoke({"messages": [HumanMessage(content="What is in notes.txt?")]})

    assert runs == ["notes.txt", "notes.txt"]  # the third call was refused, not run
    refused = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert len(refused) == 1 and refused[0].content.startswith("Blocked")
    assert out["messages"][-1].content.startswith("I stopped: Blocked")
    blocks = [v for v in session.verdicts if v.action.value == "block"]
    assert [v.rule for v in blocks] == ["tool.exact_repeat"]  # (a `warn` on no progress may come too)
    # The model's usage_metadata went out on turn_end: the block says what the loop cost
    # (the two responses before the third call).
    assert blocks[0].loop_cost is not None and blocks[0].loop_cost.tokens == 220
    assert guard.stats().background_errors == 0


class ReadingModel(BaseChatModel):
    """A healthy agent: reads `files` different files, one call a response, then answers."""

    files: int = 12

    @property
    def _llm_type(self) -> str:
        return "reading-test-model"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ReadingModel":
        return self

    def _generate(self, messages: List[BaseMessage], stop: Optional[List[str]] = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        n = sum(isinstance(m, ToolMessage) for m in messages)
        if n >= self.files:
            reply = AIMessage(content=f"Read {n} files.")
        else:
            reply = AIMessage(content="", tool_calls=[{"name": "read_file", "args": {"path": f"src/part_{n}.py"}, "id": f"call-{n}"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_a_healthy_run_pays_milliseconds_per_call_not_the_deadline(guard: Guard) -> None:
    """The same healthy run with and without the guard: each call is answered "no verdict"
    by a judged-through marker, so the guard adds milliseconds per call, not its deadline
    (10 s here, so a call that waited it out would fail the test)."""
    import time

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    def run(middleware: List[Any]) -> float:
        agent = create_agent(ReadingModel(), [read_file], middleware=middleware)
        started = time.perf_counter()
        out = agent.invoke({"messages": [HumanMessage(content="Read the sources.")]})
        assert out["messages"][-1].content == "Read 12 files."
        return time.perf_counter() - started

    run([])  # imports and first-call costs out of the way
    bare = min(run([]) for _ in range(3))
    session = guard.session(f"lc-healthy-{uuid.uuid4().hex[:10]}")
    run([LoopguardMiddleware(session, tool_call_deadline=10.0)])  # the partition assigned
    guarded = min(run([LoopguardMiddleware(guard.session(f"lc-healthy-{uuid.uuid4().hex[:10]}"), tool_call_deadline=10.0)]) for _ in range(3))
    per_call_ms = (guarded - bare) / 12 * 1000
    print(f"\nLangChain healthy run, 12 calls: {bare * 1000:.0f} ms bare, {guarded * 1000:.0f} ms guarded: {per_call_ms:.1f} ms per call")
    stats = guard.stats()
    assert stats.tool_call_deadlines == 0, stats
    assert stats.tool_calls_no_verdict >= 48, stats
    assert per_call_ms < 1000, per_call_ms


def test_async_runs_of_one_middleware_are_guarded_per_thread_id(guard: Guard) -> None:
    """`ainvoke` (LangGraph servers, FastAPI) with one middleware for every conversation:
    each run's session is its thread_id, and each conversation's loop is refused on its
    own third identical call."""
    import asyncio

    runs: List[str] = []

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        runs.append(path)
        return "the same three lines"

    middleware = LoopguardMiddleware(guard, tool_call_deadline=3.0)
    agent = create_agent(LoopingModel(), [read_file], middleware=[middleware])
    threads = [f"lc-async-{uuid.uuid4().hex[:8]}" for _ in range(2)]

    async def both() -> List[Any]:
        return await asyncio.gather(
            *(
                agent.ainvoke({"messages": [HumanMessage(content="What is in notes.txt?")]}, config={"configurable": {"thread_id": t}})
                for t in threads
            )
        )

    outs = asyncio.run(both())
    assert runs == ["notes.txt"] * 4  # two runs by each conversation; each third refused
    for out in outs:
        assert out["messages"][-1].content.startswith("I stopped: Blocked")
    for t in threads:
        conv = middleware._threads[t]
        assert conv.session.session_id == t
        assert [v.rule for v in conv.session.verdicts if v.action.value == "block"] == ["tool.exact_repeat"]
    with pytest.raises(ValueError, match="thread_id"):
        agent.invoke({"messages": [HumanMessage(content="no thread")]})
