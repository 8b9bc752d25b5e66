"""What every framework adapter keeps per conversation: the guard's advice still to give the
model, an abort, and whether the current response's text went out as it streamed. Imports
no framework; publishes only through the session it is given.

- `Conversation`: one session's side of an adapter. Verdicts arrive on the reader thread
  (`on_verdict`); the adapter takes the advice (`steer`, `warn`) before the next model call.
  While a response streams, `reasoning_delta` / `content_delta` publish each chunk (so a
  reasoning loop is caught mid-stream); `response` publishes its end: the reasoning whole
  (`final`) only when none streamed, its text as `assistant_message` (which the guard counts
  as content only when no `content` chunk streamed).
- `Conversations`: the conversations of one adapter, one per session name, or one fixed
  `Session`.
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, Generic, List, Optional, TypeVar, Union

from .client import Guard, Session
from .types import Action, Verdict


class Conversation:
    """One session's side of an adapter: the verdicts still to apply, what streamed."""

    def __init__(self, session: Session):
        self.session = session
        self.lock = threading.Lock()
        self.advice: List[Verdict] = []  # steer / warn for the next model call
        self.aborted: Optional[Verdict] = None
        self._streamed_reasoning = False  # this response's reasoning went out in chunks
        session.on_verdict(self.on_verdict)

    def on_verdict(self, verdict: Verdict) -> None:  # on the reader thread
        if verdict.action in (Action.STEER, Action.WARN):
            with self.lock:
                self.advice.append(verdict)
        elif verdict.action is Action.ABORT:
            self.aborted = verdict

    def take_advice(self) -> List[Verdict]:
        """The steers and warns received since the last call (each given once)."""
        with self.lock:
            advice, self.advice = self.advice, []
        return advice

    def reasoning_delta(self, text: str) -> None:
        """A chunk of the response's reasoning, as it streams."""
        if text:
            self._streamed_reasoning = True
            self.session.reasoning(text)

    def content_delta(self, text: str) -> None:
        """A chunk of the response's visible text, as it streams."""
        if text:
            self.session.content(text)

    def response(self, reasoning: str, text: str) -> None:
        """The response is complete: its reasoning as one `final` chunk unless it streamed,
        its text as `assistant_message` (its calls and `turn_end` are the adapter's)."""
        streamed, self._streamed_reasoning = self._streamed_reasoning, False
        if reasoning and not streamed:
            self.session.reasoning(reasoning, final=True)
        if text:
            self.session.assistant_message(text)


C = TypeVar("C", bound=Conversation)


class Conversations(Generic[C]):
    """An adapter's conversations: given the `Guard`, one per session name (the framework's
    thread or conversation id); given a `Session`, that one for every run."""

    def __init__(self, target: Union[Guard, Session], make: Callable[[Session], C]):
        self.guard = target if isinstance(target, Guard) else None
        self.fixed = make(target) if isinstance(target, Session) else None
        self.make = make
        self.named: Dict[str, C] = {}
        self.lock = threading.Lock()

    def of(self, name: Optional[str], missing: str) -> C:
        """The conversation named `name` (made on first use); `missing` is the error's text
        when the run names none."""
        if self.fixed is not None:
            return self.fixed
        assert self.guard is not None
        if name is None:
            raise ValueError(missing)
        with self.lock:
            conv = self.named.get(name)
            if conv is None:
                conv = self.named[name] = self.make(self.guard.session(name))
            return conv
