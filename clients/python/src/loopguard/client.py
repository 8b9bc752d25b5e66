"""`Guard` (one per process) and `Session` (one per agent conversation), synchronous flavour.

A `Guard` owns one producer, a thread serving its delivery reports, and a `VerdictReader`.
Sessions publish through it; verdicts come back to the session they belong to, once each
(de-duplicated on `verdict_id`). Nothing a background thread does raises into the agent:
problems go to `on_error` and the counters of `Guard.stats()`.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from .connecting import Connection, GuardError, Refused
from .kafka_log import LibraryLog, Reachability, login_refused, unreachable
from .partitioner import partition_for
from .reader import VerdictReader
from .settings import Scrubber, check_session_tenant, events_topic_for, redacted, verdicts_topic_for
from .types import Evidence, Limits, Stats, Usage, Verdict
from .validate import MAX_NOTE_CHARS, check_event

log = logging.getLogger("loopguard")

ErrorCallback = Callable[[str, BaseException], None]
VerdictCallback = Callable[[Verdict], None]


@dataclass(frozen=True)
class GuardConfig:
    bootstrap_servers: str
    # May name a topic per tenant, `agent-events.{tenant}` (the guard's
    # `kafka.events_topic_template`): `{tenant}` is replaced by `tenant`, which is then
    # required, and every session's tenant must be it (settings.py).
    events_topic: str = "agent-events"
    # May name a topic per tenant, `agent-verdicts.{tenant}` (the guard's
    # `kafka.verdicts_topic_template`): `{tenant}` is replaced by `tenant`, which is then
    # required, and every session's tenant must be it (settings.py).
    verdicts_topic: str = "agent-verdicts"
    # Copied onto every event: they select policy overrides and label the guard's metrics.
    tenant: Optional[str] = None
    agent: Optional[str] = None
    model: Optional[str] = None
    # The longest `tool_call` waits for the guard's answer (a verdict, or a judged-through
    # marker saying there is none) before letting the call run (seconds): it only matters
    # when the guard is down or far behind.
    tool_call_deadline: float = 1.0
    # False: only verdicts of committed transactions (the guard's exactly-once mode), seen
    # when the guard's batch commits (~100 ms). True: the low-latency path, verdicts as soon
    # as the guard writes them, each still delivered once (de-duplicated on verdict_id).
    read_uncommitted: bool = False
    # Extra librdkafka properties for every producer and consumer the Guard makes (SASL, TLS,
    # client.id, ...), e.g. {"security.protocol": "SASL_SSL", "sasl.mechanisms":
    # "SCRAM-SHA-512", "sasl.username": ..., "sasl.password": ..., "ssl.ca.location": ...}.
    # Secret values (keys with "password", "secret", "sasl.oauthbearer", ...) are never
    # logged nor put in an error's text; `repr()` shows them as [redacted].
    kafka: Mapping[str, str] = field(default_factory=dict)
    # Called with (where, exception) for every background problem, a broker outage once
    # per outage (not per connection retry); also logged and counted.
    on_error: Optional[ErrorCallback] = None
    # Verdict ids remembered for de-duplication.
    dedupe_capacity: int = 100_000
    # How long `ready()` waits by default, and how long a broker may stay silent while the
    # Guard connects before that is reported (a refused connection is reported at once).
    startup_timeout: float = 10.0
    # The longest the constructor waits for Kafka's first answer (connected, refused, or the
    # topics wrong); the connection goes on in the background after it (seconds).
    connect_wait: float = 1.0
    # Events kept while the Guard is not connected yet, sent in order once it is; what comes
    # beyond is dropped, counted (`events_overflowed`) and reported once.
    backlog_capacity: int = 10_000

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        shown["kafka"] = redacted(self.kafka)
        return "GuardConfig(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


class _Waiter:
    """One pending `tool_call`: settled once, by the first verdict on its event, or with
    None by the first judged-through marker past its event's offset."""

    __slots__ = ("resolve", "event_id", "partition", "offset", "settled")

    def __init__(self, resolve: Callable[[Optional[Verdict]], None]):
        self.resolve = resolve
        self.event_id: Optional[str] = None
        # Where the event landed (its delivery report), once known.
        self.partition: Optional[int] = None
        self.offset: Optional[int] = None
        self.settled = False

    def settle(self, verdict: Optional[Verdict]) -> None:
        """Called under the guard's lock only to mark; `resolve` runs outside it."""
        self.resolve(verdict)


# The header and value kind of a judged-through marker (docs/contract.md).
MARKER_HEADER = "loopguard-kind"
MARKER_KIND = b"judged"


class Guard:
    """The process-wide link to loopguard. Thread-safe; use one per process."""

    def __init__(self, config: GuardConfig | str, **overrides: Any):
        cfg = GuardConfig(bootstrap_servers=config, **overrides) if isinstance(config, str) else replace(config, **overrides)
        self.config = cfg
        # The topic this Guard reads its verdicts from (`verdicts_topic` with its tenant);
        # raises ConfigError before anything is made.
        self.verdicts_topic = verdicts_topic_for(cfg.verdicts_topic, cfg.tenant)
        # The topic this Guard writes its events to (`events_topic` with its tenant).
        self.events_topic = events_topic_for(cfg.events_topic, cfg.tenant)
        # Every line and error text this client says goes through it (settings.py).
        self._scrub = Scrubber([cfg.kafka])
        self._lock = threading.Lock()
        self._counts: Dict[str, int] = collections.Counter()
        self._sessions: Dict[str, "SessionCore"] = {}
        self._waiters: Dict[str, List[_Waiter]] = {}
        # Judged-through markers: the highest `through_offset` seen per partition, and the
        # delivered tool calls still waiting, per partition by offset.
        self._judged: Dict[int, int] = {}
        self._awaiting: Dict[int, Dict[int, _Waiter]] = collections.defaultdict(dict)
        self._seen: "collections.OrderedDict[str, None]" = collections.OrderedDict()
        self._reach = Reachability(cfg.bootstrap_servers, self._scrub)
        # Operations the broker refused this client after it connected ("read" on the verdicts
        # topic, "write" on the events topic): each said once; tool calls run unguarded
        # (fail-open at once) until the operation succeeds again.
        self._refused: Dict[str, Refused] = {}
        # librdkafka's own log lines (connection losses, retries) go to the "loopguard.kafka"
        # logger at DEBUG, never to the process's stderr; its errors come to `_kafka_error`,
        # and an outage is said once (kafka_log.py).
        base: Dict[str, Any] = {
            "bootstrap.servers": cfg.bootstrap_servers,
            "logger": LibraryLog(self._scrub),
            "error_cb": self._kafka_error,
            # librdkafka (2.16) drops its bootstrap connection once it knows the brokers and
            # redoes a metadata request in flight after half this backoff: at the default
            # 100 ms, every fresh client's first request took 55-60 ms. Reconnects after an
            # outage still back off exponentially, up to reconnect.backoff.max.ms (10 s).
            "reconnect.backoff.ms": "10",
            **dict(cfg.kafka),
        }
        reader_config: Dict[str, Any] = {
            **base,
            # Required by the client library for offset storage; nothing is ever
            # committed and no group is joined (partitions are assigned directly).
            "group.id": f"loopguard-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "isolation.level": "read_uncommitted" if cfg.read_uncommitted else "read_committed",
            # A long poll: the broker answers a fetch as soon as a record (or, for
            # read_committed, the commit that makes one visible) arrives, else after this
            # wait; an idle reader costs the broker 2 requests/s instead of ~100
            # (docs/benchmarks.md, "Judged-through markers").
            "fetch.wait.max.ms": "500",
            # librdkafka waits this long (500 ms by default) before fetching a partition
            # again after a fetch error; a verdict must not wait for that.
            "fetch.error.backoff.ms": "10",
            **dict(cfg.kafka),
        }
        self._reader_config = reader_config
        # Until connected: the events topic's partition count is unknown (0), what sessions
        # publish waits here in order, and tool calls are answered fail-open at once.
        self._partitions = 0
        self._reader: Optional[VerdictReader] = None
        self._live = False
        self._backlog: Deque[Tuple["SessionCore", bytes]] = collections.deque()
        self._overflow_said = False
        self._producer = Producer(
            {
                **base,
                # Not idempotent: an idempotent producer asks for its producer id on a 500 ms
                # timer, so a fresh process's first event waited 100-500 ms for it. One
                # request in flight keeps each session's events in order across retries; a
                # retry that doubles an event is dropped by the guard (it de-duplicates on
                # `event_id`). docs/decisions.md, "A fresh process's first call".
                "acks": "all",
                "max.in.flight.requests.per.connection": "1",
                "linger.ms": "1",
                **dict(cfg.kafka),  # the caller's settings win
            }
        )
        # The reader's first consumer: made here, so a wrong setting raises here, before any
        # thread is started.
        first = Consumer(reader_config)
        self._stop = threading.Event()
        self._closing = False
        # Set by the first answer from Kafka: connected, refused, or the topics wrong.
        self._settled = threading.Event()
        # The last sign of an outage before the first connection, for `ready()` to name.
        self._away: Optional[BaseException] = None
        # Serves the producer's callbacks from now on: a refused connection is heard through
        # its error_cb within milliseconds.
        self._poller = threading.Thread(target=self._serve_deliveries, name="loopguard-deliveries", daemon=True)
        self._poller.start()
        # The reader's first consumer learns the topics and where each verdict partition
        # ends, then reads.
        self._connection = Connection(
            first,
            self._producer,
            cfg.bootstrap_servers,
            self.events_topic,
            self.verdicts_topic,
            self._connected,
            self._connect_problem,
            report_after=cfg.startup_timeout,
            settled=self._settled,
        )
        # On a reachable broker the Guard is ready when made (its first call is answered as
        # fast as any other); an absent one is known within milliseconds; a silent one
        # costs at most `connect_wait`.
        self._settled.wait(cfg.connect_wait)

    # ---- public -------------------------------------------------------------------------

    def session(
        self,
        session_id: Optional[str] = None,
        *,
        on_verdict: Optional[VerdictCallback] = None,
        tenant: Optional[str] = None,
        agent: Optional[str] = None,
        model: Optional[str] = None,
        on_observed: Optional[VerdictCallback] = None,
    ) -> "Session":
        """A handle for one agent conversation (a new random id when none is given).
        `on_observed` receives the verdicts of rules in observe mode, which are never acted on."""
        core = self._core(session_id, tenant, agent, model)
        if on_observed is not None:
            core.observe(on_observed)
        return Session(core, on_verdict)

    @property
    def connected(self) -> bool:
        """True once the Guard knows its topics and reads verdicts (it then stays so; an
        outage after it is ridden out as before). Until then tool calls are answered
        fail-open at once and events wait in the backlog."""
        return self._connection.connected.is_set()

    def ready(self, timeout: Optional[float] = None) -> None:
        """Waits until the Guard is connected, at most `timeout` seconds (default
        `startup_timeout`); raises `GuardError` saying why not (the broker unreachable, a
        topic missing, partition counts that differ). For callers that would rather fail
        fast than run unguarded; the Guard goes on connecting either way."""
        wait = self.config.startup_timeout if timeout is None else timeout
        if self._connection.connected.wait(wait):
            return
        problem: Optional[BaseException] = self._connection.problem
        if problem is None and self._away is not None:
            problem = GuardError(f"cannot reach Kafka at {self.config.bootstrap_servers} (bootstrap_servers): {self._away}")
        raise GuardError(
            self._scrub(str(problem))
            if problem is not None
            else f"no answer from Kafka at {self.config.bootstrap_servers} within {wait:g} s"
        )

    def stats(self) -> Stats:
        with self._lock:
            counts = dict(self._counts)
        counts["reader_restarts"] = self._reader.restarts if self._reader is not None else 0
        return Stats(**counts)

    def verdict_partitions(self) -> List[int]:
        """The partitions of the verdicts topic the reader reads now."""
        return sorted(self._reader.assigned()) if self._reader is not None else []

    def restart_reader(self) -> None:
        """Reopens the verdict reader (it goes on where it stopped; nothing is delivered twice)."""
        if self._reader is not None:
            self._reader.restart()

    def flush(self, timeout: float = 5.0) -> int:
        """Waits until published events are acknowledged (those kept while not connected
        included); returns how many are still queued."""
        until = time.monotonic() + timeout
        self._connection.connected.wait(timeout)
        left = self._producer.flush(max(0.0, until - time.monotonic()))
        with self._lock:
            return left + len(self._backlog)

    def close(self, timeout: float = 5.0) -> None:
        """Flushes events (up to `timeout`; at once while the broker is known to be away or
        was never reached: what is unsent then is dropped and counted), stops the reader;
        pending `tool_call`s return None."""
        if self._stop.is_set():
            return
        self._connection.close(min(timeout, 0.2))
        with self._lock:
            # A connection made after this point starts no reader (`_connected`).
            self._closing = True
            held = len(self._backlog)
            self._backlog.clear()
        if held:
            self._count("events_failed", held)
        try:
            left = self._producer.flush(0.0 if self._reach.down or not self.connected else timeout)
            if left:
                self._count("events_failed", left)
        except Exception as e:
            self._report("close", e)
        self._stop.set()
        self._poller.join(timeout)
        if self._reader is not None:
            self._reader.close(timeout)

    def __enter__(self) -> "Guard":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- used by sessions ----------------------------------------------------------------

    def _core(self, session_id: Optional[str], tenant: Optional[str], agent: Optional[str], model: Optional[str]) -> "SessionCore":
        check_session_tenant(self.config.verdicts_topic, self.config.tenant, tenant, self.config.events_topic)
        sid = session_id if session_id is not None else uuid.uuid4().hex
        core = SessionCore(
            self,
            sid,
            tenant if tenant is not None else self.config.tenant,
            agent if agent is not None else self.config.agent,
            model if model is not None else self.config.model,
        )
        with self._lock:
            self._sessions[sid] = core
            # Not connected yet: `_connected` gives it its partition.
            if self._partitions:
                core.partition = partition_for(sid, self._partitions)
        # Read from now on: the session's first tool call finds its partition read already.
        if core.partition is not None and self._reader is not None:
            self._reader.want(core.partition)
        return core

    def _publish(self, event: Dict[str, Any], core: "SessionCore", waiter: Optional[_Waiter] = None) -> bool:
        """Validates (raising `ValidationError`) and queues one event on its session's
        partition; before the Guard is connected, keeps it in the backlog. False when the
        call is not to wait: not connected yet (counted), or Kafka refused the event at once
        (reported, counted); the agent goes on unguarded rather than failing."""
        payload = check_event(event)
        overflow = False
        with self._lock:
            live, partition = self._live, core.partition
            if not live:
                if waiter is not None:
                    self._counts["tool_calls_not_connected"] += 1
                if len(self._backlog) < self.config.backlog_capacity:
                    self._backlog.append((core, payload))
                else:
                    self._counts["events_overflowed"] += 1
                    overflow, self._overflow_said = not self._overflow_said, True
        if not live:
            if overflow:  # said once
                self._report(
                    "backlog",
                    BufferError(
                        f"{self.config.backlog_capacity} events wait for Kafka at {self.config.bootstrap_servers} "
                        "(backlog_capacity): later ones are dropped until it is reached (events_overflowed)"
                    ),
                )
            return False
        assert partition is not None  # set for every session before `_live`
        unguarded = False
        if waiter is not None and self._refused:
            # Refused Read or Write: no answer can come. The event is still sent (the guard
            # sees the session's history, and a delivery tells when Write is allowed again).
            waiter, unguarded = None, True
            self._count("tool_calls_refused")
        sid, eid = event["session_id"], event["event_id"]
        on_delivery: Callable[[Any, Message], None] = self._delivered
        if waiter is not None:
            waiter.event_id = eid
            with self._lock:
                self._waiters.setdefault(eid, []).append(waiter)
            on_delivery = lambda err, msg: self._delivered(err, msg, waiter)  # noqa: E731
        try:
            self._producer.produce(
                self.events_topic, key=sid.encode(), value=payload, partition=partition, on_delivery=on_delivery
            )
            return not unguarded
        except (BufferError, KafkaException) as e:
            self._count("events_failed")
            self._report("publish", e)
            if waiter is not None:
                self._drop_waiter(eid, waiter)
            return False

    def _drop_waiter(self, event_id: str, waiter: _Waiter) -> None:
        with self._lock:
            self._unwait(event_id, waiter)

    def _unwait(self, event_id: str, waiter: _Waiter) -> None:
        """Forgets `waiter` everywhere (under the lock)."""
        ws = self._waiters.get(event_id)
        if ws and waiter in ws:
            ws.remove(waiter)
            if not ws:
                del self._waiters[event_id]
        if waiter.partition is not None and waiter.offset is not None:
            waiting = self._awaiting.get(waiter.partition)
            if waiting is not None and waiting.get(waiter.offset) is waiter:
                del waiting[waiter.offset]

    def _claim(self, waiter: _Waiter) -> bool:
        """True for the first caller (under the lock): that one settles the waiter."""
        if waiter.settled:
            return False
        waiter.settled = True
        if waiter.event_id is not None:
            self._unwait(waiter.event_id, waiter)
        return True

    def _expire(self, waiter: _Waiter) -> bool:
        """The deadline passed: True when nothing settled the waiter first (fail-open,
        counted); False when a verdict or marker just did."""
        with self._lock:
            if not self._claim(waiter):
                return False
            self._counts["tool_call_deadlines"] += 1
        return True

    def _forget(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    # ---- background ------------------------------------------------------------------------

    def _connected(self, first: Consumer, start: Dict[int, int], partitions: int) -> None:
        """The connection thread learned the topics: the reader starts with its consumer,
        every session gets its partition, and the backlog goes out in order before any
        event published from now on."""
        self._reach.back()
        reader = VerdictReader(
            self._reader_config,
            self.verdicts_topic,
            start,
            self._on_record,
            self._report,
            partitions=len(start),
            consumer=first,
        )
        failed: List[BaseException] = []
        with self._lock:
            # Under the lock throughout: an event published meanwhile waits, then goes after
            # these (`produce` only queues; `want` takes only the reader's own lock).
            closing = self._closing
            if not closing:
                self._reader = reader
                self._partitions = partitions
                for core in self._sessions.values():
                    if core.partition is None:
                        core.partition = partition_for(core.session_id, partitions)
                    reader.want(core.partition)
                for core, payload in self._backlog:
                    try:
                        self._producer.produce(
                            self.events_topic,
                            key=core.session_id.encode(),
                            value=payload,
                            partition=partition_for(core.session_id, partitions),
                            on_delivery=self._delivered,
                        )
                    except (BufferError, KafkaException) as e:
                        self._counts["events_failed"] += 1
                        failed.append(e)
                self._backlog.clear()
                self._live = True
        if closing:  # closed while connecting: the backlog was counted by close()
            reader.close(1.0)
            return
        if failed:
            self._report("publish", failed[0])

    def _connect_problem(self, e: GuardError, outage: bool) -> None:
        """The connection thread could not connect yet: an outage (said once until the broker
        is back) or topics that are not as the contract needs them (said once each; the
        broker answered, so it is reachable)."""
        if not outage:
            self._reach.back()
        self._report("connect", e, outage=outage)

    def _serve_deliveries(self) -> None:
        while not self._stop.is_set():
            try:
                # Short, so `close()` is not held up (a process that guards one call, a hook,
                # pays it at exit): 50 idle wake-ups a second.
                self._producer.poll(0.02)
            except Exception as e:
                self._report("delivery reports", e)
                self._stop.wait(0.1)

    def _delivered(self, err: Any, msg: Message, waiter: Optional[_Waiter] = None) -> None:
        # Runs on the deliveries thread. It only records the partition: the reader thread
        # assigns it (never call the consumer from here).
        if err is not None:
            self._count("events_failed")
            self._report("delivery", KafkaException(err))
            # The event is not in the topic: nothing will answer it; run the tool now.
            if waiter is not None:
                with self._lock:
                    claimed = self._claim(waiter)
                if claimed:
                    waiter.settle(None)
            return
        self._count("events_sent")
        self._reach.back()
        self._allowed("write")
        partition = msg.partition()
        if partition is not None and self._reader is not None:
            self._reader.want(partition)
        offset = msg.offset()
        if waiter is None or partition is None or offset is None or offset < 0:
            return
        with self._lock:
            if waiter.settled:
                return
            waiter.partition, waiter.offset = partition, offset
            # A marker already past the event (read before this report came): no verdict.
            judged_now = self._judged.get(partition, -1) > offset and self._claim(waiter)
            if judged_now:
                self._counts["tool_calls_no_verdict"] += 1
            else:
                self._awaiting[partition][offset] = waiter
        if judged_now:
            waiter.settle(None)

    def _on_marker(self, msg: Message) -> None:
        """A judged-through marker: every tool call of this process below it on its
        partition, still waiting, got no verdict (a verdict would have come before it)."""
        try:
            body = json.loads(msg.value() or b"null")
            through = int(body["through_offset"])
        except (ValueError, TypeError, KeyError) as e:
            self._count("markers_invalid")
            self._report("marker decoding", e)
            return
        partition = msg.partition() or 0
        with self._lock:
            self._counts["markers_seen"] += 1
            if through <= self._judged.get(partition, -1):
                return
            self._judged[partition] = through
            waiting = self._awaiting.get(partition)
            done = [w for o, w in waiting.items() if o < through] if waiting else []
            done = [w for w in done if self._claim(w)]
            self._counts["tool_calls_no_verdict"] += len(done)
        for w in done:
            w.settle(None)

    def _on_record(self, msg: Message) -> None:
        self._reach.back()
        self._allowed("read")
        key = msg.key()
        if key is None and _is_marker(msg):
            self._on_marker(msg)
            return
        sid = key.decode(errors="replace") if key is not None else None
        with self._lock:
            core = self._sessions.get(sid) if sid is not None else None
        if core is None:
            self._count("verdicts_other_sessions")  # another process's session on this partition
            return
        try:
            verdict = Verdict.from_wire(
                json.loads(msg.value() or b"null"), msg.partition() or 0, msg.offset() or 0, time.time()
            )
        except (ValueError, TypeError) as e:
            self._count("verdicts_invalid")
            self._report("verdict decoding", e)
            return
        with self._lock:
            if verdict.verdict_id in self._seen:
                self._counts["verdicts_duplicate"] += 1
                return
            self._seen[verdict.verdict_id] = None
            while len(self._seen) > self.config.dedupe_capacity:
                self._seen.popitem(last=False)
            observed = not verdict.enforce
            waiters: List[_Waiter] = []
            if observed:
                # Observe mode: what the guard would have said. Never the answer to a tool
                # call (its waiter goes on to the marker), never in `verdicts`/`take_verdicts`.
                self._counts["verdicts_observed"] += 1
            else:
                self._counts["verdicts_delivered"] += 1
                waiters = [w for w in list(self._waiters.get(verdict.event_id, [])) if self._claim(w)]
        if observed:
            core._observe(verdict)
            return
        for w in waiters:
            w.settle(verdict)
        core._deliver(verdict)

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def _kafka_error(self, err: KafkaError) -> None:
        """librdkafka's `error_cb` (on the thread serving the client's callbacks)."""
        self._report("kafka", KafkaException(err))

    def _report(self, where: str, e: BaseException, outage: Optional[bool] = None) -> None:
        """Every background problem: counted, handed to `on_error` and logged, never raised;
        the broker being away only once until it is back (librdkafka repeats it per
        connection and retry)."""
        self._count("background_errors")
        refusal = self._refusal(where, e)
        if refusal is not None:
            kind, refused = refusal
            settled: List[_Waiter] = []
            with self._lock:
                first = kind not in self._refused
                self._refused[kind] = refused
                if first and kind == "read":
                    # No answer can be read: the calls waiting now run at once too.
                    pending = [w for ws in self._waiters.values() for w in ws]
                    settled = [w for w in pending if self._claim(w)]
                    self._counts["tool_calls_refused"] += len(settled)
            for w in settled:
                w.settle(None)
            if not first:
                return  # said once until the operation succeeds again
            log.warning("loopguard: %s", self._scrub(str(refused)))
            e = refused
        elif isinstance(e, Refused):  # while connecting (said once by the connection)
            log.warning("loopguard: %s", self._scrub(str(e)))
        elif login_refused(e):
            # As an outage: the constructor's answer, said once until the broker is reached.
            self._away = self._away or e
            self._settled.set()
            if not self._reach.refused_login(where, e):
                return
        elif outage if outage is not None else unreachable(e):
            # Before the first connection: the broker's absence is the constructor's answer.
            self._away = self._away or e
            self._settled.set()
            if not self._reach.lost(where, e):
                return
        else:
            log.warning("loopguard %s: %s", where, self._scrub(str(e)))
        cb = self.config.on_error
        if cb is not None:
            try:
                cb(where, e)
            except Exception:
                self._count("callback_errors")
                log.exception("loopguard on_error callback failed")


    def _refusal(self, where: str, e: BaseException) -> Optional[Tuple[str, Refused]]:
        """An operation refused after connecting (TOPIC_AUTHORIZATION_FAILED): ("read", the
        verdicts topic) from the reader, ("write", the events topic) from the producer."""
        err = e.args[0] if isinstance(e, KafkaException) and e.args else None
        if not isinstance(err, KafkaError) or err.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
            return None
        bootstrap = self.config.bootstrap_servers
        if where.startswith("verdict reader"):
            return "read", Refused(bootstrap, self.verdicts_topic, "verdicts", "Read")
        if where in ("delivery", "publish"):
            return "write", Refused(bootstrap, self.events_topic, "events", "Write")
        return None

    def _allowed(self, kind: str) -> None:
        """`kind` ("read", "write") succeeded: a refusal of it is over (said once, INFO)."""
        if kind not in self._refused:
            return
        with self._lock:
            gone = self._refused.pop(kind, None)
        if gone is not None:
            log.info("loopguard: Kafka at %s allows this client %s on `%s` again", self.config.bootstrap_servers, gone.operation, gone.topic)


def _is_marker(msg: Message) -> bool:
    headers = msg.headers()
    if isinstance(headers, dict):
        return headers.get(MARKER_HEADER) == MARKER_KIND
    return any(k == MARKER_HEADER and v == MARKER_KIND for k, v in headers or [])


class SessionCore:
    """What both session flavours share: ids, turn bookkeeping, received verdicts."""

    def __init__(self, guard: Guard, session_id: str, tenant: Optional[str], agent: Optional[str], model: Optional[str]):
        self.guard = guard
        self.session_id = session_id
        # The partition of the session's events and verdicts (partitioner.py); None until the
        # Guard is connected and knows the partition count.
        self.partition: Optional[int] = None
        self.who = {k: v for k, v in (("tenant", tenant), ("agent", agent), ("model", model)) if v is not None}
        self._lock = threading.Lock()
        self._seq = 0
        self._turn = 0
        self._turn_open = False
        self._open_calls: Dict[str, Deque[str]] = collections.defaultdict(collections.deque)
        self._listeners: List[VerdictCallback] = []
        self._observers: List[VerdictCallback] = []
        self.verdicts: Deque[Verdict] = collections.deque(maxlen=1000)
        # Observe-mode verdicts (`enforce` false): kept apart, never acted on.
        self.observed: Deque[Verdict] = collections.deque(maxlen=1000)
        self._unread: Deque[Verdict] = collections.deque(maxlen=1000)
        self._arrived = threading.Condition(self._lock)

    def turn_id(self, explicit: Optional[str]) -> str:
        with self._lock:
            if explicit is not None:
                return explicit
            if not self._turn_open:
                self._turn += 1
                self._turn_open = True
            return f"t{self._turn}"

    def end_turn(self, explicit: Optional[str]) -> str:
        with self._lock:
            tid = explicit if explicit is not None else f"t{self._turn if self._turn_open else self._turn + 1}"
            if explicit is None and not self._turn_open:
                self._turn += 1
            self._turn_open = False
            return tid

    def event(self, kind: str, fields: Dict[str, Any]) -> Dict[str, Any]:
        with self._lock:
            self._seq += 1
            seq = self._seq
        return {
            "v": 1,
            "event_id": uuid.uuid4().hex,
            "session_id": self.session_id,
            "ts": int(time.time() * 1000),
            "type": kind,
            "seq": seq,
            **self.who,
            **{k: v for k, v in fields.items() if v is not None},
        }

    def open_call(self, tool: str, call_id: Optional[str]) -> str:
        cid = call_id if call_id is not None else uuid.uuid4().hex[:16]
        with self._lock:
            self._open_calls[tool].append(cid)
        return cid

    def close_call(self, tool: str, call_id: Optional[str]) -> str:
        with self._lock:
            open_ = self._open_calls[tool]
            if call_id is None:
                if not open_:
                    raise ValueError(f"call_id: no open call of `{tool}`; pass call_id")
                return open_.popleft()
            if call_id in open_:
                open_.remove(call_id)
            return call_id

    def listen(self, cb: VerdictCallback) -> None:
        with self._lock:
            self._listeners.append(cb)

    def unlisten(self, cb: VerdictCallback) -> None:
        with self._lock:
            if cb in self._listeners:
                self._listeners.remove(cb)

    def observe(self, cb: VerdictCallback) -> None:
        with self._lock:
            self._observers.append(cb)

    def unobserve(self, cb: VerdictCallback) -> None:
        with self._lock:
            if cb in self._observers:
                self._observers.remove(cb)

    def _observe(self, verdict: Verdict) -> None:
        with self._lock:
            self.observed.append(verdict)
            observers = list(self._observers)
        for cb in observers:
            try:
                cb(verdict)
            except Exception as e:
                self.guard._count("callback_errors")
                self.guard._report("on_observed callback", e)

    def _deliver(self, verdict: Verdict) -> None:
        with self._lock:
            self.verdicts.append(verdict)
            self._unread.append(verdict)
            listeners = list(self._listeners)
            self._arrived.notify_all()
        for cb in listeners:
            try:
                cb(verdict)
            except Exception as e:
                self.guard._count("callback_errors")
                self.guard._report("on_verdict callback", e)

    def take(self, timeout: float) -> List[Verdict]:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self._unread:
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self._arrived.wait(left)
            out = list(self._unread)
            self._unread.clear()
            return out


class Session:
    """One agent conversation. Methods publish one event each and return at once, except
    `tool_call`, which waits up to its deadline for a verdict on the call."""

    def __init__(self, core: SessionCore, on_verdict: Optional[VerdictCallback] = None):
        self._core = core
        if on_verdict is not None:
            core.listen(on_verdict)

    @property
    def session_id(self) -> str:
        return self._core.session_id

    @property
    def verdicts(self) -> List[Verdict]:
        """Every verdict of this session so far to act on (the last 1,000)."""
        return list(self._core.verdicts)

    @property
    def observed(self) -> List[Verdict]:
        """Verdicts of rules in observe mode (`enforce` false; the last 1,000): what the
        guard would have said. Never returned by `tool_call` or `take_verdicts`; do not act on
        them (docs/contract.md)."""
        return list(self._core.observed)

    def on_observed(self, callback: VerdictCallback) -> None:
        """Calls `callback` with each observe-mode verdict of this session from now on (on
        the reader thread; an exception it raises is counted, never propagated)."""
        self._core.observe(callback)

    def user_message(self, text: str, limits: Optional[Limits] = None) -> None:
        extra = {"limits": limits.to_wire()} if limits is not None and limits.to_wire() else {}
        self._send("user_message", {"text": text, **extra})

    def tool_call(
        self,
        tool: str,
        args: Any,
        *,
        call_id: Optional[str] = None,
        turn_id: Optional[str] = None,
        deadline: Optional[float] = None,
    ) -> Optional[Verdict]:
        """Publishes the call and waits for the guard's answer on it: a verdict, or None as
        soon as a judged-through marker says the guard judged the call without one; at most
        `deadline` seconds (default: the guard's `tool_call_deadline`), then None (the guard
        is down or far behind: fail-open, counted). None: run the tool.
        A `block` or `abort` verdict: do not run it (see docs/integration.md)."""
        core = self._core
        wait = core.guard.config.tool_call_deadline if deadline is None else deadline
        until = time.monotonic() + wait
        cid = core.open_call(tool, call_id)
        event = core.event("tool_call", {"turn_id": core.turn_id(turn_id), "call_id": cid, "tool": tool, "args": args})
        done = threading.Event()
        box: List[Optional[Verdict]] = []

        def resolve(v: Optional[Verdict]) -> None:
            box.append(v)
            done.set()

        waiter = _Waiter(resolve)
        if not core.guard._publish(event, core, waiter):
            return None
        if not done.wait(max(0.0, until - time.monotonic())):
            if core.guard._expire(waiter):
                return None
            done.wait()  # settled just now, by a verdict or a marker
        return box[0]

    def tool_result(
        self,
        tool: str,
        status: str = "ok",
        *,
        call_id: Optional[str] = None,
        error: Optional[str] = None,
        evidence: Optional[Evidence] = None,
    ) -> None:
        """The call finished. `call_id` defaults to the oldest unanswered call of `tool`."""
        cid = self._core.close_call(tool, call_id)
        fields: Dict[str, Any] = {"call_id": cid, "tool": tool, "status": status, "error": error}
        if evidence is not None:
            fields["evidence"] = evidence.to_wire()
        self._send("tool_result", fields)

    def reasoning(self, chunk: str, *, final: bool = False, turn_id: Optional[str] = None) -> None:
        self._send("reasoning", {"turn_id": self._core.turn_id(turn_id), "text": chunk, "final": True if final else None})

    def content(self, chunk: str, *, turn_id: Optional[str] = None) -> None:
        self._send("content", {"turn_id": self._core.turn_id(turn_id), "text": chunk})

    def assistant_message(
        self, text: str, *, turn_id: Optional[str] = None, usage: Optional[Usage] = None
    ) -> None:
        """`usage`: what the response used, when the model API says (optional)."""
        fields: Dict[str, Any] = {"turn_id": self._core.turn_id(turn_id), "text": text}
        if usage is not None:
            fields["usage"] = usage.to_wire()
        self._send("assistant_message", fields)

    def turn_end(self, *, turn_id: Optional[str] = None, usage: Optional[Usage] = None) -> None:
        """`usage`: what the response used, when the model API says (optional)."""
        fields: Dict[str, Any] = {"turn_id": self._core.end_turn(turn_id)}
        if usage is not None:
            fields["usage"] = usage.to_wire()
        self._send("turn_end", fields)

    def compaction(self) -> None:
        self._send("compaction", {})

    def feedback(self, verdict_id: str, useful: bool, *, note: Optional[str] = None) -> None:
        """Says whether a verdict this session got was right (`useful=True`) or wrong: it
        counts toward that verdict's rule in the guard's precision metric
        (`loopguard_verdict_feedback_total`). `note` (optional) says why; cut at 1,024
        characters, never exported."""
        if note is not None:
            note = note[:MAX_NOTE_CHARS]
        self._send("feedback", {"verdict_id": verdict_id, "useful": useful, "note": note})

    def session_end(self) -> None:
        """Tells the guard to forget the session; this handle receives nothing after it."""
        self._send("session_end", {})
        self._core.guard._forget(self.session_id)

    def on_verdict(self, callback: VerdictCallback) -> None:
        """Calls `callback` with each verdict of this session from now on (on the reader
        thread: keep it short; an exception it raises is counted, never propagated)."""
        self._core.listen(callback)

    def take_verdicts(self, timeout: float = 0.0) -> List[Verdict]:
        """Verdicts received since the last call, waiting up to `timeout` for the first one.
        For streaming loops: check between chunks, apply a `steer` before the next one."""
        return self._core.take(timeout)

    def _send(self, kind: str, fields: Dict[str, Any]) -> None:
        self._core.guard._publish(self._core.event(kind, fields), self._core)
