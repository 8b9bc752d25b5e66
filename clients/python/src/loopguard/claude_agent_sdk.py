"""Claude Agent SDK adapter: hook callbacks (`HookMatcher`s) for `ClaudeAgentOptions(hooks=...)`.

    from claude_agent_sdk import ClaudeAgentOptions, query
    from loopguard.claude_agent_sdk import LoopguardHooks

    options = ClaudeAgentOptions(hooks=LoopguardHooks(guard).matchers())

What each hook does (docs/contract.md, "What a runtime does with each action"):

- `UserPromptSubmit`: the prompt as `user_message` (with the round budget `limits=`);
- `PreToolUse`: the call as `tool_call`, waiting up to the deadline. `block`: the call is
  denied (`permissionDecision: "deny"`) with the verdict's message as the reason, which
  Claude reads as the call's result; `abort`: denied, and `continue: false` with the message
  as `stopReason`, Claude Code's way of ending a run;
- `PostToolUse` / `PostToolUseFailure`: `tool_result` (`ok` with its output hash, or `error`);
- `steer` and `warn`: their message goes to Claude as `additionalContext` on the next hook
  that carries one (the next tool call, result or prompt);
- `Stop`: the last assistant message as `assistant_message`, then `turn_end`. Claude Code
  calls no hook per model response, so a turn also ends when a tool call follows the last
  call's results. Hooks carry no token usage, so these `turn_end`s have none (the run's
  totals are on the SDK's `ResultMessage`, which hooks never see); `loop_cost` then has
  seconds only. Nor does any hook see the model's reasoning or text as it streams: a
  reasoning loop is not caught mid-stream here.

Given the `Guard`, each session is Claude Code's `session_id`; given a `Session`, every
conversation is that one. Observe-mode verdicts go to the session's `on_observed`, never
here. Install with the `claude-agent-sdk` extra. The hooks are tested with the SDK's own
typed inputs (the agent loop itself needs the Claude Code binary).
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional, Union

from claude_agent_sdk import HookContext, HookInput, HookJSONOutput, HookMatcher
from claude_agent_sdk.types import HookEvent

from ._conversation import Conversation, Conversations
from .client import Guard, Session
from .types import Action, Evidence, Limits
from .validate import MAX_ERROR_CHARS


class _Conversation(Conversation):
    """One session's side of the hooks: open calls, the verdicts still to apply."""

    def __init__(self, session: Session):
        super().__init__(session)
        self.open = 0  # calls without a result yet
        self.results = False  # a result came since the last call

    def advice_text(self) -> Optional[str]:
        return "\n".join(v.message for v in self.take_advice()) or None


class LoopguardHooks:
    """The hook callbacks; `matchers()` is the `hooks=` of `ClaudeAgentOptions`."""

    def __init__(self, target: Union[Guard, Session], tool_call_deadline: Optional[float] = None, limits: Optional[Limits] = None):
        """`tool_call_deadline`: how long each tool call waits for a verdict (default: the
        guard's `tool_call_deadline`); keep it under the hook timeout (60 s). `limits`: the
        round budget announced with each prompt (the guard's policy applies without one)."""
        self.deadline = tool_call_deadline
        self.limits = limits
        self._conversations = Conversations(target, _Conversation)

    def matchers(self) -> Dict[HookEvent, List[HookMatcher]]:
        """Every tool, every prompt, every stop."""
        return {
            "UserPromptSubmit": [HookMatcher(hooks=[self.user_prompt_submit])],
            "PreToolUse": [HookMatcher(hooks=[self.pre_tool_use])],
            "PostToolUse": [HookMatcher(hooks=[self.post_tool_use])],
            "PostToolUseFailure": [HookMatcher(hooks=[self.post_tool_use])],
            "Stop": [HookMatcher(hooks=[self.stop])],
        }

    def session_of(self, claude_session_id: str) -> Session:
        """The loopguard session of a Claude Code session."""
        return self._conversation(claude_session_id).session

    # -- the hooks -------------------------------------------------------------------------

    async def user_prompt_submit(self, input: HookInput, tool_use_id: Optional[str], context: HookContext) -> HookJSONOutput:
        conv = self._conversation(input["session_id"])
        if input["hook_event_name"] == "UserPromptSubmit":
            conv.session.user_message(input["prompt"], self.limits)
        return _context("UserPromptSubmit", conv.advice_text())

    async def pre_tool_use(self, input: HookInput, tool_use_id: Optional[str], context: HookContext) -> HookJSONOutput:
        if input["hook_event_name"] != "PreToolUse":
            return {}
        conv = self._conversation(input["session_id"])
        with conv.lock:
            new_round = conv.results and conv.open == 0
            conv.results = False
            conv.open += 1
        if new_round:
            conv.session.turn_end()  # the previous response's calls are all answered
        verdict = conv.aborted or await asyncio.to_thread(
            conv.session.tool_call, input["tool_name"], input["tool_input"], call_id=input["tool_use_id"], deadline=self.deadline
        )
        if verdict is None or verdict.action not in (Action.BLOCK, Action.ABORT):
            return _context("PreToolUse", conv.advice_text())
        with conv.lock:
            conv.open -= 1  # refused: no result will come
        deny: Any = {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": verdict.message}
        if verdict.action is Action.ABORT:
            conv.aborted = verdict
            return {"hookSpecificOutput": deny, "continue_": False, "stopReason": verdict.message}
        return {"hookSpecificOutput": deny}

    async def post_tool_use(self, input: HookInput, tool_use_id: Optional[str], context: HookContext) -> HookJSONOutput:
        conv = self._conversation(input["session_id"])
        with conv.lock:
            conv.open = max(0, conv.open - 1)
            conv.results = True
        if input["hook_event_name"] == "PostToolUse":
            evidence = Evidence.output(input["tool_response"])
            conv.session.tool_result(input["tool_name"], "ok", call_id=input["tool_use_id"], evidence=evidence)
        elif input["hook_event_name"] == "PostToolUseFailure":
            conv.session.tool_result(input["tool_name"], "error", call_id=input["tool_use_id"], error=input["error"][:MAX_ERROR_CHARS])
        else:
            return {}
        if conv.aborted is not None:
            return {"continue_": False, "stopReason": conv.aborted.message}
        return _context(input["hook_event_name"], conv.advice_text())

    async def stop(self, input: HookInput, tool_use_id: Optional[str], context: HookContext) -> HookJSONOutput:
        conv = self._conversation(input["session_id"])
        if input["hook_event_name"] == "Stop" and input.get("last_assistant_message"):
            conv.session.assistant_message(str(input.get("last_assistant_message")))
        with conv.lock:
            conv.open, conv.results = 0, False
        conv.session.turn_end()
        return {}

    def _conversation(self, claude_session_id: str) -> _Conversation:
        return self._conversations.of(claude_session_id, "")


def _context(event: str, text: Optional[str]) -> HookJSONOutput:
    """The guard's advice for Claude, as the hook's `additionalContext` (nothing without one)."""
    if text is None:
        return {}
    out: Dict[str, Any] = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
    return out  # type: ignore[return-value]
