"""A `Guard` made before the guard's topics are usable is made at once: tool calls are
answered fail-open at once (not at their deadline) and counted, what sessions publish is
kept and sent in order once the topics are there, the problem is said once through
`on_error`, and `ready()` raises `GuardError` naming it for callers that fail fast."""

from __future__ import annotations

import asyncio
import json
import pathlib
import socket
import time
import uuid
from typing import Iterator, List, Tuple

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from guardproc import PARTITIONS, GuardProcess, new_guard_process
from loopguard import Action, AsyncGuard, Guard, GuardError, partition_for

WAIT = 10.0


@pytest.fixture()
def unmade(tmp_path: pathlib.Path) -> Iterator[GuardProcess]:
    """A guard configured on private topics that do not exist yet."""
    g = new_guard_process(tmp_path, "pyconnect")
    g.delete_topics()
    until = time.monotonic() + 30
    admin = AdminClient({"bootstrap.servers": g.bootstrap})
    while g.events_topic in admin.list_topics(timeout=10).topics and time.monotonic() < until:
        time.sleep(0.2)
    try:
        yield g
    finally:
        g.stop()
        g.delete_topics()


def events_of(bootstrap: str, topic: str, session_id: str, partitions: int) -> List[Tuple[int, str]]:
    """(seq, type) of the session's events, in the order the topic holds them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"peek-{uuid.uuid4().hex}", "enable.auto.commit": "false"})
    try:
        p = partition_for(session_id, partitions)
        c.assign([TopicPartition(topic, p, 0)])
        _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        out, until = [], time.monotonic() + WAIT
        pos = 0
        while pos < high and time.monotonic() < until:
            msg = c.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            pos = (msg.offset() or 0) + 1
            if msg.key() == session_id.encode():
                body = json.loads(msg.value() or b"{}")
                out.append((body["seq"], body["type"]))
        return out
    finally:
        c.close()


def test_a_guard_made_before_its_topics_fails_open_at_once_and_sends_its_backlog_in_order(unmade: GuardProcess) -> None:
    errors: List[Tuple[str, BaseException]] = []
    started = time.monotonic()
    client = Guard(
        unmade.bootstrap,
        events_topic=unmade.events_topic,
        verdicts_topic=unmade.verdicts_topic,
        on_error=lambda where, e: errors.append((where, e)),
    )
    try:
        made = time.monotonic() - started
        # The broker answers at once that the topics are missing: no wait for connect_wait.
        assert made < 0.5, made
        assert not client.connected
        with pytest.raises(GuardError, match=f"topic `{unmade.events_topic}` does not exist"):
            client.ready(0.3)
        s = client.session(f"early-{uuid.uuid4().hex[:8]}")
        s.user_message("The build is broken, fix it.")
        for _ in range(2):
            called = time.monotonic()
            assert s.tool_call("bash", {"cmd": "cargo build --locked"}, deadline=WAIT) is None
            assert time.monotonic() - called < 0.05  # at once, not at its deadline
            s.tool_result("bash", "error", error="error: linker `cc` not found")
            s.turn_end()
        st = client.stats()
        assert st.tool_calls_not_connected == 2 and st.tool_call_deadlines == 0, st
        assert client.flush(0.0) == 7  # all of it kept in the client
        # Said once, by name, however many attempts it took.
        time.sleep(1.5)
        said = [(w, str(e)) for w, e in errors]
        assert len(said) == 1 and said[0][0] == "connect" and unmade.events_topic in said[0][1], said

        unmade.create_topics()
        unmade.start()
        client.ready(30)
        assert client.connected
        # The backlog reached the guard in order, so the third identical call is the loop's.
        v = s.tool_call("bash", {"cmd": "cargo build --locked"}, deadline=WAIT)
        assert v is not None and v.action is Action.BLOCK, client.stats()
        assert v.rule == "tool.exact_repeat" and v.evidence["count"] == 3
        seen = events_of(unmade.bootstrap, unmade.events_topic, s.session_id, PARTITIONS)
        assert [seq for seq, _ in seen] == list(range(1, 9)), seen
        assert [t for _, t in seen][:4] == ["user_message", "tool_call", "tool_result", "turn_end"], seen
        # From here on a call is answered as any other: by the guard, well within the deadline.
        h = client.session(f"later-{uuid.uuid4().hex[:8]}")
        h.user_message("Read the modules.")
        called = time.monotonic()
        assert h.tool_call("read_file", {"path": "src/a.py"}, deadline=WAIT) is None
        assert time.monotonic() - called < WAIT / 2
        st = client.stats()
        assert st.tool_calls_not_connected == 2 and st.tool_call_deadlines == 0 and st.events_failed == 0, st
        assert st.tool_calls_no_verdict >= 1, st
    finally:
        client.close()


def test_topics_with_different_partition_counts_are_reported_and_ready_names_them(tmp_path: pathlib.Path) -> None:
    g = new_guard_process(tmp_path, "pymismatch")
    admin = AdminClient({"bootstrap.servers": g.bootstrap})
    try:
        for f in admin.delete_topics([g.verdicts_topic], operation_timeout=30).values():
            f.result()
        until = time.monotonic() + 30
        while g.verdicts_topic in admin.list_topics(timeout=10).topics and time.monotonic() < until:
            time.sleep(0.2)
        for f in admin.create_topics([NewTopic(g.verdicts_topic, 3, 1)], operation_timeout=30).values():
            f.result()
        errors: List[str] = []

        async def main() -> None:
            started = time.monotonic()
            client = AsyncGuard(
                g.bootstrap,
                events_topic=g.events_topic,
                verdicts_topic=g.verdicts_topic,
                on_error=lambda where, e: errors.append(f"{where}: {e}"),
            )
            try:
                assert time.monotonic() - started < 0.5
                with pytest.raises(GuardError, match=f"has {PARTITIONS} partitions and .* 3"):
                    await client.ready(0.3)
                s = client.session(f"mismatch-{uuid.uuid4().hex[:8]}")
                called = time.monotonic()
                assert await s.tool_call("bash", {"cmd": "ls"}, deadline=WAIT) is None
                assert time.monotonic() - called < 0.05
                assert not client.connected
            finally:
                await client.close()

        asyncio.run(main())
        assert len(errors) == 1 and "same count" in errors[0], errors
    finally:
        g.delete_topics()


def test_the_backlog_is_bounded_and_its_overflow_said_once(unmade: GuardProcess) -> None:
    errors: List[str] = []
    client = Guard(
        unmade.bootstrap,
        events_topic=unmade.events_topic,
        verdicts_topic=unmade.verdicts_topic,
        backlog_capacity=5,
        on_error=lambda where, e: errors.append(where),
    )
    try:
        s = client.session(f"overflow-{uuid.uuid4().hex[:8]}")
        for i in range(8):
            s.content(f"chunk {i}")
        st = client.stats()
        assert st.events_overflowed == 3, st
        assert errors.count("backlog") == 1, errors
        assert client.flush(0.0) == 5
    finally:
        started = time.monotonic()
        client.close()
        assert time.monotonic() - started < 1.0
    assert client.stats().events_failed == 5  # what was never sent, counted at close


def test_a_broker_that_takes_connections_and_never_answers_costs_the_constructor_connect_wait() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes connections; nothing ever answers on them
    port = silent.getsockname()[1]
    errors: List[Tuple[float, str]] = []
    started = time.monotonic()
    client = Guard(
        f"127.0.0.1:{port}",
        connect_wait=0.3,
        startup_timeout=1.0,
        on_error=lambda where, e: errors.append((time.monotonic() - started, f"{where}: {e}")),
    )
    try:
        made = time.monotonic() - started
        assert 0.28 <= made < 0.8, made
        s = client.session(f"silent-{uuid.uuid4().hex[:8]}")
        called = time.monotonic()
        assert s.tool_call("bash", {"cmd": "ls"}, deadline=WAIT) is None
        assert time.monotonic() - called < 0.05
        # Said once the silence outlasts startup_timeout, naming the address.
        until = time.monotonic() + 5
        while not errors and time.monotonic() < until:
            time.sleep(0.1)
        assert errors and errors[0][1].startswith(f"connect: cannot reach Kafka at 127.0.0.1:{port}"), errors
        time.sleep(1.5)
        assert len(errors) == 1, errors
        with pytest.raises(GuardError, match=f"cannot reach Kafka at 127.0.0.1:{port}"):
            client.ready(0.1)
    finally:
        closing = time.monotonic()
        client.close()
        assert time.monotonic() - closing < 1.0
        silent.close()
