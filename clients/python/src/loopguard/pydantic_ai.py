"""PydanticAI adapter: `LoopguardToolset`, a `WrapperToolset` whose tools run only when the
guard lets them.

    from pydantic_ai import Agent, FunctionToolset
    from loopguard.pydantic_ai import LoopguardToolset

    agent = Agent(model, toolsets=[LoopguardToolset(FunctionToolset([read_file]), guard)])
    agent.run_sync("Fix the build", conversation_id="sess-1")

What it does (docs/contract.md, "What a runtime does with each action"):

- at the first tool call of each model response: the run's prompt as `user_message` (once a
  run), the response's text as `assistant_message` and its thinking as a final `reasoning`
  chunk, every tool call it asks for as `tool_call` (in order, each waiting up to the
  deadline), then `turn_end` with the response's `usage`;
- `block`: the tool is not run; it fails with `ToolFailed(message)`, which the model reads as
  the call's result (no retry prompt, no retry budget spent); the round's later calls too;
- `abort`: `LoopguardAbort` (an `AgentRunError`, the verdict on `.verdict`) is raised from
  the call, or before the next model request when the abort came later: the run stops;
- `steer` and `warn`: their message is added to the instructions of the next model request;
- each result: `tool_result` with its hash as evidence (a tool's failure as `error`).

A toolset sees no model response after the last tool call: the final answer is not
published. Given the `Guard`, each session is the run's `conversation_id` (or its run id);
given a `Session`, every run is that one. Observe-mode verdicts go to the session's
`on_observed`, never here. Install with the `pydantic-ai` extra.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Union

from pydantic_ai import RunContext
from pydantic_ai.exceptions import AgentRunError, ToolFailed
from pydantic_ai.messages import InstructionPart, ModelResponse, TextPart, ThinkingPart, ToolCallPart
from pydantic_ai.toolsets import WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from .client import Guard, Session
from .types import Action, Evidence, Usage, Verdict


class LoopguardAbort(AgentRunError):
    """The guard ended the run (`abort`); the verdict is on `.verdict`."""

    def __init__(self, verdict: Verdict):
        super().__init__(verdict.message)
        self.verdict = verdict


class _Conversation:
    """One session's side of the toolset: what was published, the verdicts still to apply."""

    def __init__(self, session: Session):
        self.session = session
        self.lock = threading.Lock()
        self.round = asyncio.Lock()  # one response's calls are published by one tool call
        self.advice: List[Verdict] = []
        self.aborted: Optional[Verdict] = None
        self.verdicts: Dict[str, Optional[Verdict]] = {}  # call id -> its answer, once judged
        self.responses: Set[int] = set()  # ids of the responses published
        self.runs: Set[str] = set()  # run ids whose prompt is published
        session.on_verdict(self.on_verdict)

    def on_verdict(self, verdict: Verdict) -> None:  # on the reader thread
        if verdict.action in (Action.STEER, Action.WARN):
            with self.lock:
                self.advice.append(verdict)
        elif verdict.action is Action.ABORT:
            self.aborted = verdict


class _Conversations:
    """The conversations of one toolset, shared by the copies PydanticAI makes of it."""

    def __init__(self, target: Union[Guard, Session]):
        self.guard = target if isinstance(target, Guard) else None
        self.fixed = _Conversation(target) if isinstance(target, Session) else None
        self.named: Dict[str, _Conversation] = {}
        self.lock = threading.Lock()

    def of(self, ctx: RunContext[Any]) -> _Conversation:
        if self.fixed is not None:
            return self.fixed
        assert self.guard is not None
        name = ctx.conversation_id or ctx.run_id
        if name is None:
            raise ValueError("LoopguardToolset(guard) names each session by the run's conversation_id: pass one, or a Session")
        with self.lock:
            conv = self.named.get(name)
            if conv is None:
                conv = self.named[name] = _Conversation(self.guard.session(name))
            return conv


@dataclass
class LoopguardToolset(WrapperToolset[Any]):
    """`wrapped`'s tools, each call checked by the guard before it runs.

    `target`: the `Guard` (each conversation its own session) or one `Session`;
    `tool_call_deadline`: how long each call waits for a verdict (default: the guard's)."""

    target: Union[Guard, Session, None] = None
    tool_call_deadline: Optional[float] = None
    conversations: Optional[_Conversations] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.conversations is None:
            if self.target is None:
                raise ValueError("LoopguardToolset(toolset, guard_or_session)")
            self.conversations = _Conversations(self.target)

    def _conversation(self, ctx: RunContext[Any]) -> _Conversation:
        assert self.conversations is not None
        return self.conversations.of(ctx)

    async def get_instructions(self, ctx: RunContext[Any]) -> Union[str, InstructionPart, Sequence[Union[str, InstructionPart]], None]:
        """Before each model request: the wrapped toolset's instructions, with the guard's
        advice received since; an abort received since stops the run here."""
        conv = self._conversation(ctx)
        if conv.aborted is not None:
            raise LoopguardAbort(conv.aborted)
        own = await super().get_instructions(ctx)
        with conv.lock:
            advice, conv.advice = conv.advice, []
        if not advice:
            return own
        parts: List[Union[str, InstructionPart]] = [own] if isinstance(own, (str, InstructionPart)) else list(own or [])
        return parts + [v.message for v in advice]

    async def call_tool(self, name: str, tool_args: Dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]) -> Any:
        conv = self._conversation(ctx)
        call_id = ctx.tool_call_id or ""
        async with conv.round:
            if call_id not in conv.verdicts:
                await asyncio.to_thread(self._publish_round, conv, ctx, name, tool_args, call_id)
        with conv.lock:
            verdict = conv.verdicts.pop(call_id, None)
        if verdict is not None and verdict.action is Action.ABORT:
            conv.aborted = verdict
            raise LoopguardAbort(verdict)
        if verdict is not None and verdict.action is Action.BLOCK:
            raise ToolFailed(verdict.message)
        try:
            result = await super().call_tool(name, tool_args, ctx, tool)
        except Exception as e:
            conv.session.tool_result(name, "error", call_id=call_id or None, error=str(e)[:4096])
            raise
        conv.session.tool_result(name, "ok", call_id=call_id or None, evidence=Evidence.output(str(result)))
        return result

    def _publish_round(self, conv: _Conversation, ctx: RunContext[Any], name: str, args: Dict[str, Any], call_id: str) -> None:
        """The run's prompt (once), then the response that asked for this call: its text,
        its thinking, each of its calls (each waiting for the guard's answer), `turn_end`."""
        session = conv.session
        if ctx.run_id not in conv.runs:
            conv.runs.add(str(ctx.run_id))
            if isinstance(ctx.prompt, str) and ctx.prompt:
                session.user_message(ctx.prompt)
        response = next((m for m in reversed(ctx.messages) if isinstance(m, ModelResponse)), None)
        calls = [p for p in response.parts if isinstance(p, ToolCallPart)] if response is not None else []
        if response is None or id(response) in conv.responses or call_id not in {c.tool_call_id for c in calls}:
            # A call the last response does not show: judged alone.
            verdict = conv.aborted or session.tool_call(name, args, call_id=call_id or None, deadline=self.tool_call_deadline)
            with conv.lock:
                conv.verdicts[call_id] = verdict
            return
        conv.responses.add(id(response))
        thinking = "".join(p.content for p in response.parts if isinstance(p, ThinkingPart))
        text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
        if thinking:
            session.reasoning(thinking, final=True)
        if text:
            session.assistant_message(text)
        refused: Optional[Verdict] = conv.aborted
        for call in calls:
            verdict = refused
            if refused is None:
                verdict = session.tool_call(call.tool_name, call.args_as_dict(), call_id=call.tool_call_id, deadline=self.tool_call_deadline)
                if verdict is not None and verdict.action in (Action.BLOCK, Action.ABORT):
                    refused = verdict
            with conv.lock:
                conv.verdicts[call.tool_call_id] = verdict
        u = response.usage
        usage = Usage(input_tokens=u.input_tokens, output_tokens=u.output_tokens) if u.input_tokens or u.output_tokens else None
        session.turn_end(usage=usage)

