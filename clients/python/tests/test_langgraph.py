"""The LangGraph adapter in LangGraph's own loop (`create_react_agent`, and a graph of one's
own with a `ToolNode`), a scripted LangChain chat model, a real broker and a real `loopguard
serve`: a model stuck on one call has the 3rd refused before it runs and reads the guard's
message; a healthy run finishes untouched."""

from __future__ import annotations

import asyncio
import time
import uuid
import warnings
from typing import Any, List, Optional

import pytest

pytest.importorskip("langgraph.prebuilt", reason="the `langgraph` extra is not installed")

from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import create_react_agent, tools_condition  # noqa: E402

from loopguard import Guard  # noqa: E402
from loopguard.langgraph import LoopguardHooks  # noqa: E402


class ScriptedModel(BaseChatModel):
    """Reads `files` paths in turn (the same one when `files` is 1: a loop), one call a
    response, until a tool answer is an error; then says what it read. Records what each
    call was given."""

    files: int = 1
    rounds: int = 10
    seen: List[List[BaseMessage]] = []

    @property
    def _llm_type(self) -> str:
        return "scripted-test-model"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedModel":
        return self

    def _generate(self, messages: List[BaseMessage], stop: Optional[List[str]] = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        errors = [m for m in messages if isinstance(m, ToolMessage) and m.status == "error"]
        n = sum(isinstance(m, ToolMessage) for m in messages)
        if errors:
            reply = AIMessage(content=f"I stopped: {str(errors[-1].content)[:30]}")
        elif n >= self.rounds:
            reply = AIMessage(content=f"Read {n} files.")
        else:
            path = "notes.txt" if self.files == 1 else f"src/part_{n}.py"
            reply = AIMessage(content="", tool_calls=[{"name": "read_file", "args": {"path": path}, "id": f"call-{n}"}])
        reply.usage_metadata = {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}
        return ChatResult(generations=[ChatGeneration(message=reply)])


def react_agent(model: BaseChatModel, tools: List[Any], lg: Optional[LoopguardHooks]) -> Any:
    with warnings.catch_warnings():  # create_react_agent is deprecated for create_agent
        warnings.simplefilter("ignore")
        if lg is None:
            return create_react_agent(model, tools)
        return create_react_agent(model, lg.tool_node(tools), pre_model_hook=lg.pre_model_hook, post_model_hook=lg.post_model_hook)


def reader(runs: List[str]) -> Any:
    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        runs.append(path)
        return f"contents of {path}"

    return read_file


def test_the_react_agent_is_refused_the_third_identical_call(guard: Guard) -> None:
    runs: List[str] = []
    session = guard.session(f"lg-{uuid.uuid4().hex[:10]}")
    agent = react_agent(ScriptedModel(seen=[]), [reader(runs)], LoopguardHooks(session, tool_call_deadline=3.0))
    out = agent.invoke({"messages": [HumanMessage(content="What is in notes.txt?")]})

    assert runs == ["notes.txt", "notes.txt"]  # the third call was refused, not run
    refused = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert len(refused) == 1 and str(refused[0].content).startswith("Blocked")
    assert out["messages"][-1].content.startswith("I stopped: Blocked")  # the model read it
    blocks = [v for v in session.verdicts if v.action.value == "block"]
    assert [v.rule for v in blocks] == ["tool.exact_repeat"]
    assert blocks[0].loop_cost is not None and blocks[0].loop_cost.tokens == 220  # usage went out
    assert guard.stats().background_errors == 0


def test_a_healthy_react_run_finishes_untouched(guard: Guard) -> None:
    runs: List[str] = []
    bare = react_agent(ScriptedModel(files=12, rounds=12, seen=[]), [reader([])], None)
    expected = [m.content for m in bare.invoke({"messages": [HumanMessage(content="Read the sources.")]})["messages"][1:]]

    model = ScriptedModel(files=12, rounds=12, seen=[])
    lg = LoopguardHooks(guard, tool_call_deadline=10.0)
    agent = react_agent(model, [reader(runs)], lg)
    thread = f"lg-healthy-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    out = agent.invoke({"messages": [HumanMessage(content="Read the sources.")]}, config={"configurable": {"thread_id": thread}})
    took = time.perf_counter() - started

    assert [m.content for m in out["messages"][1:]] == expected  # nothing added, nothing refused
    assert len(runs) == 12
    injected = [m.content for call in model.seen for m in call if isinstance(m, SystemMessage)]
    assert injected == [], (injected, lg._threads[thread].session.verdicts)  # nothing injected
    stats = guard.stats()
    assert stats.tool_call_deadlines == 0, stats  # each call answered by a marker, not the deadline
    assert took < 12 * 1.0, took
    assert lg._threads[thread].session.session_id == thread


def test_a_graph_of_ones_own_with_the_guarded_tool_node_async(guard: Guard) -> None:
    """Only the `ToolNode` guarded, in a hand-built graph run with `ainvoke`: the node checks
    each call itself and answers the third identical one with the guard's message."""
    runs: List[str] = []
    model = ScriptedModel(seen=[])
    lg = LoopguardHooks(guard.session(f"lg-node-{uuid.uuid4().hex[:8]}"), tool_call_deadline=3.0)

    def call_model(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", lg.tool_node([reader(runs)]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    out = asyncio.run(graph.compile().ainvoke({"messages": [HumanMessage(content="What is in notes.txt?")]}))

    assert runs == ["notes.txt", "notes.txt"]
    assert out["messages"][-1].content.startswith("I stopped: Blocked")
    assert [v.rule for v in lg.session.verdicts if v.action.value == "block"] == ["tool.exact_repeat"]


def test_an_abort_ends_the_graph_with_the_guards_message_after_its_warning(guard: Guard) -> None:
    """A round budget of 3 announced with the user message: the guard warns on the 3rd round
    (the warning reaches the next model call only) and aborts the 4th: its call is refused
    and the graph ends on the verdict's message."""
    from loopguard import Limits

    runs: List[str] = []
    model = ScriptedModel(files=12, rounds=12, seen=[])
    session = guard.session(f"lg-abort-{uuid.uuid4().hex[:8]}")
    lg = LoopguardHooks(session, tool_call_deadline=3.0, limits=Limits(max_tool_rounds=3))
    out = react_agent(model, [reader(runs)], lg).invoke({"messages": [HumanMessage(content="Read the sources.")]})

    assert len(runs) == 3  # the 4th round's call was refused
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and last.name == "loopguard" and not last.tool_calls
    assert last.content.startswith("This request has used 4 model-tool rounds")
    injected = [str(m.content) for call in model.seen for m in call if isinstance(m, SystemMessage)]
    assert injected and injected[0].startswith("3 of 3 tool rounds used")  # the warning, once
    assert not any(isinstance(m, SystemMessage) for m in out["messages"])  # never in the history
    assert [v.rule for v in session.verdicts if v.action.value == "abort"] == ["budget.tool_rounds"]


def test_observe_mode_verdicts_are_never_acted_on(guard_process: Any) -> None:
    """Tenant `observer` runs every rule in observe mode (conftest's guard): the looping
    model's calls all run, and what the guard would have done reaches `on_observed` only."""
    observer = Guard(
        guard_process.bootstrap,
        events_topic=guard_process.events_topic,
        verdicts_topic=guard_process.verdicts_topic,
        tenant="observer",
    )
    try:
        seen: List[Any] = []
        session = observer.session(f"lg-observe-{uuid.uuid4().hex[:8]}", on_observed=seen.append)
        runs: List[str] = []
        agent = react_agent(ScriptedModel(rounds=4, seen=[]), [reader(runs)], LoopguardHooks(session, tool_call_deadline=3.0))
        out = agent.invoke({"messages": [HumanMessage(content="What is in notes.txt?")]})
        assert runs == ["notes.txt"] * 4 and out["messages"][-1].content == "Read 4 files."
        assert session.verdicts == []
        deadline = time.monotonic() + 5
        while not any(v.rule == "tool.exact_repeat" for v in seen) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(v.rule == "tool.exact_repeat" and not v.enforce for v in seen)
    finally:
        observer.close()
