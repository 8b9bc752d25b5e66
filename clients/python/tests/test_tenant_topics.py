"""Topics per tenant on the real broker (KAFKA_BOOTSTRAP_SERVERS): a `Guard` given the
guard's templates (`events_topic="...events.{tenant}"`, `verdicts_topic="...verdicts.{tenant}"`)
and its tenant connects to its tenant's own topics and writes its events to its own events
topic, nothing to the shared one."""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Iterator, List

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from guardproc import PARTITIONS
from loopguard import Guard

WAIT = 30.0


@pytest.fixture()
def tenant_topics() -> Iterator[str]:
    """A private name `N` with topics `N-events.acme` and `N-verdicts.acme` (and the shared
    `N-events`, which must stay empty)."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    name = f"tenants-{uuid.uuid4().hex[:10]}"
    topics = [f"{name}-events.acme", f"{name}-verdicts.acme", f"{name}-events"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics], operation_timeout=30).values():
        f.result(timeout=30)
    try:
        yield name
    finally:
        for f in admin.delete_topics(topics, operation_timeout=30).values():
            try:
                f.result(timeout=30)
            except Exception:  # noqa: BLE001 - a test's topics, best effort
                pass


def records(bootstrap: str, topic: str) -> List[dict]:
    """Every event of `topic`, as JSON, with its key as `_key`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"peek-{uuid.uuid4().hex}", "enable.auto.commit": "false"})
    try:
        out: List[dict] = []
        for p in range(PARTITIONS):
            _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high == 0:
                continue
            c.assign([TopicPartition(topic, p, 0)])
            pos, until = 0, time.monotonic() + WAIT
            while pos < high and time.monotonic() < until:
                msg = c.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                pos = (msg.offset() or 0) + 1
                out.append({**json.loads(msg.value() or b"{}"), "_key": (msg.key() or b"").decode()})
        return out
    finally:
        c.close()


def test_a_guard_writes_its_events_to_its_tenants_own_topic(tenant_topics: str) -> None:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    name = tenant_topics
    g = Guard(
        bootstrap,
        tenant="acme",
        events_topic=f"{name}-events.{{tenant}}",
        verdicts_topic=f"{name}-verdicts.{{tenant}}",
    )
    try:
        assert g.events_topic == f"{name}-events.acme"
        assert g.verdicts_topic == f"{name}-verdicts.acme"
        g.ready(WAIT)
        s = g.session("s-tenant")
        s.user_message("hello")
        s.turn_end()
    finally:
        g.close()
    got = records(bootstrap, f"{name}-events.acme")
    assert [(e["_key"], e["type"], e.get("tenant")) for e in got] == [
        ("s-tenant", "user_message", "acme"),
        ("s-tenant", "turn_end", "acme"),
    ]
    assert records(bootstrap, f"{name}-events") == []
