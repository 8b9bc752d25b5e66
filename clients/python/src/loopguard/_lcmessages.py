"""What the LangChain and LangGraph adapters share: text, reasoning and usage read from
`langchain_core` messages, the run's `thread_id`, a tool result published, and the callback
handler that publishes a chat model's reasoning and text as they stream. Needs only
`langchain_core` and `langgraph` (both extras bring them)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.config import get_config

from ._conversation import Conversation
from .client import Session
from .types import Evidence, Usage
from .validate import MAX_ERROR_CHARS


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


def reasoning_of(message: BaseMessage) -> str:
    """A message's reasoning: its standard `reasoning` blocks (providers' thinking parts
    included), else a `reasoning_content` the provider put beside the content."""
    try:
        blocks = message.content_blocks
    except Exception:  # a provider's translator failing on a part it does not know
        blocks = []
    text = "".join(str(b.get("reasoning") or "") for b in blocks if b.get("type") == "reasoning")
    if not text:
        extra = message.additional_kwargs.get("reasoning_content")
        text = extra if isinstance(extra, str) else ""
    return text


def thread_id() -> Optional[str]:
    """The current run's `thread_id` (`config={"configurable": {"thread_id": ...}}`), if any."""
    thread = (get_config().get("configurable") or {}).get("thread_id")
    return None if thread is None else str(thread)


def publish_result(session: Session, tool: str, call_id: Optional[str], result: ToolMessage) -> None:
    """`tool_result` for a tool's `ToolMessage`: its status, and its output's hash as evidence."""
    error = result.status == "error"
    session.tool_result(
        tool,
        "error" if error else "ok",
        call_id=call_id or None,
        error=text_of(result.content)[:MAX_ERROR_CHARS] if error else None,
        evidence=Evidence.output(text_of(result.content)),
    )


class StreamPublisher(BaseCallbackHandler):
    """On a chat model: publishes each streamed chunk's reasoning (`reasoning`) and text
    (`content`) to the conversation of the model's run, as it comes. The model streams when
    the graph is streamed (`stream_mode="messages"`, `astream_events`) or is set to stream;
    otherwise the response is published whole when it ends."""

    run_inline = True  # publishing only queues: no executor hop, chunks stay in order

    def __init__(self, conversation_of: Callable[[Dict[str, Any]], Optional[Conversation]]):
        """`conversation_of(metadata)`: the conversation of a model run, from its metadata
        (LangGraph puts the run's `thread_id` there)."""
        self.conversation_of = conversation_of
        self.runs: Dict[UUID, Conversation] = {}

    def on_chat_model_start(
        self, serialized: Dict[str, Any], messages: Any, *, run_id: UUID, metadata: Optional[Dict[str, Any]] = None, **kwargs: Any
    ) -> None:
        conv = self.conversation_of(metadata or {})
        if conv is not None:
            self.runs[run_id] = conv

    def on_llm_new_token(self, token: Any, *, chunk: Any = None, run_id: UUID, **kwargs: Any) -> None:
        conv = self.runs.get(run_id)
        message = getattr(chunk, "message", None)
        if conv is None or not isinstance(message, BaseMessage):
            return
        conv.reasoning_delta(reasoning_of(message))
        conv.content_delta(text_of(message.content))

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.runs.pop(run_id, None)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.runs.pop(run_id, None)


def with_callback(model: BaseChatModel, handler: BaseCallbackHandler) -> BaseChatModel:
    """A copy of `model` that also calls `handler` (its own callbacks kept)."""
    callbacks = model.callbacks
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
        manager.add_handler(handler, inherit=False)
        return model.model_copy(update={"callbacks": manager})
    return model.model_copy(update={"callbacks": [*(callbacks or []), handler]})
