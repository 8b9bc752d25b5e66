"""Runtime client for loopguard, the fleet-wide loop guard for LLM agents.

    from loopguard import Guard, Action

    guard = Guard("kafka:9092", agent="coder")
    session = guard.session("sess-42")
    session.user_message("fix the build")
    verdict = session.tool_call("bash", {"cmd": "cargo build"})
    if verdict is not None and verdict.action in (Action.BLOCK, Action.ABORT):
        ...  # do not run the tool: answer the call with verdict.message

`AsyncGuard` (in `loopguard.aio`, exported here) has the same methods for asyncio.
The wire contract is docs/contract.md of the loopguard repository.
"""

import logging

from .aio import AsyncGuard, AsyncSession
from .client import Guard, GuardConfig, Session
from .connecting import GuardError
from .partitioner import partition_for
from .settings import ConfigError
from .types import Action, Directives, Effect, Evidence, Limits, LoopCost, Stats, Usage, Verdict, output_hash
from .validate import ValidationError

__all__ = [
    "Action",
    "AsyncGuard",
    "AsyncSession",
    "ConfigError",
    "Directives",
    "Effect",
    "Evidence",
    "Guard",
    "GuardConfig",
    "GuardError",
    "Limits",
    "LoopCost",
    "Session",
    "Stats",
    "Usage",
    "ValidationError",
    "Verdict",
    "output_hash",
    "partition_for",
]

# A library logs; the application decides where to: nothing reaches stderr unless it
# configures logging (then an outage of the broker is one WARNING, librdkafka's lines DEBUG).
logging.getLogger("loopguard").addHandler(logging.NullHandler())
