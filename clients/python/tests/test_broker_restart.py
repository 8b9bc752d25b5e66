"""A broker restart under a running client: a private broker (scripts/kafka.sh on a free port
pair, so the shared test broker is never touched) is stopped and started again on the same
data, with a guard and a client attached. While it is down, `tool_call` fails open after
its deadline and nothing raises; once it is back, the same client (and guard) carry on: a
looping session is blocked again, and nothing was delivered twice. Nothing reaches the
agent's stderr, and the outage is logged once when it starts and once when it ends (it was
248 lines of librdkafka's in 8 calls, issue 33). The outage outlasts the
guard's group session (6 s in guardproc's config), so the guard loses its assignment and
restores it against a broker that is still starting: it must ride that out, not exit."""

from __future__ import annotations

import logging
import os
import pathlib
import random
import signal
import socket
import subprocess
import time
import uuid
from typing import Iterator, List

import pytest

from guardproc import GuardProcess, free_port
from loopguard import Action, Guard, GuardError

REPO = pathlib.Path(__file__).resolve().parents[3]
WAIT = 15.0
# Longer than the guard's `session.timeout.ms` (guardproc.py): its assignment is lost.
OUTAGE = 8.0


def _port_pair() -> int:
    """A free port whose next one is free too (the broker's controller listener), below the
    kernel's ephemeral range: a port from that range can be handed to an outgoing
    connection while the broker is down, and the broker could not bind it again."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        try:
            for p in (port, port + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair")


class Broker:
    """A broker of scripts/kafka.sh that can be restarted on the same data."""

    def __init__(self, port: int):
        self.port = port
        self.run_dir = REPO / "build" / "kafka" / f"run-{port}"
        out = subprocess.run(
            ["bash", str(REPO / "scripts" / "kafka.sh"), "start", str(port)], capture_output=True, text=True, timeout=180
        )
        assert out.returncode == 0, out.stderr
        self.bootstrap = f"127.0.0.1:{port}"
        pid = int((self.run_dir / "kafka.pid").read_text())
        # The broker's own command line, to start it again exactly as kafka.sh did.
        self.argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        self.proc_pid = pid

    def stop(self) -> None:
        os.kill(self.proc_pid, signal.SIGTERM)
        until = time.monotonic() + 60
        while time.monotonic() < until and pathlib.Path(f"/proc/{self.proc_pid}").exists():
            status = pathlib.Path(f"/proc/{self.proc_pid}/status").read_text() if pathlib.Path(f"/proc/{self.proc_pid}/status").exists() else ""
            if "State:\tZ" in status:
                break
            time.sleep(0.1)

    def start_again(self) -> None:
        log = open(self.run_dir / "stdout-restarted.log", "wb")
        p = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.proc_pid = p.pid
        (self.run_dir / "kafka.pid").write_text(f"{p.pid}\n")  # so kafka.sh stop finds it
        until = time.monotonic() + 90
        while time.monotonic() < until:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("broker did not come back")

    def close(self) -> None:
        subprocess.run(["bash", str(REPO / "scripts" / "kafka.sh"), "stop", str(self.port)], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    b = Broker(_port_pair())
    try:
        yield b
    finally:
        b.close()


def loop_until_blocked(session, tool: str) -> Action:
    for n in range(3):
        v = session.tool_call(tool, {"n": 1}, deadline=WAIT if n == 2 else 0.0)
        session.turn_end()
    assert v is not None, "no verdict"
    return v.action


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: List[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.timeout(400)
def test_the_client_fails_open_while_the_broker_is_down_and_carries_on_after(
    broker: Broker, tmp_path: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    logs = Records()
    logging.getLogger("loopguard").addHandler(logs)
    logging.getLogger("loopguard").setLevel(logging.DEBUG)
    guard_proc = GuardProcess(
        bootstrap=broker.bootstrap,
        name=f"restart-{uuid.uuid4().hex[:8]}",
        workdir=tmp_path,
        binary=os.environ.get("LOOPGUARD_BIN") or str(REPO / "target" / "debug" / "loopguard"),
        admin_port=free_port(),
    )
    guard_proc.write_config()
    guard_proc.create_topics()
    guard_proc.start()
    errors: List[str] = []
    client = Guard(
        broker.bootstrap,
        events_topic=guard_proc.events_topic,
        verdicts_topic=guard_proc.verdicts_topic,
        on_error=lambda where, e: errors.append(where),
    )
    try:
        before = client.session(f"before-{uuid.uuid4().hex[:8]}")
        before.user_message("go")
        assert loop_until_blocked(before, "status") is Action.BLOCK

        broker.stop()
        stopped = time.monotonic()
        down = client.session(f"down-{uuid.uuid4().hex[:8]}")
        down.user_message("go")  # queued in the client, not lost
        for _ in range(3):
            started = time.monotonic()
            assert down.tool_call("status", {"n": 1}, deadline=0.3) is None
            assert time.monotonic() - started < 0.45
            down.turn_end()

        time.sleep(max(0.0, OUTAGE - (time.monotonic() - stopped)))
        broker.start_again()
        after = None
        action = None
        until = time.monotonic() + 180
        while action is not Action.BLOCK and time.monotonic() < until:
            # Should the guard exit after all, it is started again, so the client's side is
            # still checked (the test fails on it below).
            if guard_proc.proc is None or guard_proc.proc.poll() is not None:
                guard_proc.start(timeout=120)
            after = client.session(f"after-{uuid.uuid4().hex[:8]}")
            after.user_message("go")
            try:
                action = loop_until_blocked(after, "poll")
            except AssertionError:
                continue
        assert action is Action.BLOCK, f"no verdict after the restart; stats {client.stats()}"
        # What was published while the broker was down reached the guard after all.
        until = time.monotonic() + WAIT
        while not down.verdicts and time.monotonic() < until:
            time.sleep(0.1)
        assert [v.action for v in down.verdicts][:1] == [Action.BLOCK], guard_proc.log_tail()
        # The guard rode the outage out: the same process served both sides of it.
        assert guard_proc.starts == 1 and guard_proc.proc is not None and guard_proc.proc.poll() is None, (
            guard_proc.log_tail()
        )
        st = client.stats()
        assert st.events_failed == 0, st
        ids = [v.verdict_id for s in (before, down, after) if s is not None for v in s.verdicts]
        assert len(ids) == len(set(ids))
        # The library's own lines only at DEBUG; the outage said once per change of state.
        said = [(r.levelno, r.getMessage()) for r in logs.records if r.levelno >= logging.INFO]
        assert all(r.levelno == logging.DEBUG for r in logs.records if r.name == "loopguard.kafka")
        assert any(r.name == "loopguard.kafka" for r in logs.records), "librdkafka's lines were not routed"
        states = [("down" if "unreachable" in m else "up" if "reachable again" in m else m) for _, m in said]
        assert states[:2] == ["down", "up"] and len(states) <= 6, said
        assert all(a != b for a, b in zip(states, states[1:])), said  # each change once
        # on_error hears of the outage once per outage, not per connection retry.
        assert 1 <= len(errors) <= 10, errors
    finally:
        client.close()
        guard_proc.stop()
        logging.getLogger("loopguard").removeHandler(logs)
    # With the broker away, close() drops what is unsent at once instead of waiting it out.
    away = Guard(broker.bootstrap, events_topic=guard_proc.events_topic, verdicts_topic=guard_proc.verdicts_topic)
    s = away.session(f"close-{uuid.uuid4().hex[:8]}")
    broker.stop()
    try:
        for _ in range(3):
            s.user_message("go")
        until = time.monotonic() + 30
        while not away._reach.down and time.monotonic() < until:
            time.sleep(0.1)
        started = time.monotonic()
        away.close()
        assert time.monotonic() - started < 1.0
    finally:
        broker.start_again()
    captured = capfd.readouterr()
    assert captured.err == "", captured.err[-2000:]


@pytest.mark.timeout(400)
def test_a_client_made_while_the_broker_is_away_fails_open_at_once_and_sends_its_backlog(
    broker: Broker, tmp_path: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Issue 35: the constructor does not wait for an absent broker. It returns at once, tool
    calls are answered fail-open at once (not at their deadline), the session's events are
    kept; once the broker and the guard are up, they reach the guard in order and the loop
    they began is blocked as usual."""
    logs = Records()
    logging.getLogger("loopguard").addHandler(logs)
    logging.getLogger("loopguard").setLevel(logging.DEBUG)
    guard_proc = GuardProcess(
        bootstrap=broker.bootstrap,
        name=f"absent-{uuid.uuid4().hex[:8]}",
        workdir=tmp_path,
        binary=os.environ.get("LOOPGUARD_BIN") or str(REPO / "target" / "debug" / "loopguard"),
        admin_port=free_port(),
    )
    guard_proc.write_config()
    guard_proc.create_topics()
    broker.stop()
    errors: List[str] = []
    started = time.monotonic()
    client = Guard(
        broker.bootstrap,
        events_topic=guard_proc.events_topic,
        verdicts_topic=guard_proc.verdicts_topic,
        on_error=lambda where, e: errors.append(f"{where}: {e}"),
    )
    try:
        made = time.monotonic() - started
        assert made < 0.5, made  # it was startup_timeout (10 s), then GuardError
        assert not client.connected
        s = client.session(f"absent-{uuid.uuid4().hex[:8]}")
        s.user_message("The build is broken, fix it.")
        answers = []
        for _ in range(2):
            called = time.monotonic()
            assert s.tool_call("status", {"n": 1}, deadline=WAIT) is None
            answers.append(time.monotonic() - called)
            s.tool_result("status", "error", error="connection refused")
            s.turn_end()
        assert max(answers) < 0.05, answers  # at once, not at the 15 s deadline
        with pytest.raises(GuardError, match=f"cannot reach Kafka at {broker.bootstrap}"):
            client.ready(0.3)
        st = client.stats()
        assert st.tool_calls_not_connected == 2 and st.tool_call_deadlines == 0 and st.events_sent == 0, st

        broker.start_again()
        guard_proc.start(timeout=120)
        client.ready(120)
        v = s.tool_call("status", {"n": 1}, deadline=WAIT)
        assert v is not None and v.action is Action.BLOCK, (client.stats(), guard_proc.log_tail())
        assert v.evidence["count"] == 3  # the two calls made while the broker was away came first
        st = client.stats()
        assert st.events_sent >= 8 and st.events_failed == 0 and st.events_overflowed == 0, st
        # The outage said once (on_error and one WARNING), and its end once.
        assert 1 <= len(errors) <= 2 and all("connect" in e or "kafka" in e for e in errors), errors
        said = [f"{r.created:.3f} {r.getMessage()}" for r in logs.records if r.levelno >= logging.INFO]
        states = ["down" if "unreachable" in m else "up" if "reachable again" in m else m for m in said]
        # Not a stale "refused" of the reader's first consumer after "reachable again": the
        # connection serves that consumer's callbacks before it is handed to the reader.
        assert states == ["down", "up"], "\n".join(said)
    finally:
        client.close()
        guard_proc.stop()
        logging.getLogger("loopguard").removeHandler(logs)
    captured = capfd.readouterr()
    assert captured.err == "", captured.err[-2000:]
