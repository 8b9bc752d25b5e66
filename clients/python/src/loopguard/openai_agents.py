"""OpenAI Agents SDK adapter: `guard_agent(agent, session)` returns a copy of the agent whose
runs go through the guard, with the SDK's own seams (agent hooks, tool input guardrails,
dynamic instructions); the agent passed in is left as it was.

    from agents import Runner
    from loopguard.openai_agents import LoopguardAbort, guard_agent

    result = await Runner.run(guard_agent(agent, guard.session("sess-1")), "Fix the build")

What it does with each part of a run, and with each action (docs/contract.md):

- before each model call: the run's new user input as `user_message`; an `abort` received
  since raises `LoopguardAbort` (an `AgentsException`, the verdict on `.verdict`): the run
  stops the way the SDK stops runs, with the guard's message;
- while a response streams (`Runner.run_streamed`): each reasoning delta as `reasoning`,
  each text delta as `content`, so a reasoning loop is steered before the response ends
  (the steer reaches the next model call). The guarded copy's model does it: a model given
  by name is resolved by `model_provider=` (default: the SDK's default provider), and a
  `RunConfig(model=...)` bypasses it (the response then goes out whole when it ends);
- after each model call: its text as `assistant_message`, its reasoning (summaries) as one
  `final` chunk unless it streamed, every function call it asks for as `tool_call` (in order, each
  waiting up to the deadline), then `turn_end` with the response's `usage`;
- `block`: the call's tool input guardrail rejects it (`reject_content`): the tool is not run
  and the model reads the verdict's message as its output (the round's later calls too);
  `abort` on a call raises `LoopguardAbort` there;
- `steer` and `warn`: their message is added to the instructions of the next model call only;
- a tool's output: `tool_result` with its hash as evidence.

Function tools are guarded; hosted tools and MCP servers run on the provider's side or in
their own client and are published only as the model asks for them. Observe-mode verdicts
go to the session's `on_observed`, never here. Install with the `openai-agents` extra.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import threading
from typing import Any, AsyncIterator, Dict, List, Optional, Set, TypeVar, Union

from agents import Agent, AgentHooks, FunctionTool, Model, ModelProvider, ModelResponse, RunContextWrapper, Tool
from agents.exceptions import AgentsException
from agents.models.default_models import get_default_model_settings
from agents.models.multi_provider import MultiProvider
from agents.tool_context import ToolContext
from agents.tool_guardrails import ToolGuardrailFunctionOutput, ToolInputGuardrail, ToolInputGuardrailData

from ._conversation import Conversation
from .client import Session
from .types import Action, Evidence, Limits, Usage, Verdict

TContext = TypeVar("TContext")


class LoopguardAbort(AgentsException):
    """The guard ended the run (`abort`); the verdict is on `.verdict`, its message is the
    exception's."""

    def __init__(self, verdict: Verdict):
        super().__init__(verdict.message)
        self.verdict = verdict
        self.message = verdict.message


def guard_agent(
    agent: Agent[TContext],
    session: Session,
    *,
    tool_call_deadline: Optional[float] = None,
    limits: Optional[Limits] = None,
    model_provider: Optional[ModelProvider] = None,
) -> Agent[TContext]:
    """A copy of `agent` guarded by `session` (one per conversation): its function tools get
    the guard's input guardrail, its hooks publish the run, its instructions carry the
    guard's advice, its model publishes reasoning and text as they stream. `tool_call_deadline`:
    how long each call waits (default: the guard's); `limits`: the round budget announced with
    each user message (your `max_turns`, say); `model_provider`: resolves a model given by name
    (default: the SDK's default provider, as `RunConfig` has it)."""
    run = _GuardedRun(session, tool_call_deadline, agent.hooks, limits)
    guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(guardrail_function=run.check_call, name="loopguard")
    tools: List[Tool] = [
        dataclasses.replace(t, tool_input_guardrails=[*(t.tool_input_guardrails or []), guardrail]) if isinstance(t, FunctionTool) else t
        for t in agent.tools
    ]
    base = agent.instructions

    async def instructions(context: RunContextWrapper[TContext], current: Agent[TContext]) -> str:
        text = base(context, current) if callable(base) else base
        if inspect.isawaitable(text):
            text = await text
        return run.advised(str(text or ""))

    settings = agent.model_settings
    if not isinstance(agent.model, Model) and settings == get_default_model_settings(agent.model):
        settings = get_default_model_settings(agent.model)  # as the runner resolves a name's defaults
    model = _StreamedModel(agent.model, model_provider, run.conv)
    return agent.clone(tools=tools, hooks=run, instructions=instructions, model=model, model_settings=settings)


class _StreamedModel(Model):
    """The agent's model, publishing each streamed response's reasoning and text deltas as
    they come (`Runner.run_streamed`), so a reasoning loop is caught mid-stream; the rest
    is the wrapped model's. A `RunConfig(model=...)` bypasses it: then each response is
    published whole when it ends."""

    def __init__(self, model: Union[str, Model, None], provider: Optional[ModelProvider], conv: Conversation):
        self.wrapped = model
        self.provider = provider
        self.conv = conv
        self.resolved: Optional[Model] = model if isinstance(model, Model) else None

    def model(self) -> Model:
        if self.resolved is None:
            self.resolved = (self.provider or MultiProvider()).get_model(self.wrapped if isinstance(self.wrapped, str) else None)
        return self.resolved

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return await self.model().get_response(*args, **kwargs)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for event in self.model().stream_response(*args, **kwargs):
            kind = _field(event, "type")
            if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                self.conv.reasoning_delta(str(_field(event, "delta") or ""))
            elif kind == "response.output_text.delta":
                self.conv.content_delta(str(_field(event, "delta") or ""))
            yield event

    def get_retry_advice(self, request: Any) -> Any:
        return self.model().get_retry_advice(request)

    async def close(self) -> None:
        if self.resolved is not None:
            await self.resolved.close()


class _GuardedRun(AgentHooks[Any]):
    """The hooks and the guardrail of one guarded agent: what the session published, the
    verdicts still to apply."""

    def __init__(self, session: Session, deadline: Optional[float], inner: Optional[AgentHooks[Any]], limits: Optional[Limits]):
        self.conv = Conversation(session)
        self.session = session
        self.deadline = deadline
        self.limits = limits
        self.inner = inner  # the agent's own hooks, still called
        self.lock = threading.Lock()
        self.refused: Dict[str, Verdict] = {}  # call id -> the verdict refusing it
        self.checked: Set[str] = set()  # call ids published after the model call
        self.users = 0  # user input items published

    def advised(self, instructions: str) -> str:
        """The instructions with the steers and warns received since the last model call."""
        advice = self.conv.take_advice()
        return "\n\n".join([instructions] * bool(instructions) + [v.message for v in advice])

    # -- the SDK's hooks -----------------------------------------------------------------------

    async def on_llm_start(self, context: RunContextWrapper[Any], agent: Agent[Any], system_prompt: Optional[str], input_items: List[Any]) -> None:
        if self.conv.aborted is not None:
            raise LoopguardAbort(self.conv.aborted)
        users = [_text(_field(i, "content")) for i in input_items if _field(i, "role") == "user"]
        for text in users[self.users :]:
            self.session.user_message(text, self.limits)
        self.users = max(self.users, len(users))
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse) -> None:
        await asyncio.to_thread(self._publish_response, response)
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object) -> None:
        call_id = context.tool_call_id if isinstance(context, ToolContext) else None
        with self.lock:
            refused = call_id is not None and call_id in self.refused
        if not refused:
            self.session.tool_result(tool.name, "ok", call_id=call_id, evidence=Evidence.output(str(result)))
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)

    async def on_start(self, context: Any, agent: Agent[Any]) -> None:
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_end(self, context: Any, agent: Agent[Any], output: Any) -> None:
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)

    async def on_handoff(self, context: RunContextWrapper[Any], agent: Agent[Any], source: Agent[Any]) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    # -- the tool input guardrail ----------------------------------------------------------------

    async def check_call(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        with self.lock:
            verdict = self.refused.get(ctx.tool_call_id)
            checked = ctx.tool_call_id in self.checked
        if verdict is None and not checked:  # a call the model response did not show
            verdict = self.conv.aborted or await asyncio.to_thread(
                self.session.tool_call, ctx.tool_name, _args(ctx.tool_arguments), call_id=ctx.tool_call_id, deadline=self.deadline
            )
            if verdict is not None and verdict.action in (Action.BLOCK, Action.ABORT):
                with self.lock:
                    self.refused[ctx.tool_call_id] = verdict
        if verdict is None or verdict.action not in (Action.BLOCK, Action.ABORT):
            return ToolGuardrailFunctionOutput.allow()
        if verdict.action is Action.ABORT:
            self.conv.aborted = verdict
            raise LoopguardAbort(verdict)
        return ToolGuardrailFunctionOutput.reject_content(verdict.message, output_info=verdict)

    # -- what a model response publishes --------------------------------------------------------

    def _publish_response(self, response: ModelResponse) -> None:
        """Its text and reasoning, then each call it asks for (each waiting for the guard's
        answer), then `turn_end`; a block or abort refuses the round's calls from there on."""
        session = self.session
        text = "".join(_text(_field(i, "content")) for i in response.output if _field(i, "type") == "message")
        reasoning = "".join(_text(_field(i, "summary")) for i in response.output if _field(i, "type") == "reasoning")
        self.conv.response(reasoning, text)
        refused: Optional[Verdict] = None
        for item in response.output:
            if _field(item, "type") != "function_call":
                continue
            call_id = str(_field(item, "call_id"))
            verdict = None
            if refused is None:
                verdict = session.tool_call(str(_field(item, "name")), _args(_field(item, "arguments")), call_id=call_id, deadline=self.deadline)
            if verdict is not None and verdict.action in (Action.BLOCK, Action.ABORT):
                refused = verdict
            with self.lock:
                self.checked.add(call_id)
                if refused is not None:
                    self.refused[call_id] = refused
        session.turn_end(usage=_usage(response))


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def _text(content: Any) -> str:
    """The text of a message's content: a string, or parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(_field(p, "text") or "") for p in content)
    return ""


def _args(arguments: Any) -> Any:
    """A call's JSON arguments, decoded (as the model wrote them when they are not JSON)."""
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return arguments


def _usage(response: ModelResponse) -> Optional[Usage]:
    """The response's usage, unless the model reported none."""
    u = response.usage
    if not u.requests and not u.input_tokens and not u.output_tokens:
        return None
    return Usage(input_tokens=u.input_tokens, output_tokens=u.output_tokens)
