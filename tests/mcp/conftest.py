"""A real `loopguard serve` and `loopguard edge` on private topics of the test broker
(KAFKA_BOOTSTRAP_SERVERS), for the MCP proxy's tests. The policy gives tenant `aborter` an
exact repeat that aborts."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Iterator, List

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SERVER = str(pathlib.Path(__file__).with_name("small_server.py"))


def binary() -> str:
    explicit = os.environ.get("LOOPGUARD_BIN")
    if explicit:
        return explicit
    return str(REPO / "target" / "debug" / "loopguard")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen, log: pathlib.Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} not ready: {log.read_text()[-2000:]}")


def check(edge: str, event: dict, deadline_ms: int) -> dict:
    req = urllib.request.Request(
        f"{edge}/v1/check?deadline_ms={deadline_ms}",
        data=json.dumps(event).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=deadline_ms / 1000 + 5) as r:
        return dict(json.loads(r.read()))


class Stack:
    """The broker's private topics, a guard and an edge."""

    def __init__(self, tmp: pathlib.Path):
        self.tmp = tmp
        self.name = f"mcp-{uuid.uuid4().hex[:10]}"
        self.bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
        self.admin = free_port()
        self.edge_port = free_port()
        self.edge = f"http://127.0.0.1:{self.edge_port}"
        self.config = tmp / "loopguard.toml"
        self.config.write_text(
            "[kafka]\n"
            f'bootstrap_servers = "{self.bootstrap}"\n'
            f'group_id = "{self.name}-group"\n'
            f'events_topic = "{self.name}-events"\n'
            f'verdicts_topic = "{self.name}-verdicts"\n'
            f'dlq_topic = "{self.name}-dlq"\n'
            f'state_topic = "{self.name}-state"\n'
            f'policy_topic = "{self.name}-policy"\n'
            f'transactional_id_prefix = "{self.name}"\n'
            "batch_max_ms = 20\n"
            "[admin]\n"
            f'listen = "127.0.0.1:{self.admin}"\n'
            "[[policy.overrides]]\n"
            'tenant = "aborter"\n'
            'set = { rules = [ { rule = "tool.exact_repeat", action = "abort" } ] }\n'
        )
        subprocess.run(
            [binary(), "topics", "create", "--config", str(self.config), "--partitions", "2"],
            check=True, capture_output=True, timeout=60,
        )
        self.procs: List[subprocess.Popen] = []
        self.guard = self.spawn("guard", ["serve", "--config", str(self.config)])
        wait_http(f"http://127.0.0.1:{self.admin}/readyz", self.guard, tmp / "guard.log")
        self.start_edge()

    def spawn(self, name: str, args: List[str]) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "ab")
        p = subprocess.Popen([binary(), *args], stdout=subprocess.DEVNULL, stderr=log,
                             env={**os.environ, "RUST_LOG": "warn"})
        self.procs.append(p)
        return p

    def start_edge(self) -> None:
        edge = self.spawn("edge", ["edge", "--config", str(self.config), "--listen", f"127.0.0.1:{self.edge_port}"])
        wait_http(f"{self.edge}/readyz", edge, self.tmp / "edge.log")
        # The guard owns its partitions once a probe on each is judged.
        for p in range(8):
            probe = {"v": 1, "event_id": f"probe-{p}", "session_id": f"probe-{p}", "ts": 1767225600000,
                     "type": "tool_call", "turn_id": "t", "call_id": "c", "tool": "probe", "args": {}}
            assert check(self.edge, probe, 30000)["answer"] == "judged"

    def proxy(self, session: str, tenant: str = "acme", edge: str = "") -> List[str]:
        """The proxy command line in front of the small server."""
        return [binary(), "mcp-proxy", "--edge", edge or self.edge, "--session", session,
                "--tenant", tenant, "--", sys.executable, SERVER]

    def stop_guard(self) -> None:
        self.guard.terminate()
        self.guard.wait(30)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("stack"))
    try:
        yield s
    finally:
        s.close()
