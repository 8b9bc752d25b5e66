"""What the Kafka library says, kept out of the agent's stderr: librdkafka's own log lines
go to the `loopguard.kafka` logger at DEBUG, and an outage of the broker is said once per
change of state (`loopguard` logger: a WARNING when it goes, an INFO when it is back)."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

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
    """librdkafka's `logger`: every line at DEBUG on `loopguard.kafka`, never on stderr, and
    never with a secret of the configuration in it (librdkafka redacts its own; `scrub`
    removes them whatever a line holds)."""

    def __init__(self, scrub: Callable[[str], str] = str):
        self._scrub = scrub

    def log(self, level: int, fmt: str, *args: Any) -> None:
        if kafka_log.isEnabledFor(logging.DEBUG):
            kafka_log.debug("%s", self._scrub(fmt % args if args else fmt))


# librdkafka's errors that mean "the broker refused this client's credentials" (it retries
# them at every reconnect).
_LOGIN_REFUSED = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}


def login_refused(e: BaseException) -> bool:
    """True for an error that says the broker refused this client's SASL/TLS login."""
    err = e.args[0] if isinstance(e, KafkaException) and e.args else e
    return isinstance(err, KafkaError) and err.code() in _LOGIN_REFUSED


def unreachable(e: BaseException) -> bool:
    """True for an error that says only that the broker is away (retried by the library)."""
    err = e.args[0] if isinstance(e, KafkaException) and e.args else e
    return isinstance(err, KafkaError) and err.code() in _UNREACHABLE


class Reachability:
    """The broker's state as this process sees it; says each change once."""

    def __init__(self, bootstrap: str, scrub: Callable[[str], str] = str):
        self._bootstrap = bootstrap
        self._scrub = scrub
        self._lock = threading.Lock()
        self._down = False
        self._login_refused = False

    @property
    def down(self) -> bool:
        return self._down

    def lost(self, where: str, e: BaseException) -> bool:
        """The broker is away; True (and one WARNING) when it was not already known to be."""
        with self._lock:
            if self._down:
                return False
            self._down = True
            if self._login_refused:
                return False  # why was said already
        log.warning(
            "loopguard: Kafka at %s is unreachable (%s: %s); tool calls run unguarded until it is back",
            self._bootstrap,
            where,
            self._scrub(str(e)),
        )
        return True

    def refused_login(self, where: str, e: BaseException) -> bool:
        """The broker refused this client's credentials; True (and one WARNING) the first
        time until something reaches it."""
        with self._lock:
            if self._login_refused:
                return False
            self._login_refused = True
        log.warning(
            "loopguard: Kafka at %s refused this client's login (%s: %s); tool calls run unguarded "
            "(fail-open) until it accepts it: check the SASL/TLS settings (GuardConfig.kafka)",
            self._bootstrap,
            where,
            self._scrub(str(e)),
        )
        return True

    def back(self) -> None:
        """Something reached the broker; one INFO when it had been away."""
        self._login_refused = False
        if not self._down:
            return
        with self._lock:
            if not self._down:
                return
            self._down = False
        log.info("loopguard: Kafka at %s is reachable again", self._bootstrap)
