"""The wire contract's messages as typed values: verdicts in, evidence and limits out.

Names follow docs/contract.md (version 1) exactly; nothing here knows the guard's internals.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, Mapping, Optional, Tuple


class Action(str, Enum):
    """What the guard asks of the runtime (docs/contract.md, "What a runtime does")."""

    WARN = "warn"  # one-time advice for the current request; never stored in history
    STEER = "steer"  # inject `message`, let the turn go on; apply `reasoning_effort`
    BLOCK = "block"  # refuse the tool call `event_id` names, skip the round's other calls
    ABORT = "abort"  # end the run, ask the model for a status summary


class Effect(str, Enum):
    MUTATION = "mutation"
    READ = "read"
    NONE = "none"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Directives:
    reasoning_effort: Optional[str] = None
    stop_tool_calls: bool = False
    prefix_warning: Optional[str] = None


@dataclass(frozen=True)
class Verdict:
    """One verdict of the guard, as read from the verdicts topic."""

    verdict_id: str
    session_id: str
    event_id: str
    action: Action
    rule: str
    message: str
    attempt: int
    ts: str
    directives: Directives = field(default_factory=Directives)
    evidence: Mapping[str, Any] = field(default_factory=dict)
    turn_id: Optional[str] = None
    emitted_at: Optional[str] = None
    tenant: Optional[str] = None
    agent: Optional[str] = None
    model: Optional[str] = None
    # False for a verdict in observe mode: counted by the guard, not to be acted on. Guards
    # that do not write the field enforce every verdict, so absent reads as True.
    enforce: bool = True
    # The policy that produced the verdict (`sha256:` + 12 hex); None from older guards.
    policy_version: Optional[str] = None
    # What the loop has cost so far; not written by guards that do not account usage.
    loop_cost: Optional["LoopCost"] = None
    # Where it was read, and when (time.time() of this process): for latency and debugging.
    partition: int = -1
    offset: int = -1
    received_at: float = 0.0

    @classmethod
    def from_wire(
        cls, raw: Mapping[str, Any], partition: int = -1, offset: int = -1, received_at: float = 0.0
    ) -> "Verdict":
        """Parses one verdict; raises ValueError when a field the contract requires is wrong.

        Fields this version does not know are ignored (the contract's additive changes).
        """
        if not isinstance(raw, Mapping):
            raise ValueError("a verdict must be a JSON object")
        if raw.get("v") != 1:
            raise ValueError(f"unsupported verdict version {raw.get('v')!r}")
        d = raw.get("directives") or {}
        if not isinstance(d, Mapping):
            raise ValueError("directives is not an object")

        def text(name: str) -> str:
            value = raw.get(name)
            if not isinstance(value, str):
                raise ValueError(f"verdict field {name} missing or not a string")
            return value

        def opt(name: str) -> Optional[str]:
            value = raw.get(name)
            return value if isinstance(value, str) else None

        attempt = raw.get("attempt")
        if not isinstance(attempt, int):
            raise ValueError("verdict field attempt missing or not an integer")
        evidence = raw.get("evidence")
        enforce = raw.get("enforce", True)
        if not isinstance(enforce, bool):
            raise ValueError("verdict field enforce is not a boolean")
        return cls(
            verdict_id=text("verdict_id"),
            session_id=text("session_id"),
            event_id=text("event_id"),
            action=Action(text("action")),
            rule=text("rule"),
            message=text("message"),
            attempt=attempt,
            ts=text("ts"),
            directives=Directives(
                reasoning_effort=d.get("reasoning_effort") if isinstance(d.get("reasoning_effort"), str) else None,
                stop_tool_calls=d.get("stop_tool_calls") is True,
                prefix_warning=d.get("prefix_warning") if isinstance(d.get("prefix_warning"), str) else None,
            ),
            evidence=dict(evidence) if isinstance(evidence, Mapping) else {},
            turn_id=opt("turn_id"),
            emitted_at=opt("emitted_at"),
            tenant=opt("tenant"),
            agent=opt("agent"),
            model=opt("model"),
            enforce=enforce,
            policy_version=opt("policy_version"),
            loop_cost=LoopCost.from_wire(raw.get("loop_cost")),
            partition=partition,
            offset=offset,
            received_at=received_at,
        )


@dataclass(frozen=True)
class LoopCost:
    """What a detected loop has cost so far (a verdict's `loop_cost`; every part optional)."""

    tokens: Optional[int] = None
    seconds: Optional[float] = None
    cost: Optional[float] = None

    @classmethod
    def from_wire(cls, raw: Any) -> Optional["LoopCost"]:
        """None when absent or not an object; parts of the wrong type are left out."""
        if not isinstance(raw, Mapping):
            return None

        def number(name: str) -> Optional[float]:
            value = raw.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return None
            return float(value)

        tokens = raw.get("tokens")
        return cls(
            tokens=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
            seconds=number("seconds"),
            cost=number("cost"),
        )


@dataclass(frozen=True)
class Usage:
    """What one model response used (sent on `turn_end` or `assistant_message`).

    Token counts are integers in 0..100,000,000, `cost` a number in 0..1,000,000 (the
    operator's currency); the guard dead-letters an event outside those bounds.
    """

    input_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    cost: Optional[float] = None

    def to_wire(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for name in ("input_tokens", "output_tokens", "cost"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


def output_hash(output: Any) -> str:
    """A short stable hash of a tool's output, for `Evidence.output_hash`.

    Bytes and strings are hashed as they are; anything else as canonical JSON (sorted keys),
    so two equal results hash alike whatever their key order.
    """
    if isinstance(output, bytes):
        data = output
    elif isinstance(output, str):
        data = output.encode()
    else:
        data = json.dumps(output, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:16]


@dataclass(frozen=True)
class Evidence:
    """What the runtime can prove about a tool result (every field optional)."""

    effect: Optional[Effect] = None
    resource: Optional[str] = None
    state_before: Optional[str] = None
    state_after: Optional[str] = None
    read_range: Optional[Tuple[int, int]] = None
    output_hash: Optional[str] = None
    new_info: Optional[bool] = None

    @classmethod
    def read(
        cls, resource: str, output: Any = None, read_range: Optional[Tuple[int, int]] = None
    ) -> "Evidence":
        """A read of `resource`; `output` (if given) is hashed into `output_hash`."""
        return cls(
            effect=Effect.READ,
            resource=resource,
            read_range=read_range,
            output_hash=None if output is None else output_hash(output),
        )

    @classmethod
    def mutation(cls, resource: str, before: Any, after: Any) -> "Evidence":
        """A change to `resource`; `before` and `after` are its contents (or hashes) around it.

        Equal before and after is what tells the guard the mutation achieved nothing.
        """
        return cls(
            effect=Effect.MUTATION,
            resource=resource,
            state_before=output_hash(before),
            state_after=output_hash(after),
        )

    @classmethod
    def output(cls, output: Any) -> "Evidence":
        """A result whose effect is not known (what a framework adapter can tell): its output
        hashed, no effect, so it never counts as a round without progress."""
        return cls(output_hash=output_hash(output))

    @classmethod
    def observed(cls, output: Any, new_info: Optional[bool] = None) -> "Evidence":
        """A call without side effects whose output is hashed (status polls, searches)."""
        return cls(effect=Effect.NONE, output_hash=output_hash(output), new_info=new_info)

    def to_wire(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        if self.effect is not None:
            out["effect"] = Effect(self.effect).value
        for name in ("resource", "state_before", "state_after", "output_hash"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.read_range is not None:
            out["read_range"] = [self.read_range[0], self.read_range[1]]
        if self.new_info is not None:
            out["new_info"] = self.new_info
        return out


@dataclass(frozen=True)
class Limits:
    """What the runtime itself allows one user request (sent on `user_message`)."""

    max_tool_rounds: Optional[int] = None

    def to_wire(self) -> Dict[str, int]:
        return {} if self.max_tool_rounds is None else {"max_tool_rounds": self.max_tool_rounds}


@dataclass(frozen=True)
class Stats:
    """Counters of one `Guard` (a snapshot). Background problems show up here, never raised."""

    events_sent: int = 0
    events_failed: int = 0
    verdicts_delivered: int = 0
    # Verdicts of rules in observe mode (`enforce` false): delivered apart, never acted on.
    verdicts_observed: int = 0
    verdicts_duplicate: int = 0
    verdicts_other_sessions: int = 0
    verdicts_invalid: int = 0
    callback_errors: int = 0
    background_errors: int = 0
    tool_call_deadlines: int = 0
    # Tool calls made before the Guard was connected: answered fail-open at once, their
    # events sent once it is.
    tool_calls_not_connected: int = 0
    # Tool calls made while the broker refused this client Read on its verdicts topic or
    # Write on the events topic (TOPIC_AUTHORIZATION_FAILED, said once): answered fail-open at
    # once, their events still sent.
    tool_calls_refused: int = 0
    # Events published before the Guard was connected beyond `backlog_capacity`: dropped.
    events_overflowed: int = 0
    # Tool calls answered "no verdict" by a judged-through marker, before their deadline.
    tool_calls_no_verdict: int = 0
    markers_seen: int = 0
    markers_invalid: int = 0
    reader_restarts: int = 0
