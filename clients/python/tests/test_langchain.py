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
    assert guard.stats().background_errors == 0
