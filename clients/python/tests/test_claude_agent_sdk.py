"""The Claude Agent SDK adapter's hook callbacks, called as Claude Code calls them during a
run (prompt, then each tool call and its result, then stop), with the SDK's own typed
inputs, against a real broker and a real `loopguard serve`. The agent loop itself needs the
Claude Code binary, which a test machine does not have offline."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, List

import pytest

pytest.importorskip("claude_agent_sdk", reason="the `claude-agent-sdk` extra is not installed")

from claude_agent_sdk import (  # noqa: E402
    ClaudeAgentOptions,
    HookContext,
    PostToolUseHookInput,
    PreToolUseHookInput,
    StopHookInput,
    UserPromptSubmitHookInput,
)

from loopguard import Guard  # noqa: E402
from loopguard.claude_agent_sdk import LoopguardHooks  # noqa: E402

CONTEXT: HookContext = {"signal": None}


def base(session_id: str) -> Any:
    return {"session_id": session_id, "transcript_path": "/tmp/transcript.jsonl", "cwd": "/work"}


async def claude_run(hooks: LoopguardHooks, session_id: str, paths: List[str]) -> List[Any]:
    """What Claude Code does with the hooks for a prompt that reads `paths` one by one: the
    hooks' answers to each `PreToolUse`; a denied call is not run (no `PostToolUse`)."""
    matchers = ClaudeAgentOptions(hooks=hooks.matchers()).hooks
    assert matchers is not None
    prompt: UserPromptSubmitHookInput = {**base(session_id), "hook_event_name": "UserPromptSubmit", "prompt": "Read the files."}
    for m in matchers["UserPromptSubmit"]:
        for cb in m.hooks:
            await cb(prompt, None, CONTEXT)
    answers = []
    for n, path in enumerate(paths):
        call_id = f"toolu_{n}"
        pre: PreToolUseHookInput = {
            **base(session_id),
            "hook_event_name": "PreToolUse",
            "tool_name": "Read",
            "tool_input": {"file_path": path},
            "tool_use_id": call_id,
        }
        answer = await matchers["PreToolUse"][0].hooks[0](pre, call_id, CONTEXT)
        answers.append(answer)
        specific: Any = answer.get("hookSpecificOutput") or {}
        if specific.get("permissionDecision") == "deny":
            break  # Claude reads the reason as the call's result and answers
        post: PostToolUseHookInput = {
            **base(session_id),
            "hook_event_name": "PostToolUse",
            "tool_name": "Read",
            "tool_input": {"file_path": path},
            "tool_response": {"type": "text", "file": {"filePath": path, "content": f"contents of {path}"}},
            "tool_use_id": call_id,
        }
        await matchers["PostToolUse"][0].hooks[0](post, call_id, CONTEXT)
    stop: StopHookInput = {**base(session_id), "hook_event_name": "Stop", "stop_hook_active": False, "last_assistant_message": "Done."}
    await matchers["Stop"][0].hooks[0](stop, None, CONTEXT)
    return answers


def test_the_third_identical_call_is_denied_with_the_guards_message(guard: Guard) -> None:
    hooks = LoopguardHooks(guard, tool_call_deadline=3.0)
    claude_session = f"cc-{uuid.uuid4().hex[:10]}"
    answers = asyncio.run(claude_run(hooks, claude_session, ["notes.txt"] * 4))

    assert len(answers) == 3  # the third call was denied: never run
    assert answers[0] == {} and answers[1] == {}
    denied = answers[2]["hookSpecificOutput"]
    assert denied["permissionDecision"] == "deny" and denied["permissionDecisionReason"].startswith("Blocked")
    assert "continue_" not in answers[2]  # a block lets Claude go on; only an abort stops the run
    session = hooks.session_of(claude_session)
    assert session.session_id == claude_session
    assert [v.rule for v in session.verdicts if v.action.value == "block"] == ["tool.exact_repeat"]
    assert guard.stats().background_errors == 0


def test_a_healthy_run_is_let_through_untouched(guard: Guard) -> None:
    session = guard.session(f"cc-healthy-{uuid.uuid4().hex[:8]}")
    answers = asyncio.run(claude_run(LoopguardHooks(session, tool_call_deadline=10.0), "any", [f"src/part_{n}.py" for n in range(12)]))

    assert answers == [{}] * 12  # every call allowed, nothing added
    assert guard.stats().tool_call_deadlines == 0  # each call answered by a marker, not the deadline
    assert session.verdicts == []


def test_an_abort_denies_the_call_and_stops_claude(guard: Guard) -> None:
    """A round budget of 3 announced with the prompt (`limits=`): the 4th round's call is
    denied and the hook answers `continue: false` with the guard's message, Claude Code's
    way of ending a run."""
    from loopguard import Limits

    session = guard.session(f"cc-abort-{uuid.uuid4().hex[:8]}")
    hooks = LoopguardHooks(session, tool_call_deadline=3.0, limits=Limits(max_tool_rounds=3))
    answers = asyncio.run(claude_run(hooks, "any", [f"src/part_{n}.py" for n in range(12)]))

    assert len(answers) == 4  # the 4th call was denied: never run
    last = answers[3]
    assert last["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert last["continue_"] is False and last["stopReason"].startswith("This request has used 4 model-tool rounds")
    assert [v.rule for v in session.verdicts if v.action.value == "abort"] == ["budget.tool_rounds"]
