"""A real Kafka-backed `loopguard serve` on private topics, for tests: topics made by
`loopguard topics create`, stopped and started at will. Used by the client tests and by the
live alert test (deploy/prometheus/live)."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Optional

REPO = pathlib.Path(__file__).resolve().parents[3]
PARTITIONS = 2


def _binary() -> str:
    explicit = os.environ.get("LOOPGUARD_BIN")
    if explicit:
        return explicit
    for profile in ("debug", "release"):
        candidate = REPO / "target" / profile / "loopguard"
        if candidate.exists():
            return str(candidate)
    raise RuntimeError("no loopguard binary: build it (cargo build) or set LOOPGUARD_BIN")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class GuardProcess:
    """One `loopguard serve` on private topics."""

    bootstrap: str
    name: str
    workdir: pathlib.Path
    binary: str
    admin_port: int
    proc: Optional[subprocess.Popen] = None
    starts: int = 0

    @property
    def events_topic(self) -> str:
        return f"{self.name}-events"

    @property
    def verdicts_topic(self) -> str:
        return f"{self.name}-verdicts"

    @property
    def config_path(self) -> pathlib.Path:
        return self.workdir / "loopguard.toml"

    def write_config(self) -> None:
        self.config_path.write_text(
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
            "[kafka.properties]\n"
            '"transaction.timeout.ms" = "10000"\n'
            '"session.timeout.ms" = "6000"\n'
            "[admin]\n"
            f'listen = "127.0.0.1:{self.admin_port}"\n'
            # Tenant `observer` runs every rule in observe mode (test_observe_mode.py).
            "[[policy.overrides]]\n"
            'tenant = "observer"\n'
            "[policy.overrides.set]\n"
            'mode = "observe"\n'
        )

    def create_topics(self) -> str:
        out = subprocess.run(
            [self.binary, "topics", "create", "--config", str(self.config_path), "--partitions", str(PARTITIONS)],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return out.stdout

    def start(self, timeout: float = 60.0) -> None:
        self.starts += 1
        log = open(self.workdir / f"guard-{self.starts}.log", "wb")
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--config", str(self.config_path)],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, "RUST_LOG": "warn", "LOOPGUARD_INSTANCE_ID": f"{self.name}-{self.starts}"},
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"loopguard serve exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"loopguard serve not ready after {timeout}s: {self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def delete_topics(self) -> None:
        """Removes the five private topics (a shared development broker keeps no litter)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        names = [f"{self.name}-{k}" for k in ("events", "verdicts", "dlq", "state", "policy")]
        for future in admin.delete_topics(names, operation_timeout=30).values():
            try:
                future.result()
            except Exception:
                pass  # already gone, or never made: nothing to clean

    def log_tail(self) -> str:
        path = self.workdir / f"guard-{self.starts}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics", timeout=5) as r:
            total = 0.0
            for line in r.read().decode().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    total += float(line.rsplit(" ", 1)[1])
            return total




def new_guard_process(tmp: pathlib.Path, prefix: str) -> GuardProcess:
    """Writes the configuration and creates the topics; `start()` runs the guard."""
    g = GuardProcess(
        bootstrap=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092"),
        name=f"{prefix}-{uuid.uuid4().hex[:10]}",
        workdir=tmp,
        binary=_binary(),
        admin_port=free_port(),
    )
    g.write_config()
    g.create_topics()
    return g
