"""What the Kafka library says, kept out of the agent's stderr: librdkafka's own log lines
go to the `loopguard.kafka` logger at DEBUG, and an outage of the broker is said once per
change of state (`loopguard` logger: a WARNING when it goes, an INFO when it is back)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException

log = logging.getLogger("loopguard")
kafka_log = logging.getLogger("loopguard.kafka")

# librdkafka's errors that mean "the broker cannot be reached now"; it retries them itself.
_UNREACHABLE = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
    KafkaError._TIMED_OUT,
    KafkaError._MSG_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.REQUEST_TIMED_OUT,
}


class LibraryLog:
    """librdkafka's `logger`: every line at DEBUG on `loopguard.kafka`, never on stderr."""

    def log(self, level: int, fmt: str, *args: Any) -> None:
        kafka_log.debug(fmt, *args)


def unreachable(e: BaseException) -> bool:
    """True for an error that says only that the broker is away (retried by the library)."""
    err = e.args[0] if isinstance(e, KafkaException) and e.args else e
    return isinstance(err, KafkaError) and err.code() in _UNREACHABLE


class Reachability:
    """The broker's state as this process sees it; says each change once."""

    def __init__(self, bootstrap: str):
        self._bootstrap = bootstrap
        self._lock = threading.Lock()
        self._down = False

    @property
    def down(self) -> bool:
        return self._down

    def lost(self, where: str, e: BaseException) -> bool:
        """The broker is away; True (and one WARNING) when it was not already known to be."""
        with self._lock:
            if self._down:
                return False
            self._down = True
        log.warning(
            "loopguard: Kafka at %s is unreachable (%s: %s); tool calls run unguarded until it is back",
            self._bootstrap,
            where,
            e,
        )
        return True

    def back(self) -> None:
        """Something reached the broker; one INFO when it had been away."""
        if not self._down:
            return
        with self._lock:
            if not self._down:
                return
            self._down = False
        log.info("loopguard: Kafka at %s is reachable again", self._bootstrap)
