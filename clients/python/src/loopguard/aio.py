"""The asyncio flavour: `AsyncGuard` and `AsyncSession`, the same methods as the sync ones.

Kafka IO stays on the guard's own threads (librdkafka's `produce` only queues); results
cross into the event loop with `call_soon_threadsafe`, so nothing here blocks the loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, List, Optional

from .client import Guard, GuardConfig, Session, SessionCore, VerdictCallback, _Waiter
from .types import Evidence, Limits, Stats, Usage, Verdict


class AsyncGuard:
    """`Guard` for asyncio code. Create it inside the running loop."""

    def __init__(self, config: GuardConfig | str, **overrides: Any):
        self._guard = Guard(config, **overrides)

    @property
    def config(self) -> GuardConfig:
        return self._guard.config

    def session(
        self,
        session_id: Optional[str] = None,
        *,
        on_verdict: Optional[VerdictCallback] = None,
        tenant: Optional[str] = None,
        agent: Optional[str] = None,
        model: Optional[str] = None,
    ) -> "AsyncSession":
        core = self._guard._core(session_id, tenant, agent, model)
        return AsyncSession(core, on_verdict)

    @property
    def connected(self) -> bool:
        """As `Guard.connected`: True once the guard's topics are known and read."""
        return self._guard.connected

    async def ready(self, timeout: Optional[float] = None) -> None:
        """As `Guard.ready`: waits until connected; raises `GuardError` saying why not."""
        await asyncio.get_running_loop().run_in_executor(None, self._guard.ready, timeout)

    def stats(self) -> Stats:
        return self._guard.stats()

    def restart_reader(self) -> None:
        self._guard.restart_reader()

    async def flush(self, timeout: float = 5.0) -> int:
        return await asyncio.get_running_loop().run_in_executor(None, self._guard.flush, timeout)

    async def close(self, timeout: float = 5.0) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._guard.close, timeout)

    async def __aenter__(self) -> "AsyncGuard":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncSession:
    """`Session` with awaitable methods and verdicts as an async iterator."""

    def __init__(self, core: SessionCore, on_verdict: Optional[VerdictCallback] = None):
        self._core = core
        self._sync = Session(core, on_verdict)

    @property
    def session_id(self) -> str:
        return self._core.session_id

    @property
    def verdicts_so_far(self) -> List[Verdict]:
        return self._sync.verdicts

    async def user_message(self, text: str, limits: Optional[Limits] = None) -> None:
        self._sync.user_message(text, limits)

    async def tool_call(
        self,
        tool: str,
        args: Any,
        *,
        call_id: Optional[str] = None,
        turn_id: Optional[str] = None,
        deadline: Optional[float] = None,
    ) -> Optional[Verdict]:
        """As `Session.tool_call`: None when no verdict came within the deadline."""
        core = self._core
        wait = core.guard.config.tool_call_deadline if deadline is None else deadline
        until = time.monotonic() + wait
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[Optional[Verdict]]" = loop.create_future()

        def settle(v: Optional[Verdict]) -> None:
            if not fut.done():
                fut.set_result(v)

        def resolve(v: Optional[Verdict]) -> None:  # on the reader or deliveries thread
            loop.call_soon_threadsafe(settle, v)

        waiter = _Waiter(resolve)
        cid = core.open_call(tool, call_id)
        event = core.event("tool_call", {"turn_id": core.turn_id(turn_id), "call_id": cid, "tool": tool, "args": args})
        if not core.guard._publish(event, core, waiter):
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(fut), max(0.0, until - time.monotonic()))
        except asyncio.TimeoutError:
            if core.guard._expire(waiter):
                return None
            return await fut  # settled just now, by a verdict or a marker

    async def tool_result(
        self,
        tool: str,
        status: str = "ok",
        *,
        call_id: Optional[str] = None,
        error: Optional[str] = None,
        evidence: Optional[Evidence] = None,
    ) -> None:
        self._sync.tool_result(tool, status, call_id=call_id, error=error, evidence=evidence)

    async def reasoning(self, chunk: str, *, final: bool = False, turn_id: Optional[str] = None) -> None:
        self._sync.reasoning(chunk, final=final, turn_id=turn_id)

    async def content(self, chunk: str, *, turn_id: Optional[str] = None) -> None:
        self._sync.content(chunk, turn_id=turn_id)

    async def assistant_message(
        self, text: str, *, turn_id: Optional[str] = None, usage: Optional[Usage] = None
    ) -> None:
        self._sync.assistant_message(text, turn_id=turn_id, usage=usage)

    async def turn_end(self, *, turn_id: Optional[str] = None, usage: Optional[Usage] = None) -> None:
        self._sync.turn_end(turn_id=turn_id, usage=usage)

    async def compaction(self) -> None:
        self._sync.compaction()

    async def session_end(self) -> None:
        self._sync.session_end()

    @property
    def observed_so_far(self) -> List[Verdict]:
        """Observe-mode verdicts so far (`enforce` false): never acted on."""
        return self._sync.observed

    async def observed(self) -> AsyncIterator[Verdict]:
        """Observe-mode verdicts of the session from now on, apart from `verdicts()`: what
        the guard would have said; never the answer to `tool_call`, never to act on."""
        loop = asyncio.get_running_loop()
        queue: "asyncio.Queue[Verdict]" = asyncio.Queue()

        def push(v: Verdict) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, v)

        self._core.observe(push)
        try:
            while True:
                yield await queue.get()
        finally:
            self._core.unobserve(push)

    async def verdicts(self) -> AsyncIterator[Verdict]:
        """Every verdict of the session from now on, as it arrives (until the task is
        cancelled or the iteration stops). For streaming: run it beside the stream."""
        loop = asyncio.get_running_loop()
        queue: "asyncio.Queue[Verdict]" = asyncio.Queue()

        def push(v: Verdict) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, v)

        self._core.listen(push)
        try:
            while True:
                yield await queue.get()
        finally:
            self._core.unlisten(push)
