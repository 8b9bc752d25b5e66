#!/usr/bin/env python3
"""Does a long-polling verdict reader cost latency? Measures, on a real broker:

1. wake-up: a transactional producer commits one record every 300 ms, rotating over the
   partitions of a topic, first alone, then on a topic a second producer loads with ~1,000
   records/s (1,000 records/s also flow the whole time on the broker); a reader with
   `fetch.wait.max.ms` = WAIT, at each isolation level, times each committed record from
   `commit_transaction` returning to the record in hand (p50 / p99 / max);
2. idle cost: a reader of a quiet topic, its fetch requests per second as librdkafka's
   statistics count them, for `fetch.wait.max.ms` 10 and WAIT.

    build/pyclient-2.16.1/bin/python scripts/longpoll_probe.py 127.0.0.1:19092 [--wait 500]

Needs confluent-kafka (the Python client's venv has it). Creates and deletes its own topics.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 4


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def reader(bootstrap: str, topic: str, isolation: str, wait_ms: int, stats: list[dict] | None = None) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": f"probe-{uuid.uuid4().hex}",
        "enable.auto.commit": "false",
        "isolation.level": isolation,
        "fetch.wait.max.ms": str(wait_ms),
        "fetch.error.backoff.ms": "10",
    }
    if stats is not None:
        conf["statistics.interval.ms"] = "1000"
        conf["stats_cb"] = lambda s: stats.append(json.loads(s))
    c = Consumer(conf)
    c.assign([TopicPartition(topic, p, -1) for p in range(PARTITIONS)])  # from the end
    return c


def wake_up(bootstrap: str, topic: str, isolation: str, wait_ms: int, rounds: int) -> list[float]:
    """Milliseconds from each commit's return to its record being read."""
    c = reader(bootstrap, topic, isolation, wait_ms)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3:  # assigned and fetching
        c.poll(0.1)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"probe-{uuid.uuid4().hex}", "linger.ms": "1"})
    txn.init_transactions(10)
    committed: dict[str, float] = {}
    seen: dict[str, float] = {}
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            m = c.poll(0.05)
            if m is not None and m.error() is None and m.key() and m.key().startswith(b"txn-"):
                seen[m.key().decode()] = time.monotonic()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    for i in range(rounds):
        key = f"txn-{i}"
        txn.begin_transaction()
        txn.produce(topic, key=key.encode(), value=b"x", partition=i % PARTITIONS)
        txn.commit_transaction(10)
        committed[key] = time.monotonic()
        time.sleep(0.3)
    time.sleep(1.0)
    stop.set()
    t.join()
    c.close()
    return [(seen[k] - committed[k]) * 1000 for k in committed if k in seen]


def idle_fetches_per_second(bootstrap: str, topic: str, wait_ms: int, seconds: float = 12.0) -> float:
    stats: list[dict] = []
    c = reader(bootstrap, topic, "read_committed", wait_ms, stats)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        c.poll(0.1)
    c.close()

    def fetches(s: dict) -> int:
        return sum(b.get("req", {}).get("Fetch", 0) for b in s.get("brokers", {}).values())

    first, last = stats[2], stats[-1]  # past the start-up
    return (fetches(last) - fetches(first)) / ((last["ts"] - first["ts"]) / 1e6)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("--wait", type=int, default=500, help="the long poll's fetch.wait.max.ms")
    ap.add_argument("--rounds", type=int, default=60)
    args = ap.parse_args()
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    busy, quiet = f"probe-busy-{uuid.uuid4().hex[:8]}", f"probe-quiet-{uuid.uuid4().hex[:8]}"
    for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (busy, quiet)]).values():
        f.result()
    time.sleep(2)
    stop = threading.Event()

    def load() -> None:  # ~1,000 records/s over every partition
        p = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": "1"})
        while not stop.is_set():
            for _ in range(10):
                p.produce(busy, key=b"load", value=b"y" * 200, partition=int(time.monotonic() * 1000) % PARTITIONS)
            p.poll(0)
            time.sleep(0.01)
        p.flush(5)

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        # The commits alone on a topic (nothing else wakes the fetch), then among the load.
        for topic, where in ((quiet, "quiet topic"), (busy, "loaded topic")):
            for isolation in ("read_committed", "read_uncommitted"):
                ms = wake_up(args.bootstrap, topic, isolation, args.wait, args.rounds)
                print(
                    f"wake-up {where:12} {isolation:16} fetch.wait.max.ms={args.wait}: {len(ms)}/{args.rounds} records, "
                    f"p50 {statistics.median(ms):.1f} ms, p99 {quantile(ms, 0.99):.1f} ms, max {max(ms):.1f} ms"
                )
    finally:
        stop.set()
        loader.join()
    for wait in (10, args.wait):
        print(f"idle reader fetch.wait.max.ms={wait}: {idle_fetches_per_second(args.bootstrap, quiet, wait):.1f} fetch requests/s")
    for f in admin.delete_topics([busy, quiet]).values():
        f.result()


if __name__ == "__main__":
    main()
