"""The project's alert rules on a live stack: a real Prometheus server (Debian's package,
run directly with its own data dir and port) loads deploy/prometheus/loopguard-alerts.yaml
unchanged and scrapes a real `loopguard serve`; agents driven through Kafka with the
Python client. Healthy traffic must leave LoopguardLoopRateSpike inactive; a loop spike
must make it pending (its `for: 10m` is not waited out: pending is the rule's expression
holding on live data, firing only adds the wait).

The alert compares the loop rate with its average over the previous 6 hours (offset 15m),
which a fresh server cannot have: that history of the recorded series is backfilled with
`promtool tsdb create-blocks-from openmetrics` before the server starts.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from typing import Iterator, Optional

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "clients" / "python" / "tests"))

from guardproc import GuardProcess, free_port, new_guard_process  # noqa: E402
from loopguard import Guard  # noqa: E402

RULES = REPO / "deploy" / "prometheus" / "loopguard-alerts.yaml"
# Loops per event over the backfilled 6 hours: one looping session in ten.
BASELINE = 0.01
ALERT = "LoopguardLoopRateSpike"
RULE_ALERT = "LoopguardRuleLoopRateSpike"


class Prometheus:
    def __init__(self, workdir: pathlib.Path, target: str):
        self.port = free_port()
        self.data = workdir / "data"
        self.config = workdir / "prometheus.yml"
        self.config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {RULES}\n"
            "scrape_configs:\n"
            "  - job_name: loopguard\n"  # the job the rules aggregate by
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        self.log = open(workdir / "prometheus.log", "wb")
        self.proc: Optional[subprocess.Popen] = None

    def backfill(self, lines: list) -> None:
        om = self.data.parent / "history.om"
        om.write_text("\n".join(lines) + "\n# EOF\n")
        subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(self.data)],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1d",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        until = time.monotonic() + 60
        while time.monotonic() < until:
            assert self.proc.poll() is None, self.log_tail()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready: {self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def log_tail(self) -> str:
        self.log.flush()
        return (self.data.parent / "prometheus.log").read_text(errors="replace")[-3000:]

    def api(self, path: str, **params: str) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def alert_states(self, name: str) -> list:
        return [a["state"] for a in self.api("alerts")["alerts"] if a["labels"].get("alertname") == name]

    def value(self, query: str) -> Optional[float]:
        result = self.api("query", query=query)["result"]
        return float(result[0]["value"][1]) if result else None

    def rule_health(self) -> list:
        return [
            (r["name"], r["health"], r.get("lastError", ""))
            for g in self.api("rules")["groups"]
            for r in g["rules"]
            if r["health"] != "ok"
        ]


def history(now: float) -> list:
    """Six and a half hours of the recorded loop rates at the baseline, one sample a minute,
    ending two minutes ago (before anything live)."""
    series = [
        ("namespace_job:loopguard_loops_per_event:ratio_rate5m", '{job="loopguard"}'),
        ("namespace_job_rule:loopguard_loops_per_event:ratio_rate5m", '{job="loopguard",rule="tool.exact_repeat"}'),
    ]
    lines = []
    for name, labels in series:
        lines.append(f"# TYPE {name} gauge")
        for t in range(int(now) - 390 * 60, int(now) - 120, 60):
            lines.append(f"{name}{labels} {BASELINE} {t}")
    return lines


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        pytest.fail("prometheus and promtool are needed (Debian package `prometheus`)")
    guard = new_guard_process(tmp_path_factory.mktemp("guard"), "alerts")
    guard.start()
    prom = Prometheus(tmp_path_factory.mktemp("prometheus"), f"127.0.0.1:{guard.admin_port}")
    try:
        prom.backfill(history(time.time()))
        prom.start()
        yield guard, prom
    finally:
        prom.stop()
        guard.stop()
        guard.delete_topics()


def healthy_session(client: Guard, n: int) -> None:
    """A session that makes progress: distinct reads, each with its result, then an answer."""
    s = client.session(f"healthy-{uuid.uuid4().hex[:10]}")
    s.user_message("summarise the service")
    for i in range(4):
        s.tool_call("read_file", {"path": f"src/module_{n}_{i}.rs"}, deadline=0)
        s.turn_end()
        s.tool_result("read_file", evidence=None)
    s.assistant_message("The service consumes events and writes verdicts.")
    s.turn_end()
    s.session_end()


def looping_session(client: Guard) -> None:
    """The same call again and again: blocked on the 3rd, and on."""
    s = client.session(f"looping-{uuid.uuid4().hex[:10]}")
    s.user_message("fix the build")
    for _ in range(5):
        s.tool_call("bash", {"cmd": "cargo build"}, deadline=0)
        s.turn_end()
        s.tool_result("bash", "error", error="linker `cc` not found")
    s.session_end()


def drive(client: Guard, seconds: float, looping_share: float) -> None:
    """Sessions for `seconds`, `looping_share` of them looping."""
    until, n = time.monotonic() + seconds, 0
    while time.monotonic() < until:
        n += 1
        if looping_share > 0 and n % round(1 / looping_share) == 0:
            looping_session(client)
        else:
            healthy_session(client, n)
        client.flush(5)
        time.sleep(0.1)


def test_loop_spike_alert_is_quiet_on_healthy_traffic_and_pending_on_a_spike(stack: tuple) -> None:
    guard, prom = stack
    client = Guard(guard.bootstrap, events_topic=guard.events_topic, verdicts_topic=guard.verdicts_topic)
    try:
        # Healthy fleet: loops at the baseline share. The recorded loop rate is live and
        # near the baseline, and neither alert leaves the inactive state.
        drive(client, 25, looping_share=BASELINE * 10)
        ratio = prom.value("namespace_job:loopguard_loops_per_event:ratio_rate5m")
        assert ratio is not None, f"loop rate not recorded; prometheus log: {prom.log_tail()}"
        assert ratio < 3 * BASELINE, ratio
        for _ in range(5):
            assert prom.alert_states(ALERT) == [] and prom.alert_states(RULE_ALERT) == []
            time.sleep(1)
        assert prom.rule_health() == []

        # A loop spike: every session loops. Within a few evaluations the loop rate is far
        # above 3x its 6-hour average and the alert goes pending.
        states: list = []
        until = time.monotonic() + 90
        while time.monotonic() < until and "pending" not in states and "firing" not in states:
            drive(client, 3, looping_share=1.0)
            states = prom.alert_states(ALERT)
        assert states in (["pending"], ["firing"]), (states, prom.value("namespace_job:loopguard_loops_per_event:ratio_rate5m"))
        # The per-rule alert, on the rule that loops (tool.exact_repeat), follows.
        until = time.monotonic() + 30
        while time.monotonic() < until and not set(prom.alert_states(RULE_ALERT)) & {"pending", "firing"}:
            drive(client, 1, looping_share=1.0)
        assert set(prom.alert_states(RULE_ALERT)) & {"pending", "firing"}, prom.api(
            "query", query="namespace_job_rule:loopguard_loops_per_event:ratio_rate5m"
        )
        alert = next(a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == ALERT)
        assert alert["labels"]["job"] == "loopguard" and alert["labels"]["severity"] == "warning"
        assert alert["annotations"]["runbook_url"].endswith("#loopguardloopratespike")
    finally:
        client.close()
