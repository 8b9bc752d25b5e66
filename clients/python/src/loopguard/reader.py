"""The verdict reader: one thread that alone owns the Kafka consumer.

Partitions are assigned directly (no consumer group): the producer's delivery reports say
which partitions this process's sessions land on and `want()` queues them; the reader
thread assigns them between two polls. No other thread ever calls the consumer, so no
client version can deadlock a delivery report against a poll in progress (the pattern of
calling `incremental_assign` from the delivery callback hangs with confluent-kafka 2.16).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Optional, Set

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Message, TopicPartition

# How long one poll may block: the longest a newly wanted partition waits to be assigned,
# and how quickly `close()` and `restart()` are served.
POLL_SECONDS = 0.05


class VerdictReader:
    """Reads the wanted partitions of the verdicts topic from this process's start offsets."""

    def __init__(
        self,
        consumer_config: Dict[str, Any],
        topic: str,
        start_offsets: Dict[int, int],
        on_record: Callable[[Message], None],
        on_error: Callable[[str, BaseException], None],
    ):
        self._config = consumer_config
        self._topic = topic
        # Where each partition ended when the process started: reading from there cannot
        # miss a verdict for any event this process publishes.
        self._start = dict(start_offsets)
        # Next offset to read per assigned partition: a restarted consumer goes on from here.
        self._position: Dict[int, int] = {}
        self._wanted: Set[int] = set()
        self._lock = threading.Lock()
        self._on_record = on_record
        self._on_error = on_error
        self._stop = threading.Event()
        self._restart = threading.Event()
        self.restarts = 0
        self._thread = threading.Thread(target=self._run, name="loopguard-verdict-reader", daemon=True)
        self._thread.start()

    def want(self, partition: int) -> None:
        """Asks for `partition` to be read (from any thread; cheap when already read)."""
        with self._lock:
            self._wanted.add(partition)

    def assigned(self) -> Set[int]:
        with self._lock:
            return set(self._position)

    def restart(self) -> None:
        """Closes the consumer and opens a new one that goes on where the old one stopped."""
        self._restart.set()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        consumer: Optional[Consumer] = None
        while not self._stop.is_set():
            try:
                if self._restart.is_set():
                    self._restart.clear()
                    if consumer is not None:
                        consumer.close()
                        consumer = None
                    self.restarts += 1
                if consumer is None:
                    consumer = Consumer(self._config)
                    # Learn the topic's leaders now, so the first partition assigned later
                    # starts fetching without a metadata round first.
                    consumer.list_topics(self._topic, timeout=5)
                    with self._lock:
                        parts = dict(self._position)
                    if parts:
                        consumer.assign([TopicPartition(self._topic, p, o) for p, o in parts.items()])
                self._assign_wanted(consumer)
                msg = consumer.poll(POLL_SECONDS)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        self._on_error("verdict reader", KafkaException(err))
                        if err.fatal():
                            self._restart.set()
                    continue
                partition, offset = msg.partition(), msg.offset()
                if partition is None or offset is None:
                    continue  # not a record (librdkafka only returns records here)
                with self._lock:
                    self._position[partition] = offset + 1
                self._on_record(msg)
            except Exception as e:  # never let the thread die: report, back off, start over
                self._on_error("verdict reader", e)
                try:
                    if consumer is not None:
                        consumer.close()
                except Exception:
                    pass
                consumer = None
                self.restarts += 1
                self._stop.wait(0.5)
        if consumer is not None:
            try:
                consumer.close()
            except Exception as e:
                self._on_error("verdict reader close", e)

    def _assign_wanted(self, consumer: Consumer) -> None:
        with self._lock:
            new = [p for p in self._wanted if p not in self._position]
            for p in new:
                self._position[p] = self._start.get(p, OFFSET_END)
            self._wanted.clear()
        if new:
            consumer.incremental_assign([TopicPartition(self._topic, p, self._position[p]) for p in new])
