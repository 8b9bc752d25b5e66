"""Reasoning streamed through the LangGraph hooks and the LangChain middleware, in their own
loops (`create_react_agent` streamed with `stream_mode="messages"`, `create_agent` with
`astream`), a scripted streaming chat model, a real broker and a real `loopguard serve`: a
model whose streamed reasoning repeats one paragraph is steered before its response ends,
and the steer reaches its next model call."""

from __future__ import annotations

import asyncio
import time
import uuid
import warnings
from typing import Any, Iterator, List, Optional

import pytest

pytest.importorskip("langgraph.prebuilt", reason="the `langgraph` extra is not installed")

from langchain_core.language_models.chat_models import BaseChatModel, generate_from_stream  # noqa: E402
from langchain_core.messages import AIMessageChunk, BaseMessage, HumanMessage, SystemMessage  # noqa: E402
from langchain_core.outputs import ChatGenerationChunk, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402

from loopguard import Guard, Verdict  # noqa: E402
from loopguard.langgraph import LoopguardHooks  # noqa: E402

PARAGRAPH = "Let me check the config file again to be sure it is right. "
CHUNKS = 60
USAGE = {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}


class ReasoningLoopModel(BaseChatModel):
    """Its first response streams the same reasoning paragraph `CHUNKS` times (15 ms apart),
    then asks for a file; the next one answers. Records each call's messages and how many
    reasoning chunks it has streamed so far. LangChain reports each chunk to the callbacks
    when it streams the model (the graph streamed); `invoke` alone gets the whole response."""

    seen: List[List[BaseMessage]] = []
    streamed: List[int] = []

    @property
    def _llm_type(self) -> str:
        return "reasoning-loop-test-model"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ReasoningLoopModel":
        return self

    def _generate(self, messages: List[BaseMessage], stop: Optional[List[str]] = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        return generate_from_stream(self._stream(messages, stop, **kwargs))

    def _stream(self, messages: List[BaseMessage], stop: Optional[List[str]] = None, run_manager: Any = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        self.seen.append(list(messages))
        if len(self.seen) > 1:
            yield ChatGenerationChunk(message=AIMessageChunk(content="The config is fine.", usage_metadata=USAGE))  # type: ignore[arg-type]
            return
        for n in range(CHUNKS):
            time.sleep(0.015)
            self.streamed.append(n + 1)
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=[{"type": "reasoning", "reasoning": PARAGRAPH}]))
            yield chunk
        call = {"name": "read_file", "args": '{"path": "config.toml"}', "id": "c1", "index": 0}
        chunk = ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[call], usage_metadata=USAGE))  # type: ignore[list-item, arg-type]
        yield chunk


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


def steer_of(verdicts: List[Verdict]) -> Verdict:
    steers = [v for v in verdicts if v.action.value == "steer"]
    assert steers, verdicts
    assert steers[0].rule.startswith("reasoning."), steers[0]
    return steers[0]


def test_a_streamed_reasoning_loop_is_steered_before_the_response_ends(guard: Guard) -> None:
    model = ReasoningLoopModel(seen=[], streamed=[])
    lg = LoopguardHooks(guard, tool_call_deadline=3.0)
    thread = f"lg-stream-{uuid.uuid4().hex[:8]}"
    steered_at: List[int] = []
    conv = lg._conversations.of(thread, "")
    conv.session.on_verdict(lambda v: steered_at.append(len(model.streamed)) if v.action.value == "steer" else None)
    with warnings.catch_warnings():  # create_react_agent is deprecated for create_agent
        warnings.simplefilter("ignore")
        agent = create_react_agent(lg.model(model), lg.tool_node([read_file]), pre_model_hook=lg.pre_model_hook, post_model_hook=lg.post_model_hook)
    config = {"configurable": {"thread_id": thread}}
    parts = list(agent.stream({"messages": [HumanMessage(content="Why does the deploy fail?")]}, config=config, stream_mode="messages"))

    assert parts  # the graph streamed the model's chunks
    steer = steer_of(conv.session.verdicts)
    assert steered_at and steered_at[0] < CHUNKS, (steered_at, CHUNKS)  # before the response ended
    assert len(model.seen) == 2
    injected = [str(m.content) for m in model.seen[1] if isinstance(m, SystemMessage)]
    assert any(steer.message in text for text in injected), injected  # it reached the next call
    assert steer.loop_cost is not None
    assert guard.stats().background_errors == 0


def test_the_langchain_middleware_publishes_a_streamed_reasoning_loop(guard: Guard) -> None:
    pytest.importorskip("langchain.agents", reason="the `langchain` extra is not installed")
    from langchain.agents import create_agent

    from loopguard.langchain import LoopguardMiddleware

    model = ReasoningLoopModel(seen=[], streamed=[])
    session = guard.session(f"lc-stream-{uuid.uuid4().hex[:8]}")
    steered_at: List[int] = []
    session.on_verdict(lambda v: steered_at.append(len(model.streamed)) if v.action.value == "steer" else None)
    agent = create_agent(model, [read_file], middleware=[LoopguardMiddleware(session, tool_call_deadline=3.0)])

    async def run() -> List[Any]:
        return [p async for p in agent.astream({"messages": [HumanMessage(content="Why does the deploy fail?")]}, stream_mode="messages")]

    assert asyncio.run(run())
    steer = steer_of(session.verdicts)
    assert steered_at and steered_at[0] < CHUNKS, (steered_at, CHUNKS)
    injected = [str(m.content) for m in model.seen[1] if isinstance(m, SystemMessage)]
    assert any(steer.message in text for text in injected), injected
