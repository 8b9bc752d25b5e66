"""Connecting in the background: a thread makes the verdict reader's first consumer, learns
the guard's topics (both exist, with one partition count) and where each verdict partition
ends, and hands all of it to the `Guard`. It tries again until it can, whatever the broker's
state when the process started; it never raises into the agent. Until it is done the `Guard`
answers tool calls fail-open at once and keeps what sessions publish (client.py).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, Optional, Tuple

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

# The longest one metadata request waits: how often an unreachable broker is asked again
# (librdkafka reconnects by itself in between, with its own backoff).
ATTEMPT_SECONDS = 1.0
# A broker that answers with the wrong topics is asked again after this, doubling up to
# MISCONFIGURED_MAX_SECONDS: the topics may be created after the agent started.
MISCONFIGURED_SECONDS = 0.5
MISCONFIGURED_MAX_SECONDS = 5.0


class GuardError(Exception):
    """The guard's topics cannot be reached or are not as the contract needs them: raised by
    `Guard.ready()`, and handed to `on_error` (where "connect") while the `Guard` connects."""


class Misconfigured(GuardError):
    """The broker answered, and its topics are missing or their partition counts differ, or
    (`Refused`) this client may not use them."""


class Refused(Misconfigured):
    """The broker refused this client's principal `operation` (Read or Write) on `topic`
    (TOPIC_AUTHORIZATION_FAILED)."""

    def __init__(self, bootstrap: str, topic: str, role: str, operation: str, describe: bool = False):
        """`role`: "events" or "verdicts"; `describe`: refused already when the topic's
        metadata was asked for (Describe, which Read and Write include)."""
        detail = (
            f"TOPIC_AUTHORIZATION_FAILED on Describe, which {operation} includes; or the topic does not "
            "exist: Kafka does not tell a principal without Describe which"
            if describe
            else "TOPIC_AUTHORIZATION_FAILED"
        )
        super().__init__(
            f"Kafka at {bootstrap} refused this client {operation} on the {role} topic `{topic}` ({detail}); "
            f"tool calls run unguarded (fail-open) until its principal is granted {operation} on `{topic}`"
        )
        self.topic = topic
        self.operation = operation


Connected = Callable[[Consumer, Dict[int, int], int], None]
Problem = Callable[[GuardError, bool], None]


class Connection:
    """Connects once, in its own thread; `connected` is set when the `Guard` has what it
    needs, `settled` as soon as the first attempt has any outcome."""

    def __init__(
        self,
        consumer: Consumer,
        producer: Producer,
        bootstrap: str,
        events_topic: str,
        verdicts_topic: str,
        on_connected: Connected,
        on_problem: Problem,
        report_after: float,
        settled: threading.Event,
    ):
        """`consumer`: the reader's first consumer (made by the caller, so a wrong setting
        raises there); this thread owns it until it hands it on. `settled`: set here too by
        the first attempt's outcome (the caller sets it on a refused connection, which its
        producer hears first). `report_after`: how long the broker may stay silent before that is reported as an
        outage (a refused connection is reported at once, through librdkafka's error_cb)."""
        self._consumer: Optional[Consumer] = consumer
        self._producer = producer
        self._bootstrap = bootstrap
        self._events = events_topic
        self._verdicts = verdicts_topic
        self._on_connected = on_connected
        self._on_problem = on_problem
        self._report_after = report_after
        self.connected = threading.Event()
        self.settled = settled
        # Why it is not connected yet (None: no answer so far).
        self.problem: Optional[GuardError] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loopguard-connect", daemon=True)
        self._thread.start()

    def close(self, timeout: float) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        consumer, self._consumer = self._consumer, None
        said = ""
        pause = MISCONFIGURED_SECONDS
        began = time.monotonic()
        while consumer is not None and not self._stop.is_set():
            tried = time.monotonic()
            try:
                start, partitions = start_offsets(consumer, self._bootstrap, self._events, self._verdicts)
                # The events topic's leaders, learned now rather than by the first event.
                self._producer.list_topics(self._events, timeout=ATTEMPT_SECONDS)
                # Its callbacks (librdkafka's errors while it could not connect) are served
                # now, before the Guard says the broker is reached, not by the reader's first
                # poll after it.
                _serve(consumer)
            except Misconfigured as e:
                self.problem = e
                if str(e) != said:  # said once, not per attempt
                    said = str(e)
                    self._on_problem(e, False)
                self.settled.set()
                self._stop.wait(pause)
                pause = min(pause * 2, MISCONFIGURED_MAX_SECONDS)
                continue
            except Exception as e:  # no answer in time: ask again at once
                _serve(consumer)
                err = GuardError(f"cannot reach Kafka at {self._bootstrap} (bootstrap_servers): {e}")
                self.problem = err
                if time.monotonic() - began >= self._report_after:
                    self._on_problem(err, True)  # an outage: said once until the broker is back
                # An answer that came at once (not a wait run out) is not asked again at once.
                self._stop.wait(max(0.0, 0.1 - (time.monotonic() - tried)))
                continue
            if self._stop.is_set():
                break
            self._on_connected(consumer, start, partitions)  # the reader owns it from here
            consumer = None
            self.problem = None
            self.connected.set()
            self.settled.set()
            return
        if consumer is not None:
            try:
                consumer.close()
            except Exception:
                pass  # given up at close: nothing of it is needed


def start_offsets(probe: Consumer, bootstrap: str, events_topic: str, verdicts_topic: str) -> Tuple[Dict[int, int], int]:
    """Where each verdict partition ends now, and the events topic's partition count;
    checks that both topics exist with the same number of partitions."""
    md = probe.list_topics(timeout=ATTEMPT_SECONDS)
    for topic, role, operation in ((events_topic, "events", "Write"), (verdicts_topic, "verdicts", "Read")):
        t = md.topics.get(topic)
        if t is None:
            # Not listed: a broker with ACLs lists only the topics the principal may
            # Describe. Asked by name, it says which.
            t = probe.list_topics(topic, timeout=ATTEMPT_SECONDS).topics.get(topic)
            if t is not None and t.error is not None and t.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise Refused(bootstrap, topic, role, operation, describe=True)
        if t is None or t.error is not None or not t.partitions:
            raise Misconfigured(
                f"topic `{topic}` does not exist on {bootstrap}: "
                "create the guard's topics with `loopguard topics create --partitions N`"
            )
    partitions = len(md.topics[events_topic].partitions)
    if len(md.topics[verdicts_topic].partitions) != partitions:
        raise Misconfigured(
            f"`{events_topic}` has {partitions} partitions and `{verdicts_topic}` "
            f"{len(md.topics[verdicts_topic].partitions)}: a verdict goes to its event's partition "
            "number, so both need the same count (docs/contract.md)"
        )
    start = {}
    for p in md.topics[verdicts_topic].partitions:
        _, high = probe.get_watermark_offsets(TopicPartition(verdicts_topic, p), timeout=ATTEMPT_SECONDS)
        start[p] = high
    return start, partitions


def _serve(consumer: Consumer) -> None:
    """Serves the consumer's queued callbacks (nothing is assigned: no record comes)."""
    try:
        consumer.poll(0)
    except Exception:
        pass  # its errors reach the Guard through error_cb; nothing else to do here
