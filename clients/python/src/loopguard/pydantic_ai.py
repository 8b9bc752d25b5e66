"""PydanticAI adapter: `LoopguardCapability`, the guard as an agent capability, or
`LoopguardToolset` alone, a `WrapperToolset` whose tools run only when the guard lets them.

    from pydantic_ai import Agent, FunctionToolset
    from loopguard.pydantic_ai import LoopguardCapability, LoopguardToolset

    agent = Agent(model, toolsets=[FunctionToolset([read_file])], capabilities=[LoopguardCapability(guard)])
    agent = Agent(model, toolsets=[LoopguardToolset(FunctionToolset([read_file]), guard)])  # or the tools only
    agent.run_sync("Fix the build", conversation_id="sess-1")

The capability wraps the agent's tools in a `LoopguardToolset`, publishes each model
response as it ends (the final answer too, `turn_end` with its usage) and the model's
thinking (`reasoning`) and text (`content`) as they stream: it makes the run stream its
model requests (`run`, `run_sync`, `run_stream`, `iter` alike; the model must stream: a
`FunctionModel` needs its `stream_function`), so a reasoning loop is steered before the
response ends (the steer reaches the next request's instructions).

What it does (docs/contract.md, "What a runtime does with each action"):

- at the first tool call of each model response (the capability: when the response ends):
  the run's prompt as `user_message` (once a run, with `limits=`), the response's text as `assistant_message` and its thinking as a final `reasoning`
  chunk, every tool call it asks for as `tool_call` (in order, each waiting up to the
  deadline), then `turn_end` with the response's `usage`;
- `block`: the tool is not run; it fails with `ToolFailed(message)`, which the model reads as
  the call's result (no retry prompt, no retry budget spent); the round's later calls too;
- `abort`: `LoopguardAbort` (an `AgentRunError`, the verdict on `.verdict`) is raised from
  the call, or before the next model request when the abort came later: the run stops;
- `steer` and `warn`: their message is added to the instructions of the next model request;
- each result: `tool_result` with its hash as evidence (a tool's failure as `error`).

A toolset alone sees no model response after the last tool call: the final answer is not
published, nor anything as it streams. Given the `Guard`, each session is the run's `conversation_id` (or its run id);
given a `Session`, every run is that one. Observe-mode verdicts go to the session's
`on_observed`, never here. Install with the `pydantic-ai` extra.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Union

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import AgentRunError, ToolFailed
from pydantic_ai.messages import (
    AgentStreamEvent,
    InstructionPart,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from ._conversation import Conversation, Conversations
from .client import Guard, Session
from .types import Action, Evidence, Limits, Usage, Verdict
from .validate import MAX_ERROR_CHARS

_NO_NAME = "LoopguardToolset(guard) names each session by the run's conversation_id: pass one, or a Session"


class LoopguardAbort(AgentRunError):
    """The guard ended the run (`abort`); the verdict is on `.verdict`."""

    def __init__(self, verdict: Verdict):
        super().__init__(verdict.message)
        self.verdict = verdict


class _Conversation(Conversation):
    """One session's side of the toolset: what was published, the verdicts still to apply."""

    def __init__(self, session: Session):
        super().__init__(session)
        self.round = asyncio.Lock()  # one response's calls are published by one tool call
        self.verdicts: Dict[str, Optional[Verdict]] = {}  # call id -> its answer, once judged
        self.responses: Set[int] = set()  # ids of the responses published
        self.runs: Set[str] = set()  # run ids whose prompt is published


class _Conversations(Conversations[_Conversation]):
    """The conversations of one toolset, shared by the copies PydanticAI makes of it."""

    def __init__(self, target: Union[Guard, Session]):
        super().__init__(target, _Conversation)

    @staticmethod
    def given(conversations: Optional[_Conversations], target: Union[Guard, Session, None], usage: str) -> _Conversations:
        """The conversations a copy shares, else new ones for `target`."""
        if conversations is not None:
            return conversations
        if target is None:
            raise ValueError(usage)
        return _Conversations(target)

    @staticmethod
    def of_run(conversations: Optional[_Conversations], ctx: RunContext[Any]) -> _Conversation:
        """The conversation of a run: its `conversation_id`, else its run id."""
        assert conversations is not None  # set by __post_init__
        return conversations.fixed or conversations.of(ctx.conversation_id or ctx.run_id, _NO_NAME)


@dataclass
class LoopguardToolset(WrapperToolset[Any]):
    """`wrapped`'s tools, each call checked by the guard before it runs.

    `target`: the `Guard` (each conversation its own session) or one `Session`;
    `tool_call_deadline`: how long each call waits for a verdict (default: the guard's);
    `limits`: the round budget announced with the run's prompt (the guard's policy applies
    without one)."""

    target: Union[Guard, Session, None] = None
    tool_call_deadline: Optional[float] = None
    limits: Optional[Limits] = None
    conversations: Optional[_Conversations] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.conversations = _Conversations.given(self.conversations, self.target, "LoopguardToolset(toolset, guard_or_session)")

    async def get_instructions(self, ctx: RunContext[Any]) -> Union[str, InstructionPart, Sequence[Union[str, InstructionPart]], None]:
        """Before each model request: the wrapped toolset's instructions, with the guard's
        advice received since; an abort received since stops the run here."""
        conv = _Conversations.of_run(self.conversations, ctx)
        if conv.aborted is not None:
            raise LoopguardAbort(conv.aborted)
        own = await super().get_instructions(ctx)
        advice = conv.take_advice()
        if not advice:
            return own
        parts: List[Union[str, InstructionPart]] = [own] if isinstance(own, (str, InstructionPart)) else list(own or [])
        return parts + [v.message for v in advice]

    async def call_tool(self, name: str, tool_args: Dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]) -> Any:
        conv = _Conversations.of_run(self.conversations, ctx)
        call_id = ctx.tool_call_id or ""
        async with conv.round:
            if call_id not in conv.verdicts:
                await asyncio.to_thread(self._publish_call, conv, ctx, name, tool_args, call_id)
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
            conv.session.tool_result(name, "error", call_id=call_id or None, error=str(e)[:MAX_ERROR_CHARS])
            raise
        conv.session.tool_result(name, "ok", call_id=call_id or None, evidence=Evidence.output(str(result)))
        return result

    def _publish_call(self, conv: _Conversation, ctx: RunContext[Any], name: str, args: Dict[str, Any], call_id: str) -> None:
        """A call not judged yet: the response that asked for it, published whole (each of
        its calls waiting for the guard's answer), or the call alone when no response shows it."""
        response = next((m for m in reversed(ctx.messages) if isinstance(m, ModelResponse)), None)
        calls = {c.tool_call_id for c in response.parts if isinstance(c, ToolCallPart)} if response is not None else set()
        if response is None or id(response) in conv.responses or call_id not in calls:
            _publish_prompt(conv, ctx, self.limits)
            verdict = conv.aborted or conv.session.tool_call(name, args, call_id=call_id or None, deadline=self.tool_call_deadline)
            with conv.lock:
                conv.verdicts[call_id] = verdict
            return
        _publish_response(conv, ctx, response, self.tool_call_deadline, self.limits)


@dataclass
class LoopguardCapability(AbstractCapability[Any]):
    """The guard as a PydanticAI capability: every tool of the agent through a
    `LoopguardToolset`, every model response published as it ends (the final answer too,
    with its usage), and the model's thinking and text as they stream, so a reasoning loop
    is caught mid-stream (the run's model requests are streamed for it, `run` and `run_sync`
    included). `target`, `tool_call_deadline`, `limits`: as `LoopguardToolset`'s.

        agent = Agent(model, toolsets=[FunctionToolset([read_file])], capabilities=[LoopguardCapability(guard)])
    """

    target: Union[Guard, Session, None] = None
    tool_call_deadline: Optional[float] = None
    limits: Optional[Limits] = None
    conversations: Optional[_Conversations] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.conversations = _Conversations.given(self.conversations, self.target, "LoopguardCapability(guard_or_session)")

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any]:
        return LoopguardToolset(toolset, tool_call_deadline=self.tool_call_deadline, limits=self.limits, conversations=self.conversations)

    async def on_event(self, ctx: RunContext[Any], *, event: AgentStreamEvent) -> None:
        """Each streamed chunk of thinking (`reasoning`) and text (`content`), as it comes."""
        conv = _Conversations.of_run(self.conversations, ctx)
        if isinstance(event, PartStartEvent):
            if isinstance(event.part, ThinkingPart):
                conv.reasoning_delta(event.part.content)
            elif isinstance(event.part, TextPart):
                conv.content_delta(event.part.content)
        elif isinstance(event, PartDeltaEvent):
            if isinstance(event.delta, ThinkingPartDelta):
                conv.reasoning_delta(event.delta.content_delta or "")
            elif isinstance(event.delta, TextPartDelta):
                conv.content_delta(event.delta.content_delta)

    async def after_model_request(self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse) -> ModelResponse:
        """The response, its calls each waiting for the guard's answer (which the toolset
        applies when the call comes), then `turn_end` with its usage."""
        conv = _Conversations.of_run(self.conversations, ctx)
        async with conv.round:
            await asyncio.to_thread(_publish_response, conv, ctx, response, self.tool_call_deadline, self.limits)
        return response


def _publish_prompt(conv: _Conversation, ctx: RunContext[Any], limits: Optional[Limits]) -> None:
    """The run's prompt as `user_message`, once a run."""
    if ctx.run_id not in conv.runs:
        conv.runs.add(str(ctx.run_id))
        if isinstance(ctx.prompt, str) and ctx.prompt:
            conv.session.user_message(ctx.prompt, limits)


def _publish_response(conv: _Conversation, ctx: RunContext[Any], response: ModelResponse, deadline: Optional[float], limits: Optional[Limits]) -> None:
    """The run's prompt (once), then the response: its thinking, its text, each of its
    calls (each waiting for the guard's answer; after a block or abort the round's later
    calls are refused unpublished), `turn_end` with its usage."""
    if id(response) in conv.responses:
        return
    conv.responses.add(id(response))
    _publish_prompt(conv, ctx, limits)
    session = conv.session
    thinking = "".join(p.content for p in response.parts if isinstance(p, ThinkingPart))
    conv.response(thinking, "".join(p.content for p in response.parts if isinstance(p, TextPart)))
    refused: Optional[Verdict] = conv.aborted
    for call in (p for p in response.parts if isinstance(p, ToolCallPart)):
        verdict = refused
        if refused is None:
            verdict = session.tool_call(call.tool_name, call.args_as_dict(), call_id=call.tool_call_id, deadline=deadline)
            if verdict is not None and verdict.action in (Action.BLOCK, Action.ABORT):
                refused = verdict
        with conv.lock:
            conv.verdicts[call.tool_call_id] = verdict
    session.turn_end(usage=_usage(response))


def _usage(response: ModelResponse) -> Optional[Usage]:
    """The response's token counts (cache reads are in `input_tokens`), unless it has none."""
    u = response.usage
    if not u.input_tokens and not u.output_tokens:
        return None
    return Usage(input_tokens=u.input_tokens, output_tokens=u.output_tokens)
