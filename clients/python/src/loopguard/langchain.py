"""LangChain adapter: a middleware for `langchain.agents.create_agent` that guards one session.

What it does with each part of the agent loop, and with each action (docs/contract.md):

- the run starts: the last human message is published as `user_message`;
- a model response: its text as `assistant_message`; every tool call it asks for as
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
    agent = create_agent(model, tools, middleware=[LoopguardMiddleware(guard.session("sess-1"))])

Install with the `langchain` extra (`pip install "./clients/python[langchain]"`). One
middleware per session: build the agent per conversation, or keep a middleware per thread.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest

from .client import Session
from .types import Action, Evidence, Usage, Verdict


class LoopguardMiddleware(AgentMiddleware):
    """Publishes the agent's steps for one session and applies the guard's verdicts."""

    def __init__(self, session: Session, tool_call_deadline: Optional[float] = None):
        """`tool_call_deadline`: how long each tool call waits for a verdict (default: the
        guard's `tool_call_deadline`)."""
        super().__init__()
        self.session = session
        self.deadline = tool_call_deadline
        self._lock = threading.Lock()
        self._advice: List[Verdict] = []  # steer / warn for the next model call
        self._refused: Dict[str, Verdict] = {}  # tool call id -> the verdict refusing it
        self._aborted: Optional[Verdict] = None
        session.on_verdict(self._on_verdict)

    # -- hooks ---------------------------------------------------------------------------

    def before_agent(self, state: Any, runtime: Any) -> Optional[Dict[str, Any]]:
        messages = state.get("messages", []) if isinstance(state, dict) else []
        human = [m for m in messages if isinstance(m, HumanMessage)]
        if human:
            self.session.user_message(_text(human[-1].content))
        return None

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        response = handler(self._advised(request))
        ai = next((m for m in response.result if isinstance(m, AIMessage)), None)
        if ai is None:
            return response
        if _text(ai.content):
            self.session.assistant_message(_text(ai.content))
        refused: Optional[Verdict] = None
        for call in ai.tool_calls:
            verdict = None
            if refused is None:  # after a block, the round's other calls are not published
                verdict = self.session.tool_call(
                    call["name"], call["args"], call_id=call.get("id") or None, deadline=self.deadline
                )
            if verdict is not None and verdict.action in (Action.BLOCK, Action.ABORT):
                refused = verdict
                if verdict.action is Action.ABORT:
                    self._aborted = verdict
            if refused is not None and call.get("id"):
                with self._lock:
                    self._refused[str(call["id"])] = refused
        self.session.turn_end(usage=_usage(ai))
        return response

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        call = request.tool_call
        with self._lock:
            verdict = self._refused.pop(str(call.get("id")), None)
        if verdict is not None:
            return ToolMessage(
                content=verdict.message, tool_call_id=call.get("id") or "", name=call["name"], status="error"
            )
        result = handler(request)
        if isinstance(result, ToolMessage):
            error = result.status == "error"
            self.session.tool_result(
                call["name"],
                "error" if error else "ok",
                call_id=call.get("id") or None,
                error=_text(result.content)[:4096] if error else None,
                evidence=Evidence.observed(_text(result.content)),
            )
        return result

    # -- verdicts ------------------------------------------------------------------------

    def _on_verdict(self, verdict: Verdict) -> None:
        if verdict.action in (Action.STEER, Action.WARN):
            with self._lock:
                self._advice.append(verdict)
        elif verdict.action is Action.ABORT:
            self._aborted = verdict

    def _advised(self, request: ModelRequest) -> ModelRequest:
        with self._lock:
            advice, self._advice = self._advice, []
        aborted = self._aborted
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


def _usage(ai: AIMessage) -> Optional[Usage]:
    """The response's `usage_metadata` (input and output tokens), when the model says."""
    meta = getattr(ai, "usage_metadata", None) or {}
    tokens = {k: meta.get(k) for k in ("input_tokens", "output_tokens")}
    if all(not isinstance(v, int) or isinstance(v, bool) for v in tokens.values()):
        return None
    counts = {k: v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None for k, v in tokens.items()}
    return Usage(input_tokens=counts["input_tokens"], output_tokens=counts["output_tokens"])


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content if isinstance(p, (str, dict)))
    return str(content)
