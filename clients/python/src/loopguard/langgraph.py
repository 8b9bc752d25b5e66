"""LangGraph adapter: hooks for the prebuilt react agent and a guarded `ToolNode`.

    from langgraph.prebuilt import create_react_agent
    from loopguard.langgraph import LoopguardHooks

    lg = LoopguardHooks(guard)  # beside the Guard: one for every conversation
    agent = create_react_agent(lg.model(model), lg.tool_node(tools), pre_model_hook=lg.pre_model_hook, post_model_hook=lg.post_model_hook)
    agent.invoke({"messages": [...]}, config={"configurable": {"thread_id": "sess-1"}})

What each part does (docs/contract.md, "What a runtime does with each action"):

- `lg.model(model)`: a copy of the chat model that publishes its reasoning (`reasoning`) and
  text (`content`) chunk by chunk when the graph is streamed (`stream_mode="messages"`,
  `astream_events`), so a reasoning loop is steered before the response ends (the steer
  reaches the next model call); without it, or when nothing streams, the response's
  reasoning goes out whole (`final`) after it.
- `post_model_hook`, after each model call: publishes its text as `assistant_message`, every
  tool call it asks for as `tool_call` (in order, each waiting up to the deadline), then
  `turn_end` with the response's `usage_metadata`. A call the guard blocks is answered there
  with an error `ToolMessage` carrying the verdict's message, so the graph never sends it
  to the tools (nor the round's later calls); the model reads the message next. On `abort`
  every call of the round is refused and the graph ends (its own stop: a last `AIMessage`
  without tool calls, here the verdict's message, named `loopguard`).
- `pre_model_hook`, before each model call: publishes the new user messages and the tool
  results the `ToolNode` did not; the `steer` and `warn` messages received since go into
  this model call only (`llm_input_messages`, never stored in the history), as does an
  `abort`'s, so a model that was mid-answer gives its summary (a tool call then ends the run).
- `tool_node(tools)` (or `ToolNode(tools, wrap_tool_call=lg.wrap_tool_call,
  awrap_tool_call=lg.awrap_tool_call)` in a graph of your own): publishes each result with
  its output hash as evidence, and checks a call no post-model hook checked before it runs.

Given the `Guard`, each conversation's session is its `thread_id`; given a `Session`, every run
is that session. Observe-mode verdicts never reach these hooks (the session's `on_observed`).
Install with the `langgraph` extra.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Set, Union

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest

from ._conversation import Conversation, Conversations
from ._lcmessages import StreamPublisher, publish_result, reasoning_of, text_of, thread_id, usage_of, with_callback
from .client import Guard, Session
from .types import Action, Limits, Verdict

_NO_THREAD = (
    "LoopguardHooks(guard) names each session by the run's thread_id: invoke with "
    'config={"configurable": {"thread_id": ...}}, or pass a Session'
)


class _Conversation(Conversation):
    """One session's side of the hooks: the verdicts still to apply, what was published."""

    def __init__(self, session: Session):
        super().__init__(session)
        self.checked: Set[str] = set()  # tool call ids published by the post-model hook
        self.reported: Set[str] = set()  # tool call ids whose result is published
        self.users: Set[str] = set()  # ids of the user messages published


class LoopguardHooks:
    """The guard in a LangGraph agent: `pre_model_hook`, `post_model_hook` and a guarded
    `ToolNode`, sync (`invoke`, `stream`) and async (`ainvoke`, `astream`) alike."""

    def __init__(self, target: Union[Guard, Session], tool_call_deadline: Optional[float] = None, limits: Optional[Limits] = None):
        """`tool_call_deadline`: how long each tool call waits for a verdict (default: the
        guard's `tool_call_deadline`); `limits`: the round budget announced with each user
        message (your `recursion_limit`, say; the guard's policy applies without one)."""
        self.deadline = tool_call_deadline
        self.limits = limits
        self._conversations = Conversations(target, _Conversation)
        self._threads = self._conversations.named
        self._streams = StreamPublisher(self._streamed_conversation)

    @property
    def session(self) -> Session:
        """The session of the current run (its thread's, when given a `Guard`)."""
        return self._conversation().session

    def model(self, model: BaseChatModel) -> BaseChatModel:
        """A copy of the chat model that publishes its reasoning and text as they stream (when
        the graph is streamed: `stream_mode="messages"`, `astream_events`), so a reasoning
        loop is caught before the response ends; the model passed in is left as it was."""
        return with_callback(model, self._streams)

    def tool_node(self, tools: Sequence[Any], **kwargs: Any) -> ToolNode:
        """A `ToolNode` of `tools` whose calls go through the guard (kwargs: `ToolNode`'s)."""
        return ToolNode(tools, wrap_tool_call=self.wrap_tool_call, awrap_tool_call=self.awrap_tool_call, **kwargs)

    # -- the nodes ---------------------------------------------------------------------------

    def pre_model_hook(self, state: Any) -> Dict[str, Any]:
        conv = self._conversation()
        messages: List[AnyMessage] = list(_messages(state))
        since = _since_last_ai(messages)
        for m in since:
            if isinstance(m, HumanMessage) and str(m.id) not in conv.users:
                conv.users.add(str(m.id))
                conv.session.user_message(text_of(m.content), self.limits)
        for m in since:
            if isinstance(m, ToolMessage):
                _report(conv, m.name or "tool", m)
        notes = [v.message for v in conv.take_advice()] + ([conv.aborted.message] if conv.aborted is not None else [])
        if notes:
            messages.append(SystemMessage(content="\n".join(notes)))
        return {"llm_input_messages": messages}

    def post_model_hook(self, state: Any) -> Dict[str, Any]:
        """Publishes the response and its calls (each waiting for the guard's answer); a
        block or abort answers the refused calls here, so they never reach the tools."""
        conv = self._conversation()
        messages = _messages(state)
        ai = messages[-1] if messages and isinstance(messages[-1], AIMessage) else None
        if ai is None:
            return {"messages": []}
        session = conv.session
        conv.response(reasoning_of(ai), text_of(ai.content))
        refused: Optional[Verdict] = conv.aborted
        answers: List[AnyMessage] = []
        for call in ai.tool_calls:
            cid = str(call.get("id") or "")
            verdict = None
            if refused is None:  # after a block, the round's other calls are not published
                verdict = session.tool_call(call["name"], call["args"], call_id=cid or None, deadline=self.deadline)
                with conv.lock:
                    conv.checked.add(cid)
            if verdict is not None and verdict.action in (Action.BLOCK, Action.ABORT):
                refused = verdict
                if verdict.action is Action.ABORT:
                    conv.aborted = verdict
            if refused is not None:
                answers.append(_refusal(call["name"], cid, refused))
        session.turn_end(usage=usage_of(ai))
        if conv.aborted is not None and ai.tool_calls:
            # Every call of the round refused, and the run ends on the guard's message.
            done = {m.tool_call_id for m in answers if isinstance(m, ToolMessage)}
            answers = [_refusal(c["name"], str(c.get("id") or ""), conv.aborted) for c in ai.tool_calls if str(c.get("id") or "") not in done] + answers
            answers.append(AIMessage(content=conv.aborted.message, name="loopguard"))
        for m in answers:
            if isinstance(m, ToolMessage):
                with conv.lock:
                    conv.reported.add(m.tool_call_id)  # refused: no result to publish
        return {"messages": answers}

    # -- the ToolNode's wrappers --------------------------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]) -> Any:
        conv = self._conversation()
        refusal = self._check(conv, request)
        if refusal is not None:
            return refusal
        result = execute(request)
        _report(conv, request.tool_call["name"], result)
        return result

    async def awrap_tool_call(self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[Any]]) -> Any:
        conv = self._conversation()
        refusal = await asyncio.to_thread(self._check, conv, request)
        if refusal is not None:
            return refusal
        result = await execute(request)
        _report(conv, request.tool_call["name"], result)
        return result

    def _check(self, conv: _Conversation, request: ToolCallRequest) -> Optional[ToolMessage]:
        """A call no post-model hook judged is published now and waits for its answer: the
        refusal when the guard refuses it, else None."""
        call = request.tool_call
        cid = str(call.get("id") or "")
        with conv.lock:
            checked = cid in conv.checked
        if checked:  # judged by the post-model hook, which answers the calls it refuses
            return None
        verdict = conv.aborted or conv.session.tool_call(call["name"], call["args"], call_id=cid or None, deadline=self.deadline)
        if verdict is not None and verdict.action is Action.ABORT:
            conv.aborted = verdict
        if verdict is None or verdict.action not in (Action.BLOCK, Action.ABORT):
            return None
        with conv.lock:
            conv.reported.add(cid)
        return _refusal(call["name"], cid, verdict)

    def _conversation(self) -> _Conversation:
        convs = self._conversations
        return convs.fixed or convs.of(thread_id(), _NO_THREAD)  # a fixed session needs no run

    def _streamed_conversation(self, metadata: Dict[str, Any]) -> Optional[_Conversation]:
        """The conversation of a streaming model run (its `thread_id` is in its metadata)."""
        thread = metadata.get("thread_id")
        if self._conversations.fixed is None and thread is None:
            return None
        return self._conversations.of(None if thread is None else str(thread), _NO_THREAD)


def _messages(state: Any) -> List[AnyMessage]:
    found = state.get("messages") if isinstance(state, dict) else getattr(state, "messages", None)
    return list(found or [])


def _since_last_ai(messages: List[AnyMessage]) -> List[AnyMessage]:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], AIMessage):
            return messages[i + 1 :]
    return messages


def _refusal(tool: str, call_id: str, verdict: Verdict) -> ToolMessage:
    return ToolMessage(content=verdict.message, tool_call_id=call_id, name=tool, status="error")


def _report(conv: _Conversation, tool: str, result: Any) -> None:
    """`tool_result` for a `ToolMessage` not published yet (a `Command` has none)."""
    if not isinstance(result, ToolMessage):
        return
    with conv.lock:
        if result.tool_call_id in conv.reported:
            return
        conv.reported.add(result.tool_call_id)
    publish_result(conv.session, tool, result.tool_call_id, result)
