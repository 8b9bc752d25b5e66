"""Both clients against `loopguard demo`'s embedded broker, as the demo's hint suggests: the
examples of docs/integration.md as written (default deadlines), and agents that each
guards a looping session and gets its block on the third identical call, through the
embedded broker (its front door: fixed address, a controller kafkajs can find).

Needs no real broker: the demo brings its own. Node and the built TypeScript package
(`clients/typescript/dist`, made by `npm ci`) for the TypeScript half."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import time
from typing import Iterator

import pytest

from guardproc import REPO, _binary

TS_DIST = REPO / "clients" / "typescript" / "dist" / "src" / "index.js"

PYTHON_AGENT = """
from loopguard import Guard

guard = Guard(BOOTSTRAP, agent="demo-test", tool_call_deadline=5.0)
session = guard.session()
session.user_message("Fix the failing build.")
for turn in range(3):
    verdict = session.tool_call("bash", {"cmd": "cargo build"})
    if verdict is not None:
        print(turn + 1, verdict.action.value, verdict.rule)
        break
    session.tool_result("bash", "error", error="linker `cc` not found")
    session.turn_end()
guard.close()
"""

TS_AGENT = """
import { Guard } from "DIST";

const guard = await Guard.connect({ brokers: [BOOTSTRAP], agent: "demo-test", toolCallDeadlineMs: 5000 });
const session = guard.session();
await session.userMessage("Fix the failing build.");
for (let turn = 0; turn < 3; turn++) {
  const verdict = await session.toolCall("bash", { cmd: "cargo build" });
  if (verdict) {
    console.log(turn + 1, verdict.action, verdict.rule);
    break;
  }
  await session.toolResult("bash", { status: "error", error: "linker `cc` not found" });
  await session.turnEnd();
}
await guard.close();
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A running `loopguard demo` on free ports; yields its bootstrap address."""
    log = tmp_path_factory.mktemp("demo") / "stderr.log"
    env = {**os.environ, "LOOPGUARD__ADMIN__LISTEN": "127.0.0.1:0", "RUST_LOG": "warn"}
    env.pop("LOOPGUARD_CONFIG", None)
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [_binary(), "demo", "--listen", "127.0.0.1:0", "--sessions", "4"],
            stdout=subprocess.PIPE, stderr=err, text=True, env=env,
        )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        m = re.match(r"loopguard demo: embedded Kafka-protocol broker at (\S+) ", first)
        assert m, f"first line: {first!r}; stderr: {log.read_text()}"
        hint = [proc.stdout.readline(), proc.stdout.readline()]
        assert f'Guard("{m.group(1)}"' in hint[0] and f'brokers: ["{m.group(1)}"]' in hint[1], hint
        yield m.group(1)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(argv: list[str], where: str) -> str:
    started = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{where} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    assert time.monotonic() - started < 60, where
    return r.stdout


def step3_blocks() -> "dict[str, tuple[str, str]]":
    """docs/integration.md's "ten lines" examples, by language, each with its "It prints"."""
    import test_integration_doc

    found: "dict[str, tuple[str, str]]" = {}
    doc = test_integration_doc.blocks()
    for (kind, code), (next_kind, output) in zip(doc, doc[1:]):
        if kind in ("python", "ts") and kind not in found and next_kind == "text" and "Guard" in code:
            found[kind] = (code, output)
    assert set(found) == {"python", "ts"}, found
    return found


def test_the_documented_python_example_prints_its_block_on_the_demo(demo: str, tmp_path: pathlib.Path) -> None:
    """As written (its default 1 s deadline), only the address changed: the demo's broker
    must answer in time (it did not long-poll: every answer took 500 ms, issue 33)."""
    code, output = step3_blocks()["python"]
    script = tmp_path / "agent.py"
    script.write_text(code.replace('"kafka:9092"', repr(demo)))
    import sys

    assert run([sys.executable, str(script)], "the documented python example") == output


def test_the_documented_typescript_example_prints_its_block_on_the_demo(demo: str, tmp_path: pathlib.Path) -> None:
    """As written (its default 1 s deadline), only the address and the package's location
    changed: before issue 33 each of its calls returned at the deadline, never blocked."""
    assert TS_DIST.exists(), "build the TypeScript client first: (cd clients/typescript && npm ci)"
    code, output = step3_blocks()["ts"]
    script = tmp_path / "agent.mjs"
    script.write_text(code.replace('"@loopguard/client"', f'"{TS_DIST.as_uri()}"').replace('"kafka:9092"', f'"{demo}"'))
    assert run(["node", str(script)], "the documented typescript example") == output


def test_the_python_client_gets_its_block_from_the_demo(demo: str, tmp_path: pathlib.Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(PYTHON_AGENT.replace("BOOTSTRAP", repr(demo)))
    import sys

    assert run([sys.executable, str(script)], "python agent") == "3 block tool.exact_repeat\n"


def test_the_typescript_client_gets_its_block_from_the_demo(demo: str, tmp_path: pathlib.Path) -> None:
    assert TS_DIST.exists(), "build the TypeScript client first: (cd clients/typescript && npm ci)"
    script = tmp_path / "agent.mjs"
    script.write_text(TS_AGENT.replace("DIST", TS_DIST.as_uri()).replace("BOOTSTRAP", f'"{demo}"'))
    assert run(["node", str(script)], "typescript agent") == "3 block tool.exact_repeat\n"
