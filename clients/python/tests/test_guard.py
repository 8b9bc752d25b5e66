"""The Python client against a real broker and a real `loopguard serve`."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from loopguard import Action, AsyncGuard, Evidence, Guard, Limits, LoopCost, Usage, ValidationError, Verdict, partition_for

from guardproc import PARTITIONS, GuardProcess

HERE = pathlib.Path(__file__).resolve().parent
# Long enough for a verdict on a loaded 2-core CI machine; the tests measure the real time.
WAIT = 10.0


def sid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def loop_round(session, n: int, deadline: float = 0.0):
    """One round of the looping agent: the same call, its result, the end of the turn."""
    verdict = session.tool_call("bash", {"cmd": "cargo build --locked"}, deadline=deadline)
    if verdict is None:
        session.tool_result("bash", "error", error="error: linker `cc` not found", evidence=Evidence.observed("cc not found"))
    session.turn_end()
    return verdict


def test_looping_agent_is_blocked_on_the_third_identical_call(guard: Guard) -> None:
    s = guard.session(sid("loop"))
    s.user_message("The build is broken, fix it.", limits=Limits(max_tool_rounds=15))
    assert loop_round(s, 1, deadline=0.3) is None
    assert loop_round(s, 2, deadline=0.3) is None
    started = time.monotonic()
    v = loop_round(s, 3, deadline=WAIT)
    assert v is not None, f"no verdict within {WAIT}s; stats {guard.stats()}"
    assert v.action is Action.BLOCK
    assert v.rule == "tool.exact_repeat"
    assert v.directives.stop_tool_calls
    assert v.session_id == s.session_id and (v.tenant, v.agent, v.model) == ("acme", "coder", "m-test")
    assert v.evidence["count"] == 3
    assert time.monotonic() - started < WAIT
    assert [x.verdict_id for x in s.verdicts] == [v.verdict_id]
    assert guard.stats().background_errors == 0


def feedback_count(gp: GuardProcess, rule: str, useful: bool) -> float:
    """`loopguard_verdict_feedback_total` of `rule` judged `useful`, summed, from the guard's metrics."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{gp.admin_port}/metrics", timeout=5).read().decode()
    want = (f'rule="{rule}"', f'useful="{str(useful).lower()}"')
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("loopguard_verdict_feedback_total{") and all(w in line for w in want)
    )


def test_feedback_on_a_verdict_reaches_the_precision_metric(guard_process: GuardProcess, guard: Guard) -> None:
    s = guard.session(sid("feedback"))
    s.user_message("The build is broken, fix it.")
    loop_round(s, 1, deadline=0.3)
    loop_round(s, 2, deadline=0.3)
    v = loop_round(s, 3, deadline=WAIT)
    assert v is not None and v.rule == "tool.exact_repeat"
    before = feedback_count(guard_process, v.rule, False)
    s.feedback(v.verdict_id, False, note="the build needed a linker, retrying was the way")
    deadline = time.monotonic() + WAIT
    while feedback_count(guard_process, v.rule, False) < before + 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert feedback_count(guard_process, v.rule, False) == before + 1
    with pytest.raises(ValidationError) as e:
        s.feedback("", True)
    assert e.value.field == "verdict_id"


def private_guard(gp: GuardProcess, **settings: object) -> Guard:
    """A client `Guard` of its own on the test guard's private topics."""
    return Guard(gp.bootstrap, events_topic=gp.events_topic, verdicts_topic=gp.verdicts_topic, **settings)  # type: ignore[arg-type]


def healthy_calls(s, n: int, deadline: float) -> list:
    """`n` distinct reads, each timed: what a healthy call costs the agent (seconds)."""
    costs = []
    for i in range(n):
        started = time.monotonic()
        v = s.tool_call("read_file", {"path": f"src/module_{i}.py"}, deadline=deadline)
        costs.append(time.monotonic() - started)
        assert v is None, v
        s.tool_result("read_file", "ok")
        s.turn_end()
    return costs


@pytest.mark.parametrize("uncommitted", [False, True], ids=["read_committed", "read_uncommitted"])
def test_a_healthy_call_returns_no_verdict_as_soon_as_a_marker_covers_it(guard_process: GuardProcess, uncommitted: bool) -> None:
    """The judged-through marker answers "no verdict" long before the deadline; the
    deadline is never reached while the guard runs."""
    g = private_guard(guard_process, read_uncommitted=uncommitted)
    try:
        s = g.session(sid("healthy"))
        s.user_message("Read the modules.")
        healthy_calls(s, 2, WAIT)  # warm: the first call on a partition assigns it
        costs = sorted(healthy_calls(s, 10, WAIT))
        stats = g.stats()
        assert stats.tool_call_deadlines == 0, stats
        assert stats.tool_calls_no_verdict == 12, stats
        # Far below the deadline; the guard commits every 20 ms in these tests.
        assert costs[len(costs) // 2] < 1.0, costs
        assert max(costs) < WAIT / 2, costs
    finally:
        g.close()


def test_markers_never_answer_no_verdict_for_a_call_that_gets_one(guard: Guard) -> None:
    """Loops in several sessions at once, every call with a long deadline: each first and
    second call returns None (judged, no verdict), each third is blocked, never None."""
    sessions = [guard.session(sid(f"many-{i}")) for i in range(6)]
    for s in sessions:
        s.user_message("The build is broken, fix it.")
    for n in (1, 2, 3):
        for s in sessions:
            v = loop_round(s, n, deadline=WAIT)
            if n < 3:
                assert v is None, v
            else:
                assert v is not None and v.action is Action.BLOCK, (s.session_id, guard.stats())
    stats = guard.stats()
    assert stats.tool_call_deadlines == 0 and stats.tool_calls_no_verdict == 12, stats


def test_read_uncommitted_is_an_option_and_sees_the_verdict_before_its_commit(guard_process: GuardProcess) -> None:
    g = private_guard(guard_process, read_uncommitted=True)
    try:
        s = g.session(sid("uncommitted"))
        s.user_message("go")
        loop_round(s, 1)
        loop_round(s, 2)
        v = loop_round(s, 3, deadline=WAIT)
        assert v is not None and v.action is Action.BLOCK
    finally:
        g.close()


def test_streamed_reasoning_is_steered_before_the_turn_ends(guard: Guard) -> None:
    s = guard.session(sid("reason"))
    s.user_message("Why does the test fail?")
    chunk = "Let me re-check whether the fixture path is right before running it. "
    steer = None
    streaming_until = time.monotonic() + WAIT
    while time.monotonic() < streaming_until:  # a stream that would go on for a long time
        s.reasoning(chunk)
        got = s.take_verdicts(timeout=0.05)
        if got:
            steer = got[0]
            break
    assert steer is not None, f"no verdict while streaming; stats {guard.stats()}"
    assert steer.action is Action.STEER and steer.rule.startswith("reasoning.")
    assert steer.turn_id == "t1"
    s.turn_end()  # only now does the turn end: the steer came while it streamed


def test_a_stopped_guard_makes_tool_call_fail_open_after_the_deadline(guard_process: GuardProcess, guard: Guard) -> None:
    s = guard.session(sid("down"))
    s.user_message("anything")
    guard_process.stop()
    try:
        for deadline in (0.2, 0.5):
            started = time.monotonic()
            for _ in range(3):  # even the call that would be blocked
                v = s.tool_call("bash", {"cmd": "make"}, deadline=deadline)
                assert v is None
            per_call = (time.monotonic() - started) / 3
            assert deadline <= per_call < deadline + 0.15, per_call
        assert guard.stats().tool_call_deadlines >= 6
    finally:
        guard_process.start()
    # The guard comes back and judges what was published while it was away: the loop of
    # six identical calls is caught late, and the verdicts reach the session.
    assert s.take_verdicts(timeout=WAIT), f"no verdict after the restart; stats {guard.stats()}"
    # Markers resume: healthy calls are answered by them again, none waits its deadline.
    before = guard.stats()
    h = guard.session(sid("after-restart"))
    h.user_message("Read the modules.")
    healthy_calls(h, 3, WAIT)
    after = guard.stats()
    assert after.tool_calls_no_verdict - before.tool_calls_no_verdict == 3, after
    assert after.tool_call_deadlines == before.tool_call_deadlines, after


def test_asyncio_block_and_verdicts_as_an_async_iterator(guard_process: GuardProcess) -> None:
    async def main() -> None:
        async with AsyncGuard(
            guard_process.bootstrap, events_topic=guard_process.events_topic, verdicts_topic=guard_process.verdicts_topic
        ) as g:
            s = g.session(sid("async"))
            await s.user_message("list the files")
            for n in range(2):
                assert await s.tool_call("ls", {"path": "."}, deadline=0.1) is None
                await s.turn_end()
            v = await s.tool_call("ls", {"path": "."}, deadline=WAIT)
            assert v is not None and v.action is Action.BLOCK
            await s.turn_end()

            r = g.session(sid("async-reason"))
            await r.user_message("think")
            steers = []

            async def watch() -> None:
                async for verdict in r.verdicts():
                    steers.append(verdict)
                    return

            watcher = asyncio.create_task(watch())
            for _ in range(40):
                await r.reasoning("I wonder if the cache is stale, so I will look at it again. ")
                await asyncio.sleep(0.05)
                if watcher.done():
                    break
            await asyncio.wait_for(watcher, WAIT)
            assert steers and steers[0].action is Action.STEER
            await r.turn_end()
            assert g.stats().background_errors == 0

    asyncio.run(main())


def _same_partition_sessions(prefix: str, count: int) -> list:
    """Session ids the client puts on partition 0, so the two processes below really share
    a verdict partition."""
    out, i = [], 0
    while len(out) < count:
        candidate = f"{prefix}-{i}"
        if partition_for(candidate, PARTITIONS) == 0:
            out.append(candidate)
        i += 1
    return out


def test_two_processes_each_see_only_their_own_verdicts(guard_process: GuardProcess, tmp_path: pathlib.Path) -> None:
    run = uuid.uuid4().hex[:8]
    procs = {}
    for name in ("a", "b"):
        sessions = _same_partition_sessions(f"two-{run}-{name}", 3)
        procs[name] = (
            sessions,
            subprocess.Popen(
                [
                    sys.executable,
                    str(HERE / "agent_process.py"),
                    guard_process.bootstrap,
                    guard_process.events_topic,
                    guard_process.verdicts_topic,
                    str(tmp_path),
                    name,
                    *sessions,
                ],
                stdout=subprocess.PIPE,
                text=True,
            ),
        )
    for name, (sessions, p) in procs.items():
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out
        report = json.loads(out.strip().splitlines()[-1])
        seen = set(report["verdict_sessions"])
        assert seen == set(sessions), (name, seen)  # every own session blocked, no other
        assert report["partitions"] == [0]
        assert report["blocks"] == len(sessions)
        assert report["stats"]["verdicts_other_sessions"] >= 1  # the other's were on the partition
        assert report["stats"]["background_errors"] == 0


def test_a_reader_restart_does_not_deliver_a_verdict_twice(guard_process: GuardProcess, guard: Guard) -> None:
    s = guard.session(sid("restart"))
    delivered = []
    s2 = guard.session(sid("restart-cb"), on_verdict=delivered.append)
    s.user_message("go")
    loop_round(s, 1)
    loop_round(s, 2)
    first = loop_round(s, 3, deadline=WAIT)
    assert first is not None
    guard.restart_reader()
    # The same verdict written again, as the guard does after a crash in at-least-once
    # mode: same key, same bytes, a later offset.
    raw = _read_record(guard_process, first.partition, first.offset)
    p = Producer({"bootstrap.servers": guard_process.bootstrap})
    p.produce(guard_process.verdicts_topic, key=raw[0], value=raw[1], partition=first.partition)
    p.flush(10)
    # New verdicts still come after the restart, for both sessions.
    s2.user_message("go")
    for n in range(1, 4):
        loop_round(s2, n, deadline=WAIT if n == 3 else 0.0)
    deadline = time.monotonic() + WAIT
    while not delivered and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(delivered) == 1 and delivered[0].action is Action.BLOCK
    # The duplicate arrives, is read and is dropped.
    deadline = time.monotonic() + WAIT
    while guard.stats().verdicts_duplicate < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [v.verdict_id for v in s.verdicts] == [first.verdict_id]
    st = guard.stats()
    assert st.reader_restarts == 1 and st.verdicts_duplicate >= 1, st


def _read_record(g: GuardProcess, partition: int, offset: int):
    c = Consumer({"bootstrap.servers": g.bootstrap, "group.id": "unused", "enable.auto.commit": "false", "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(g.verdicts_topic, partition, offset)])
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                return m.key(), m.value()
        raise AssertionError("verdict record not found")
    finally:
        c.close()


def test_callbacks_that_raise_are_counted_not_raised(guard: Guard) -> None:
    errors = []

    def boom(_v) -> None:
        raise RuntimeError("runtime bug")

    g = Guard(guard.config, on_error=lambda where, e: errors.append(where))
    try:
        s = g.session(sid("boom"), on_verdict=boom)
        s.user_message("x")
        loop_round(s, 1)
        loop_round(s, 2)
        v = loop_round(s, 3, deadline=WAIT)
        assert v is not None and v.action is Action.BLOCK  # the waiting call still gets it
        deadline = time.monotonic() + WAIT  # the callback runs just after the waiter wakes
        while not errors and time.monotonic() < deadline:
            time.sleep(0.01)
        assert g.stats().callback_errors == 1
        assert errors == ["on_verdict callback"]
    finally:
        g.close()


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda g: g.session("x" * 257).user_message("hi"), "session_id"),
        (lambda g: g.session("ok").tool_call("", {}, deadline=0), "tool"),
        (lambda g: g.session("ok").tool_call("t" * 257, {}, deadline=0), "tool"),
        (lambda g: g.session("ok").tool_call("bash", {"x": object()}, deadline=0), "args"),
        (lambda g: g.session("ok").tool_call("bash", {}, call_id="c" * 300, deadline=0), "call_id"),
        (lambda g: g.session("ok").reasoning("r", turn_id="t" * 257), "turn_id"),
        (lambda g: g.session("ok").tool_result("bash", "fine", call_id="c1"), "status"),
        (lambda g: g.session("ok").tool_result("bash", call_id="c1", evidence=Evidence(resource="r" * 1025)), "evidence.resource"),
        (lambda g: g.session("ok").tool_result("bash", call_id="c1", evidence=Evidence(read_range=(5, 1))), "evidence.read_range"),
        (lambda g: g.session("ok").user_message("hi", limits=Limits(max_tool_rounds=0)), "limits.max_tool_rounds"),
        (lambda g: g.session("ok", tenant="t" * 300).user_message("hi"), "tenant"),
        (lambda g: g.session("ok").content("x" * 1_100_000), "text"),
        (lambda g: g.session("ok").turn_end(usage=Usage(input_tokens=-1)), "usage.input_tokens"),
        (lambda g: g.session("ok").assistant_message("a", usage=Usage(output_tokens=1.5)), "usage.output_tokens"),  # type: ignore[arg-type]
        (lambda g: g.session("ok").turn_end(usage=Usage(cost=float("inf"))), "usage.cost"),
    ],
)
def test_invalid_events_raise_naming_the_field(guard: Guard, call, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        call(guard)
    assert e.value.field == field
    assert guard.stats().events_sent == 0


def test_tool_result_without_an_open_call_names_call_id(guard: Guard) -> None:
    with pytest.raises(ValueError, match="call_id"):
        guard.session("ok").tool_result("bash")


def test_verdict_enforce_policy_version_and_loop_cost() -> None:
    wire = {"v": 1, "verdict_id": "0" * 32, "session_id": "s", "event_id": "e", "ts": "2026-01-01T00:00:00.000Z",
            "action": "warn", "rule": "progress.no_progress", "message": "m", "attempt": 1, "evidence": {}}
    old = Verdict.from_wire(wire)  # an older guard's verdict: enforced, no version
    assert old.enforce is True and old.policy_version is None and old.loop_cost is None
    v = Verdict.from_wire({**wire, "enforce": False, "policy_version": "sha256:1863c331cf07",
                           "loop_cost": {"tokens": 900, "cost": 0.2}})
    assert v.enforce is False and v.policy_version == "sha256:1863c331cf07"
    assert v.loop_cost == LoopCost(tokens=900, cost=0.2)
    with pytest.raises(ValueError, match="enforce"):
        Verdict.from_wire({**wire, "enforce": "no"})


def test_evidence_helpers() -> None:
    assert Evidence.read("a.txt", output={"b": 1, "a": 2}).to_wire() == Evidence.read("a.txt", output={"a": 2, "b": 1}).to_wire()
    m = Evidence.mutation("db.users", before="v1", after="v1").to_wire()
    assert m["effect"] == "mutation" and m["state_before"] == m["state_after"]
    assert Evidence(read_range=(0, 10), new_info=False).to_wire() == {"read_range": [0, 10], "new_info": False}


def test_latency_event_to_verdict(guard: Guard) -> None:
    """Publish-to-verdict time as the runtime sees it: the blocking third call's wait, split
    at the verdict's `emitted_at` (the guard's clock, same machine) into the part up to the
    guard writing it and the part after (commit, reader)."""
    total, before, after = [], [], []
    for i in range(int(os.environ.get("LOOPGUARD_LATENCY_SAMPLES", "60"))):
        s = guard.session(sid(f"lat{i}"))
        s.user_message("go")
        loop_round(s, 1)
        loop_round(s, 2)
        wall, started = time.time(), time.perf_counter()
        v = s.tool_call("bash", {"cmd": "cargo build --locked"}, deadline=WAIT)
        total.append(time.perf_counter() - started)
        assert v is not None and v.action is Action.BLOCK and v.emitted_at is not None
        emitted = datetime.datetime.fromisoformat(v.emitted_at.replace("Z", "+00:00")).timestamp()
        before.append(emitted - wall)
        after.append(v.received_at - emitted)
        s.session_end()

    def pct(xs: list, q: float) -> float:
        xs = sorted(xs)
        return round(xs[min(len(xs) - 1, int(len(xs) * q))] * 1000, 1)

    report = {
        "client": "python",
        "samples": len(total),
        "p50_ms": pct(total, 0.5),
        "p99_ms": pct(total, 0.99),
        "to_emitted_p50_ms": pct(before, 0.5),
        "to_emitted_p99_ms": pct(before, 0.99),
        "after_emitted_p50_ms": pct(after, 0.5),
        "after_emitted_p99_ms": pct(after, 0.99),
    }
    print(f"\nevent-to-verdict latency (python client): {report}")
    out = os.environ.get("LOOPGUARD_LATENCY_OUT")
    if out:
        pathlib.Path(out).write_text(json.dumps(report) + "\n")
