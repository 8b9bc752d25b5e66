"""Checks an event against the contract's limits before it is published.

The guard dead-letters an event that breaks them, unjudged; raising here instead tells the
runtime's developer which field is wrong at the line that built it.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

# docs/contract.md, "Common fields" and the name bounds below the table.
MAX_EVENT_ID = 128
MAX_SESSION_ID = 256
MAX_NAME = 256  # turn_id, call_id, tool, tenant, agent, model
MAX_EVIDENCE_STRING = 1024
# Longer error texts are cut by the guard (compared, not kept whole); adapters cut them here.
MAX_ERROR_CHARS = 4096
# Most tool rounds a user message may announce (`limits.max_tool_rounds`).
MAX_TOOL_ROUNDS = 1_000_000
# A feedback event's verdict id; its note is cut at MAX_NOTE_CHARS by the guard.
MAX_VERDICT_ID = 128
MAX_NOTE_CHARS = 1024
# Kafka's default largest record (message.max.bytes) is 1 MiB; leave room for the key and
# the record overhead.
MAX_EVENT_BYTES = 1_000_000

EFFECTS = ("mutation", "read", "none", "unknown")
# docs/contract.md, "usage": per model response.
MAX_USAGE_TOKENS = 100_000_000
MAX_USAGE_COST = 1_000_000


class ValidationError(ValueError):
    """An event breaks the contract; `field` names the offending field."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field


def _string(event: Mapping[str, Any], name: str, lo: int, hi: int, required: bool) -> None:
    if name not in event or event[name] is None:
        if required:
            raise ValidationError(name, "is required")
        return
    value = event[name]
    if not isinstance(value, str):
        raise ValidationError(name, f"must be a string, not {type(value).__name__}")
    if not lo <= len(value) <= hi:
        raise ValidationError(name, f"must be {lo}..{hi} characters (got {len(value)})")


_TURN_TYPES = ("assistant_message", "tool_call", "reasoning", "content", "turn_end")


def check_event(event: Mapping[str, Any]) -> bytes:
    """Validates `event`; returns its JSON encoding, ready to publish."""
    if event.get("v") != 1:
        raise ValidationError("v", "must be 1")
    _string(event, "event_id", 1, MAX_EVENT_ID, True)
    _string(event, "session_id", 1, MAX_SESSION_ID, True)
    ts = event.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, str)):
        raise ValidationError("ts", "must be epoch milliseconds (int) or an RFC 3339 string")
    _string(event, "type", 1, MAX_NAME, True)
    kind = event["type"]
    _string(event, "turn_id", 1, MAX_NAME, kind in _TURN_TYPES)
    for name in ("tenant", "agent", "model"):
        _string(event, name, 0, MAX_NAME, False)
    seq = event.get("seq")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 0):
        raise ValidationError("seq", "must be an integer >= 0")
    if kind in ("user_message", "assistant_message", "reasoning", "content"):
        _string(event, "text", 0, MAX_EVENT_BYTES, True)
    if kind == "reasoning" and "final" in event and not isinstance(event["final"], bool):
        raise ValidationError("final", "must be a boolean")
    if kind == "user_message" and "limits" in event:
        rounds = event["limits"].get("max_tool_rounds")
        if rounds is not None and (
            isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_TOOL_ROUNDS
        ):
            raise ValidationError("limits.max_tool_rounds", f"must be an integer in 1..{MAX_TOOL_ROUNDS}")
    if kind in ("turn_end", "assistant_message") and event.get("usage") is not None:
        _check_usage(event["usage"])
    if kind == "feedback":
        _string(event, "verdict_id", 1, MAX_VERDICT_ID, True)
        if not isinstance(event.get("useful"), bool):
            raise ValidationError("useful", "must be a boolean")
        note = event.get("note")
        if note is not None and not isinstance(note, str):
            raise ValidationError("note", "must be a string")
    if kind in ("tool_call", "tool_result"):
        _string(event, "call_id", 1, MAX_NAME, True)
        _string(event, "tool", 1, MAX_NAME, True)
    if kind == "tool_call":
        if "args" not in event:
            raise ValidationError("args", "is required (any JSON value)")
    if kind == "tool_result":
        if event.get("status") not in ("ok", "error"):
            raise ValidationError("status", "must be 'ok' or 'error'")
        err = event.get("error")
        if err is not None and not isinstance(err, str):
            raise ValidationError("error", "must be a string")
        if "evidence" in event:
            _check_evidence(event["evidence"])
    try:
        data = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as e:
        field = "args" if kind == "tool_call" else "event"
        raise ValidationError(field, f"is not JSON-serializable ({e})") from None
    if len(data) > MAX_EVENT_BYTES:
        raise ValidationError(
            "args" if kind == "tool_call" else "text" if "text" in event else "event",
            f"makes the event {len(data)} bytes; at most {MAX_EVENT_BYTES} fit a Kafka record",
        )
    return data


def _check_evidence(evidence: Any) -> None:
    if not isinstance(evidence, Mapping):
        raise ValidationError("evidence", "must be an object")
    effect = evidence.get("effect")
    if effect is not None and effect not in EFFECTS:
        raise ValidationError("evidence.effect", f"must be one of {', '.join(EFFECTS)}")
    for name in ("resource", "state_before", "state_after", "output_hash"):
        value = evidence.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ValidationError(f"evidence.{name}", "must be a string")
        if len(value) > MAX_EVIDENCE_STRING:
            raise ValidationError(
                f"evidence.{name}", f"must be at most {MAX_EVIDENCE_STRING} characters (got {len(value)})"
            )
    rr = evidence.get("read_range")
    if rr is not None:
        ok = (
            isinstance(rr, (list, tuple))
            and len(rr) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in rr)
            and rr[0] <= rr[1]
        )
        if not ok:
            raise ValidationError("evidence.read_range", "must be [start, end], integers, 0 <= start <= end")
    ni = evidence.get("new_info")
    if ni is not None and not isinstance(ni, bool):
        raise ValidationError("evidence.new_info", "must be a boolean")


def _check_usage(usage: Any) -> None:
    """As the guard checks it: integers (tokens) and a finite number (cost), in range."""
    if not isinstance(usage, Mapping):
        raise ValidationError("usage", "must be an object")
    for name in ("input_tokens", "output_tokens"):
        value = usage.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"usage.{name}", f"must be an integer, not {type(value).__name__}")
        if not 0 <= value <= MAX_USAGE_TOKENS:
            raise ValidationError(f"usage.{name}", f"must be in 0..{MAX_USAGE_TOKENS} (got {value})")
    cost = usage.get("cost")
    if cost is not None:
        if isinstance(cost, bool) or not isinstance(cost, (int, float)):
            raise ValidationError("usage.cost", f"must be a number, not {type(cost).__name__}")
        if not (math.isfinite(cost) and 0 <= cost <= MAX_USAGE_COST):
            raise ValidationError("usage.cost", f"must be a finite number in 0..{MAX_USAGE_COST} (got {cost})")
