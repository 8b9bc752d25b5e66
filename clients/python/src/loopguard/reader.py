"""The verdict reader: one thread that alone owns the Kafka consumers it reads with.

Partitions are assigned directly (no consumer group): a session's partition is known when
the session is made (`partitioner.py`) and `want()` queues it; the reader thread assigns it
between two polls. No other thread ever calls a consumer it reads with, so no client
version can deadlock a delivery report against a poll in progress (the pattern of calling
`incremental_assign` from the delivery callback hangs with confluent-kafka 2.16).

A partition added to a consumer whose long poll is in flight would be read only when that
fetch returns (up to `fetch.wait.max.ms`, 500 ms): librdkafka sends one fetch at a time per
broker. So while some partitions are not read yet, a spare consumer waits ready (connected,
leaders known, nothing assigned): a new partition moves the reading to it, with every
position, and it fetches at once; the old consumer is closed. At most one swap per
partition in a process's life; a reader that reads every partition keeps no spare.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Optional, Set

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Message, TopicPartition

# How long one poll may block: the longest a newly wanted partition waits to be assigned,
# and how quickly `close()` and `restart()` are served.
POLL_SECONDS = 0.01


class VerdictReader:
    """Reads the wanted partitions of the verdicts topic from this process's start offsets."""

    def __init__(
        self,
        consumer_config: Dict[str, Any],
        topic: str,
        start_offsets: Dict[int, int],
        on_record: Callable[[Message], None],
        on_error: Callable[[str, BaseException], None],
        partitions: Optional[int] = None,
        consumer: Optional[Consumer] = None,
    ):
        """`consumer`: a first consumer made with `consumer_config` whose metadata is known
        (the one that read the start offsets); the reader thread owns it from here."""
        self._config = consumer_config
        self._topic = topic
        self._partitions = partitions if partitions is not None else len(start_offsets)
        # Where each partition ended when the process started: reading from there cannot
        # miss a verdict for any event this process publishes.
        self._start = dict(start_offsets)
        # Next offset to read per assigned partition: a new consumer goes on from here.
        self._position: Dict[int, int] = {}
        self._wanted: Set[int] = set()
        self._lock = threading.Lock()
        self._on_record = on_record
        self._on_error = on_error
        self._stop = threading.Event()
        self._restart = threading.Event()
        # The spare consumer, made by a helper thread; taken by the reader thread only.
        self._spare: Optional[Consumer] = None
        self._spare_making = False
        self.restarts = 0
        self.swaps = 0
        self._first = consumer
        self._thread = threading.Thread(target=self._run, name="loopguard-verdict-reader", daemon=True)
        self._thread.start()

    def want(self, partition: int) -> None:
        """Asks for `partition` to be read (from any thread; cheap when already read)."""
        with self._lock:
            if partition not in self._position:
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

    def _new_consumer(self) -> Consumer:
        consumer = Consumer(self._config)
        # Learn the topic's leaders now, so a partition assigned later starts fetching
        # without a metadata round first.
        consumer.list_topics(self._topic, timeout=5)
        return consumer

    def _run(self) -> None:
        consumer, self._first = self._first, None
        while not self._stop.is_set():
            try:
                if self._restart.is_set():
                    self._restart.clear()
                    if consumer is not None:
                        consumer.close()
                        consumer = None
                    self.restarts += 1
                if consumer is None:
                    consumer = self._new_consumer()
                    with self._lock:
                        parts = dict(self._position)
                    if parts:
                        consumer.assign([TopicPartition(self._topic, p, o) for p, o in parts.items()])
                consumer = self._assign_wanted(consumer)
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
                _close_quietly(consumer)
                consumer = None
                self.restarts += 1
                self._stop.wait(0.5)
        _close_quietly(consumer)
        with self._lock:
            spare, self._spare = self._spare, None
        _close_quietly(spare)

    def _assign_wanted(self, consumer: Consumer) -> Consumer:
        """Assigns the newly wanted partitions; returns the consumer to read with from now."""
        with self._lock:
            new = [p for p in self._wanted if p not in self._position]
            self._wanted.clear()
            had = dict(self._position)
            for p in new:
                self._position[p] = self._start.get(p, OFFSET_END)
            spare = self._spare if new and had else None
            if spare is not None:
                self._spare = None
            positions = dict(self._position)
            # A spare only once something is read: with nothing assigned no fetch is in
            # flight, so a Guard made before its first session makes none yet.
            incomplete = 0 < len(self._position) < self._partitions
        if new and spare is not None:
            # The spare has no fetch in flight: the new partition is fetched at once.
            spare.assign([TopicPartition(self._topic, p, o) for p, o in positions.items()])
            self.swaps += 1
            threading.Thread(target=_close_quietly, args=(consumer,), name="loopguard-reader-close", daemon=True).start()
            consumer = spare
        elif new:
            consumer.incremental_assign([TopicPartition(self._topic, p, positions[p]) for p in new])
        if incomplete:
            self._make_spare()
        return consumer

    def _make_spare(self) -> None:
        """Starts making a spare consumer unless one is there or being made."""
        with self._lock:
            if self._spare is not None or self._spare_making or self._stop.is_set():
                return
            self._spare_making = True

        def make() -> None:
            spare: Optional[Consumer] = None
            try:
                spare = self._new_consumer()
            except Exception as e:
                self._on_error("verdict reader spare", e)
            with self._lock:
                self._spare_making = False
                if spare is not None and not self._stop.is_set():
                    self._spare, spare = spare, None
            _close_quietly(spare)

        threading.Thread(target=make, name="loopguard-reader-spare", daemon=True).start()


def _close_quietly(consumer: Optional[Consumer]) -> None:
    if consumer is None:
        return
    try:
        consumer.close()
    except Exception:
        pass  # a consumer given up: nothing of it is needed any more

