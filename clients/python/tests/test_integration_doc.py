"""Runs every code block of docs/integration.md, in order, against the real broker and a
real `loopguard serve`, as a reader would: the `sh` blocks (topics, installs) in a scratch
project, the `python` blocks with the interpreter the install block installed into, the
`ts` blocks with Node against the package the install block installed, the `json` blocks
through the client's contract checks. A `text` block after a code block is its whole
output, compared exactly.

Only names change: `kafka:9092` becomes the test broker, the default topic names private
ones (and the examples' `Guard(...)` get those topics passed in).

A `python` block that imports a framework adapter (`loopguard.langgraph`, ...) needs that
framework, an extra the install block does not install: it runs with this suite's own
interpreter, where scripts/clients-test.sh installs every extra. Without the framework there
it is not run (nor its output block), unless LOOPGUARD_DOC_EXTRAS=required (the script sets
it), which makes that a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import uuid
import venv
from typing import List, Tuple

import pytest

from guardproc import GuardProcess, free_port

REPO = pathlib.Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "integration.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)
# The framework adapters' modules, and the framework each needs.
ADAPTER = re.compile(r"^from loopguard\.(langgraph|openai_agents|pydantic_ai|claude_agent_sdk) import", re.M)
FRAMEWORK = {"langgraph": "langgraph", "openai_agents": "agents", "pydantic_ai": "pydantic_ai", "claude_agent_sdk": "claude_agent_sdk"}


def blocks() -> List[Tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(DOC.read_text())]


def test_the_doc_has_code_of_every_kind() -> None:
    kinds = [k for k, _ in blocks()]
    for kind in ("sh", "python", "ts", "json", "text"):
        assert kind in kinds, kind
    assert set(kinds) <= {"sh", "python", "ts", "json", "text"}, kinds


def test_every_code_block_of_the_integration_doc_runs(tmp_path: pathlib.Path) -> None:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    name = f"doc-{uuid.uuid4().hex[:10]}"
    topics = {k: f"{name}-{k}" for k in ("events", "verdicts", "dlq", "state")}
    binary = os.environ.get("LOOPGUARD_BIN") or str(REPO / "target" / "debug" / "loopguard")
    project = tmp_path / "project"  # where the reader's commands run
    project.mkdir()
    (project / "clients").symlink_to(REPO / "clients")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    env = {
        **os.environ,
        "PATH": f"{env_dir / 'bin'}:{pathlib.Path(binary).parent}:{os.environ['PATH']}",
        "VIRTUAL_ENV": str(env_dir),
        "LOOPGUARD__KAFKA__EVENTS_TOPIC": topics["events"],
        "LOOPGUARD__KAFKA__VERDICTS_TOPIC": topics["verdicts"],
        "LOOPGUARD__KAFKA__DLQ_TOPIC": topics["dlq"],
        "LOOPGUARD__KAFKA__STATE_TOPIC": topics["state"],
    }
    env.pop("PYTHONPATH", None)
    guard = GuardProcess(bootstrap=bootstrap, name=name, workdir=tmp_path, binary=binary, admin_port=free_port())
    ran = {"sh": 0, "python": 0, "ts": 0, "json": 0}
    last_output = None
    not_run: List[str] = []  # framework blocks whose framework is not installed here
    skip_output = False
    try:
        for n, (kind, code) in enumerate(blocks()):
            where = f"docs/integration.md block {n + 1} ({kind})"
            if kind == "text" and skip_output:
                skip_output = False
                continue
            if kind == "text":
                assert last_output is not None, f"{where}: output block without a code block before it"
                assert last_output == code, f"{where}: the output is not the block's:\n{last_output}"
                last_output = None
                continue
            last_output = None
            if kind == "sh":
                last_output = run(["bash", "-euo", "pipefail", "-c", sh(code, bootstrap)], project, env, where)
                if "topics create" in code:
                    guard.write_config()  # the same names the doc's command created
                    guard.start()
            elif kind == "python":
                interpreter = str(env_dir / "bin" / "python")
                adapter = ADAPTER.search(code)
                if adapter is not None:
                    framework = FRAMEWORK[adapter.group(1)]
                    if importlib.util.find_spec(framework) is None:
                        assert os.environ.get("LOOPGUARD_DOC_EXTRAS") != "required", f"{where}: `{framework}` is not installed"
                        not_run.append(where)
                        skip_output = True
                        continue
                    interpreter = sys.executable  # where the extras are installed
                script = project / f"block{n + 1}.py"
                script.write_text(python(code, bootstrap, topics))
                last_output = run([interpreter, str(script)], project, env, where)
            elif kind == "ts":
                script = project / f"block{n + 1}.mjs"
                script.write_text(typescript(code, bootstrap, topics))
                last_output = run(["node", str(script)], project, env, where)
            elif kind == "json":
                check_json(code, where)
            ran[kind] += 1
    finally:
        guard.stop()
        guard.delete_topics()
    assert all(ran.values()), ran
    if not_run:
        print(f"\nnot run, their frameworks not installed: {', '.join(not_run)}")


def run(argv: List[str], cwd: pathlib.Path, env: dict, where: str) -> str:
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"{where} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout


def sh(code: str, bootstrap: str) -> str:
    return code.replace("kafka:9092", bootstrap)


def python(code: str, bootstrap: str, topics: dict) -> str:
    for cls in ("AsyncGuard", "Guard"):
        code = code.replace(
            f'{cls}("kafka:9092"',
            f'{cls}("{bootstrap}", events_topic="{topics["events"]}", verdicts_topic="{topics["verdicts"]}"',
        )
    return (
        code.replace('"kafka:9092"', f'"{bootstrap}"')
        .replace('"agent-events"', f'"{topics["events"]}"')
        .replace('"agent-verdicts"', f'"{topics["verdicts"]}"')
    )


def typescript(code: str, bootstrap: str, topics: dict) -> str:
    """The doc's TypeScript blocks are written to run as ES modules as they are."""
    return code.replace(
        'brokers: ["kafka:9092"]',
        f'brokers: ["{bootstrap}"], eventsTopic: "{topics["events"]}", verdictsTopic: "{topics["verdicts"]}"',
    )


def check_json(code: str, where: str) -> None:
    from loopguard import Verdict
    from loopguard.validate import check_event

    doc = json.loads(code)
    if "verdict_id" in doc:
        v = Verdict.from_wire(doc)
        assert v.verdict_id == doc["verdict_id"], where
    else:
        check_event(doc)
