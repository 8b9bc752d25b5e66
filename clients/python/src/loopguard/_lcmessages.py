"""What the LangChain and LangGraph adapters read from `langchain_core` messages: text and
usage. Needs only `langchain_core` (both extras bring it); publishes nothing."""

from __future__ import annotations

from typing import Any, Optional

from langchain_core.messages import AIMessage

from .types import Usage


def usage_of(ai: AIMessage) -> Optional[Usage]:
    """The response's `usage_metadata` (input and output tokens), when the model says."""
    meta = getattr(ai, "usage_metadata", None) or {}
    tokens = {k: meta.get(k) for k in ("input_tokens", "output_tokens")}
    if all(not isinstance(v, int) or isinstance(v, bool) for v in tokens.values()):
        return None
    counts = {k: v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None for k, v in tokens.items()}
    return Usage(input_tokens=counts["input_tokens"], output_tokens=counts["output_tokens"])


def text_of(content: Any) -> str:
    """A message's text, whether its content is a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content if isinstance(p, (str, dict)))
    return str(content)
