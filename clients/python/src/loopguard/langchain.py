"""LangChain adapter: a middleware for `langchain.agents.create_agent` that guards one session.

What it does with each part of the agent loop, and with each action (docs/contract.md):

- the run starts: the last human message is published as `user_message`;
- a model response, as it streams (the agent streamed: `stream`, `astream`): each chunk of
  reasoning as `reasoning`, of text as `content`, so a reasoning loop is steered before the
  response ends; when it is complete: its reasoning whole unless it streamed, its text as
  `assistant_message`; every tool call it asks for as
  `tool_call` (before any runs, each waiting up to the guard's deadline), then `turn_end`
  with the response's `usage_metadata` as `usage` (what loops cost, on verdicts and
  dashboards);
- `block` on a call: the call is not run; it is answered with an error `ToolMessage`
  carrying the verdict's message, and the round's later calls are skipped the same way;
- `abort`: every call of the round is refused, and the next model call gets the message and
  no tools, so the model writes its status summary and the run ends;
- `steer` and `warn` (any time, e.g. on a result): their message goes into the next model
  call only (a `warn` is advice for this request, never stored in the history);
  `directives.reasoning_effort` goes into that call's model settings;
- a tool result: `tool_result` with its status and the hash of its output as evidence.

    from langchain.agents import create_agent
    from loopguard import Guard
    from loopguard.langchain import LoopguardMiddleware

    guard = Guard("kafka:9092", agent="support-bot")
    agent = create_agent(model, tools, middleware=[LoopguardMiddleware(guard)])
    agent.invoke({"messages": [...]}, config={"configurable": {"thread_id": "sess-1"}})
    await agent.ainvoke(...)  # the same middleware, async

Given the `Guard`, each conversation's session is its `thread_id`; given a `Session`
(`LoopguardMiddleware(guard.session("sess-1"))`), every run of the agent is that session.
Install with the `langchain` extra (`pip install "./clients/python[langchain]"`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Dict, List, Optional, Union

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest

from ._conversation import Conversation, Conversations
from ._lcmessages import StreamPublisher, publish_result, reasoning_of, text_of, thread_id, usage_of, with_callback
from .client import Guard, Session
from .types import Action, Limits, Verdict

_NO_THREAD = (
    "LoopguardMiddleware(guard) names each session by the run's thread_id: invoke with "
    'config={"configurable": {"thread_id": ...}}, or pass a Session'
)


class _Conversation(Conversation):
    """One session's side of the middleware: the verdicts still to apply."""

    def __init__(self, session: Session):
        super().__init__(session)
        self.refused: Dict[str, Verdict] = {}  # tool call id -> the verdict refusing it
        self.streams = StreamPublisher(lambda metadata: self)  # this conversation's model calls


class LoopguardMiddleware(AgentMiddleware):
    """Publishes the agent's steps and applies the guard's verdicts, sync (`invoke`,
    `stream`) and async (`ainvoke`, `astream`) alike.

    Given a `Guard`, each conversation is the session named by the run's `thread_id`
    (`config={"configurable": {"thread_id": ...}}`, as LangGraph servers and checkpointers
    use): one middleware for every conversation. Given a `Session`, every run is that one."""

    def __init__(self, target: Union[Guard, Session], tool_call_deadline: Optional[float] = None, limits: Optional[Limits] = None):
        """`tool_call_deadline`: how long each tool call waits for a verdict (default: the
        guard's `tool_call_deadline`); `limits`: the round budget announced with each user
        message (the guard's policy applies without one)."""
        super().__init__()
        self.deadline = tool_call_deadline
        self.limits = limits
        self._conversations = Conversations(target, _Conversation)
        self._threads = self._conversations.named

    @property
    def session(self) -> Session:
        """The session of the current run (its thread's, when given a `Guard`)."""
        return self._conversation().session

    def _conversation(self) -> _Conversation:
        convs = self._conversations
        return convs.fixed or convs.of(thread_id(), _NO_THREAD)  # a fixed session needs no run

    # -- hooks, sync ---------------------------------------------------------------------

    def before_agent(self, state: Any, runtime: Any) -> Optional[Dict[str, Any]]:
        messages = state.get("messages", []) if isinstance(state, dict) else []
        human = [m for m in messages if isinstance(m, HumanMessage)]
        if human:
            self._conversation().session.user_message(text_of(human[-1].content), self.limits)
        return None

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        conv = self._conversation()
        response = handler(_advised(conv, request))
        self._after_model(conv, response)
        return response

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        conv = self._conversation()
        refusal = _refusal(conv, request)
        if refusal is not None:
            return refusal
        result = handler(request)
        _publish_result(conv, request, result)
        return result

    # -- hooks, async: the same, the waits for verdicts off the event loop ---------------

    async def abefore_agent(self, state: Any, runtime: Any) -> Optional[Dict[str, Any]]:
        return self.before_agent(state, runtime)  # publishing only queues

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        conv = self._conversation()
        response = await handler(_advised(conv, request))
        await asyncio.to_thread(self._after_model, conv, response)
        return response

    async def awrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]) -> Any:
        conv = self._conversation()
        refusal = _refusal(conv, request)
        if refusal is not None:
            return refusal
        result = await handler(request)
        _publish_result(conv, request, result)
        return result

    # -- what a model response publishes -------------------------------------------------

    def _after_model(self, conv: _Conversation, response: ModelResponse) -> None:
        """Its text, then each tool call it asks for (each waiting for the guard's answer),
        then `turn_end`; a block or abort refuses the round's calls from there on."""
        ai = next((m for m in response.result if isinstance(m, AIMessage)), None)
        if ai is None:
            return
        session = conv.session
        conv.response(reasoning_of(ai), text_of(ai.content))
        refused: Optional[Verdict] = None
        for call in ai.tool_calls:
            verdict = None
            if refused is None:  # after a block, the round's other calls are not published
                verdict = session.tool_call(call["name"], call["args"], call_id=call.get("id") or None, deadline=self.deadline)
            if verdict is not None and verdict.action in (Action.BLOCK, Action.ABORT):
                refused = verdict
                if verdict.action is Action.ABORT:
                    conv.aborted = verdict
            if refused is not None and call.get("id"):
                with conv.lock:
                    conv.refused[str(call["id"])] = refused
        session.turn_end(usage=usage_of(ai))


def _refusal(conv: _Conversation, request: ToolCallRequest) -> Optional[ToolMessage]:
    """The error answer of a call the guard refused (the tool is not run), else None."""
    call = request.tool_call
    with conv.lock:
        verdict = conv.refused.pop(str(call.get("id")), None)
    if verdict is None:
        return None
    return ToolMessage(content=verdict.message, tool_call_id=call.get("id") or "", name=call["name"], status="error")


def _publish_result(conv: _Conversation, request: ToolCallRequest, result: Any) -> None:
    if isinstance(result, ToolMessage):
        publish_result(conv.session, request.tool_call["name"], request.tool_call.get("id"), result)


def _advised(conv: _Conversation, request: ModelRequest) -> ModelRequest:
    """The request with the steers and warns received since the last model call (and an
    abort's message, with no tools) added."""
    advice = conv.take_advice()
    aborted = conv.aborted
    model = request.model
    if isinstance(model, BaseChatModel):  # its reasoning and text published as they stream
        request = request.override(model=with_callback(model, conv.streams))
    if not advice and aborted is None:
        return request
    notes = [v.message for v in advice]
    if aborted is not None:
        notes.append(aborted.message)
    messages = list(request.messages) + [SystemMessage(content="\n".join(notes))]
    settings = dict(request.model_settings)
    for v in advice:
        if v.directives.reasoning_effort:
            settings["reasoning_effort"] = v.directives.reasoning_effort
    if aborted is not None:
        return request.override(messages=messages, model_settings=settings, tools=[])
    return request.override(messages=messages, model_settings=settings)
