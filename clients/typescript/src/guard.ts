/**
 * `Guard` (one per process) and `Session` (one per agent conversation).
 *
 * A `Guard` owns one producer and a `VerdictReader`. Sessions publish through it; verdicts
 * come back to the session they belong to, once each (de-duplicated on `verdict_id`).
 * Nothing in the background throws into the agent: problems go to `onError` and the
 * counters of `stats()`, and every publishing method resolves even when Kafka is down.
 */
import { randomUUID } from "node:crypto";
import kafkajs from "kafkajs";
import type { EachMessagePayload, Kafka, KafkaConfig, Producer, SASLOptions } from "kafkajs";
import type { ConnectionOptions } from "node:tls";
import { registerLz4 } from "./lz4.js";
import { Reachability, authorizationFailed, libraryLog, type Logger } from "./kafka_log.js";
import { partitionFor } from "./partitioner.js";
import { noDelaySocketFactory } from "./socket.js";
import { VerdictReader } from "./reader.js";
import { emptyStats, evidenceToWire, parseVerdict, usageToWire } from "./types.js";
import type { Evidence, Limits, Stats, Usage, Verdict } from "./types.js";
import { MAX_NOTE_CHARS, checkEvent } from "./validate.js";
import { GuardError, Misconfigured, Refused, connectLoop, startOffsets, type Topics } from "./connecting.js";
import { Scrubber, checkSessionTenant, eventsTopicFor, redacted, verdictsTopicFor } from "./settings.js";

export { GuardError } from "./connecting.js";

export type ErrorCallback = (where: string, error: unknown) => void;
export type VerdictCallback = (v: Verdict) => void;

export interface GuardOptions {
  brokers: string[];
  /** May name a topic per tenant, `agent-events.{tenant}` (the guard's
   * `kafka.events_topic_template`): `{tenant}` is replaced by `tenant`, which is then
   * required, and every session's tenant must be it (settings.ts). */
  eventsTopic?: string;
  /** May name a topic per tenant, `agent-verdicts.{tenant}` (the guard's
   * `kafka.verdicts_topic_template`): `{tenant}` is replaced by `tenant`, which is then
   * required, and every session's tenant must be it (settings.ts). */
  verdictsTopic?: string;
  /** Copied onto every event: they select policy overrides and label the guard's metrics. */
  tenant?: string;
  agent?: string;
  model?: string;
  /** The longest `toolCall` waits for the guard's answer (a verdict, or a judged-through
   * marker saying there is none) before letting the call run: it only matters when the
   * guard is down or far behind. */
  toolCallDeadlineMs?: number;
  /** false (default): only verdicts of committed transactions (the guard's exactly-once). */
  readUncommitted?: boolean;
  /** TLS: `true`, or Node's TLS options, e.g. `{ ca: [readFileSync("ca.pem", "utf8")] }`. */
  ssl?: boolean | ConnectionOptions;
  /** SASL, e.g. `{ mechanism: "scram-sha-512", username, password }`. Never logged nor put
   * in an error's text; `guard.options` holds it redacted. */
  sasl?: SASLOptions;
  /** Extra kafkajs client settings (clientId, retry, ...; `ssl` and `sasl` above win over
   * the same keys here). Secrets in it are never logged either. */
  kafka?: Omit<KafkaConfig, "brokers">;
  /** Called with (where, error) for every background problem; also counted. */
  onError?: ErrorCallback;
  /** Verdict ids remembered for de-duplication. */
  dedupeCapacity?: number;
  /** The longest `connect()` waits for Kafka's first answer (connected, refused, or the
   * topics wrong); the connection goes on in the background after it. Default 1000. */
  connectWaitMs?: number;
  /** Events kept while the guard is not connected yet, sent in order once it is; what comes
   * beyond is dropped, counted (`eventsOverflowed`) and reported once. Default 10,000. */
  backlogCapacity?: number;
  /** Where the client logs (`console` will do): kafkajs's own lines at `debug`, an outage of
   * the broker once per change of state (`warn` when it goes, `info` when it is back).
   * None: nothing is logged (problems still reach `onError` and `stats()`). */
  logger?: Logger;
}

type Resolved = Required<
  Pick<GuardOptions, "eventsTopic" | "verdictsTopic" | "toolCallDeadlineMs" | "readUncommitted" | "dedupeCapacity" | "connectWaitMs" | "backlogCapacity">
> &
  GuardOptions;

/** Where an event landed: its partition and offset (from the producer's acknowledgement). */
export interface Landed {
  partition: number;
  offset: bigint;
}

interface Queued {
  value: string;
  done: (landed: Landed | null) => void;
}

/** The longest one start-up question waits for a broker that says nothing. */
const PROBE_TIMEOUT_MS = 2000;
/** The longest `close()` waits for a connection attempt in flight. */
const CLOSE_WAIT_MS = 250;

/** The header and kind of a judged-through marker (docs/contract.md). */
const MARKER_HEADER = "loopguard-kind";
const MARKER_KIND = "judged";

export class Guard {
  private readonly waiters = new Map<string, Set<(v: Verdict) => void>>();
  /** Judged-through markers: the highest `through_offset` seen per partition, and the
   * acknowledged tool calls still waiting, per partition by offset. */
  private readonly judged = new Map<number, bigint>();
  private readonly awaiting = new Map<number, Map<bigint, () => void>>();
  private readonly sessions = new Map<string, SessionCore>();
  private readonly seen = new Set<string>();
  private readonly counts: Stats = emptyStats();
  private closed = false;
  /** Set once connected: the verdict reader, and the events topic's partition count that
   * sessions are spread over. Until then what sessions publish waits in `backlog`. */
  private reader: VerdictReader | undefined;
  private partitionCount = 0;
  private readonly backlog: { core: SessionCore; value: string }[] = [];
  private overflowSaid = false;
  /** Why the guard is not connected yet (undefined: no answer so far). */
  private problem: GuardError | undefined;
  private readonly connected$: Promise<void>;
  private markConnected: () => void = () => undefined;
  private answered: () => void = () => undefined;
  private readonly firstAnswer: Promise<void>;
  private wakeLoop: (() => void) | undefined;
  private connecting: Promise<void> = Promise.resolve();

  /** Operations the broker refused this client after it connected ("read" on the verdicts
   * topic, "write" on the events topic): each said once; tool calls run unguarded (fail-open
   * at once) until the operation succeeds again. */
  private readonly refused = new Map<"read" | "write", Refused>();
  /** Tool calls waiting now: each runs at once (null) when Read is refused. */
  private readonly onRefusal = new Set<() => void>();

  private constructor(
    /** The settings, secrets redacted. */
    readonly options: Resolved,
    /** The topic this guard reads its verdicts from (`verdictsTopic` with its tenant). */
    readonly verdictsTopic: string,
    /** The topic this guard writes its events to (`eventsTopic` with its tenant). */
    readonly eventsTopic: string,
    private readonly kafka: Kafka,
    /** The same settings, no retries: connecting's first question (connecting.ts). */
    private readonly probe: Kafka,
    private readonly producer: Producer,
    /** The broker's state as this process sees it (kafka_log.ts). */
    private readonly reach: Reachability,
    private readonly scrub: Scrubber,
  ) {
    this.connected$ = new Promise((r) => (this.markConnected = r));
    this.firstAnswer = new Promise((r) => (this.answered = r));
  }

  /** Makes a `Guard` and connects it in the background; resolves as soon as Kafka first
   * answers (connected: the guard is ready and its first call is answered as fast as any
   * other; refused, or the topics wrong: at once), at most `connectWaitMs` for a broker that
   * says nothing. Never rejects for Kafka's sake: until connected, tool calls are answered
   * fail-open at once and events wait in a bounded backlog; `ready()` says why not. */
  static async connect(options: GuardOptions): Promise<Guard> {
    registerLz4();
    const o: Resolved = {
      eventsTopic: "agent-events",
      verdictsTopic: "agent-verdicts",
      toolCallDeadlineMs: 1000,
      readUncommitted: false,
      dedupeCapacity: 100_000,
      connectWaitMs: 1000,
      backlogCapacity: 10_000,
      ...options,
    };
    // The topic verdicts are read from (the template with its tenant): a ConfigError here,
    // before anything connects.
    const verdictsTopic = verdictsTopicFor(o.verdictsTopic, o.tenant);
    const eventsTopic = eventsTopicFor(o.eventsTopic, o.tenant);
    // Every line and error text this client says goes through it (settings.ts).
    const scrub = new Scrubber(o.sasl, o.ssl, o.kafka);
    const reach = new Reachability(o.brokers.join(","), o.logger, scrub);
    const settings: KafkaConfig = {
      clientId: "loopguard-client",
      socketFactory: noDelaySocketFactory,
      ...libraryLog(o.logger, reach, scrub),
      ...o.kafka,
      ...(o.ssl !== undefined ? { ssl: o.ssl } : {}),
      ...(o.sasl !== undefined ? { sasl: o.sasl } : {}),
      brokers: o.brokers,
    };
    const kafka = new kafkajs.Kafka(settings);
    // What connecting asks first, each time once: kafkajs would retry a refused connection
    // for seconds before saying so (the connection loop asks again itself). A broker that
    // accepts connections and never answers fails a question after PROBE_TIMEOUT_MS instead
    // of kafkajs's 30 s: a question in flight cannot be cancelled (kafkajs waits it out,
    // keeping the process alive), so that is the longest a closed Guard's process lingers.
    const probe = new kafkajs.Kafka({
      ...settings,
      retry: { ...settings.retry, retries: 0 },
      requestTimeout: Math.min(settings.requestTimeout ?? PROBE_TIMEOUT_MS, PROBE_TIMEOUT_MS),
    });
    // Idempotent, one request in flight: retries after a broker restart keep each
    // session's events in order.
    // Retries for about a minute: a broker restart is waited out, not a lost event.
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, retry: { retries: 12, initialRetryTime: 200, maxRetryTime: 5000 } });
    // What the guard keeps to show: its settings with the secrets redacted.
    const shown: Resolved = { ...o, sasl: redacted(o.sasl), ssl: redacted(o.ssl), kafka: redacted(o.kafka) };
    const guard = new Guard(shown, verdictsTopic, eventsTopic, kafka, probe, producer, reach, scrub);
    guard.connecting = guard.connectInBackground();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([guard.firstAnswer, new Promise<void>((r) => (timer = setTimeout(r, o.connectWaitMs)))]);
    clearTimeout(timer);
    return guard;
  }

  /** True once the guard knows its topics and reads verdicts (it then stays so; an outage
   * after it is ridden out as before). Until then tool calls are answered fail-open at once
   * and events wait in the backlog. */
  get connected(): boolean {
    return this.reader !== undefined;
  }

  /** Waits until connected, at most `timeoutMs` (default 10 s); rejects with `GuardError`
   * saying why not (the broker unreachable, a topic missing, partition counts that differ).
   * For callers that would rather fail fast than run unguarded; connecting goes on either way. */
  async ready(timeoutMs = 10_000): Promise<void> {
    if (this.connected) return;
    let timer: NodeJS.Timeout | undefined;
    const ok = await Promise.race([this.connected$.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), timeoutMs)))]);
    clearTimeout(timer);
    if (ok) return;
    throw new GuardError(this.scrub.text(this.problem?.message ?? `no answer from Kafka at ${this.options.brokers.join(",")} within ${timeoutMs} ms`), {
      cause: this.problem,
    });
  }

  private topics(): Topics {
    return { brokers: this.options.brokers.join(","), eventsTopic: this.eventsTopic, verdictsTopic: this.verdictsTopic };
  }

  private connectInBackground(): Promise<void> {
    return connectLoop(this.topics(), () => this.attempt(), {
      stopped: () => this.closed,
      onProblem: (e, say) => {
        this.problem = e;
        if (e instanceof Misconfigured) this.reach.back(); // it answered: reachable
        if (say) this.report("connect", e);
      },
      onAnswer: () => this.answered(),
      sleep: (ms) =>
        new Promise<void>((r) => {
          const timer = setTimeout(r, ms);
          this.wakeLoop = () => {
            clearTimeout(timer);
            r();
          };
        }),
    });
  }

  /** One try at everything the guard needs; on success the reader reads, every session has
   * its partition, and the backlog is on its way, in order, before anything published after. */
  private async attempt(): Promise<void> {
    const { start, partitions } = await startOffsets(this.probe, this.topics());
    if (this.closed) return;
    await this.producer.connect().catch((e: unknown) => {
      // The idempotent producer asks for its id here: refused when the principal may Write
      // on no topic (CLUSTER_AUTHORIZATION_FAILED).
      const code = authorizationFailed(e);
      if (code === undefined) throw e;
      throw new Refused(this.options.brokers.join(","), this.eventsTopic, "events", "Write", { code, cause: e });
    });
    if (this.closed) {
      await this.producer.disconnect().catch(() => undefined);
      return;
    }
    const reader = new VerdictReader(this.kafka, {
      topic: this.verdictsTopic,
      readUncommitted: this.options.readUncommitted,
      startOffsets: start,
      onRecord: (p) => this.onRecord(p),
      onError: (where, e) => this.report(where, e),
    });
    await reader.start();
    if (this.closed) {
      await reader.close();
      await this.producer.disconnect().catch(() => undefined);
      return;
    }
    // From here to the end, one synchronous run: nothing published can come between.
    this.reach.back();
    this.problem = undefined;
    this.partitionCount = partitions;
    this.reader = reader;
    for (const core of this.sessions.values()) {
      core.partition ??= partitionFor(core.sessionId, partitions);
      reader.want(core.partition);
    }
    for (const { core, value } of this.backlog.splice(0)) core.enqueue(value);
    this.markConnected();
  }

  /** Keeps an event published before the guard is connected (bounded). */
  hold(core: SessionCore, value: string): void {
    if (this.backlog.length < this.options.backlogCapacity) {
      this.backlog.push({ core, value });
      return;
    }
    this.counts.eventsOverflowed += 1;
    if (this.overflowSaid) return;
    this.overflowSaid = true;
    this.report(
      "backlog",
      new Error(
        `${this.options.backlogCapacity} events wait for Kafka at ${this.options.brokers.join(",")} (backlogCapacity): later ones are dropped until it is reached (eventsOverflowed)`,
      ),
    );
  }

  /** A handle for one agent conversation (a new random id when none is given). */
  /** `onObserved` receives the verdicts of rules in observe mode, which are never acted on. */
  session(
    sessionId?: string,
    opts: { onVerdict?: VerdictCallback; onObserved?: VerdictCallback; tenant?: string; agent?: string; model?: string } = {},
  ): Session {
    checkSessionTenant(this.options.verdictsTopic, this.options.tenant, opts.tenant, this.options.eventsTopic);
    const id = sessionId ?? randomUUID().replaceAll("-", "");
    // Not connected yet: `attempt()` gives it its partition.
    const core = new SessionCore(this, id, this.partitionCount > 0 ? partitionFor(id, this.partitionCount) : undefined, {
      tenant: opts.tenant ?? this.options.tenant,
      agent: opts.agent ?? this.options.agent,
      model: opts.model ?? this.options.model,
    });
    this.sessions.set(core.sessionId, core);
    // Read from now on: the session's first tool call finds its partition read already.
    if (core.partition !== undefined) this.reader?.want(core.partition);
    if (opts.onObserved !== undefined) core.observers.add(opts.onObserved);
    return new Session(core, opts.onVerdict);
  }

  stats(): Stats {
    return { ...this.counts, readerRestarts: this.reader?.restarts ?? 0 };
  }

  /** The partitions of the verdicts topic read now. */
  verdictPartitions(): number[] {
    return this.reader?.partitions() ?? [];
  }

  /** Reopens the verdict reader; it goes on where it stopped and delivers nothing twice. */
  async restartReader(): Promise<void> {
    await this.reader?.restart();
  }

  /** Sends what is queued and stops; events never sent (the guard was never connected) are
   * dropped and counted in `eventsFailed`. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.wakeLoop?.();
    // An attempt in flight to a silent broker ends on its own (and undoes itself).
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.connecting, new Promise((r) => (timer = setTimeout(r, CLOSE_WAIT_MS)))]);
    clearTimeout(timer);
    this.counts.eventsFailed += this.backlog.splice(0).length;
    for (const s of this.sessions.values()) await s.drained();
    await this.reader?.close();
    await this.producer.disconnect().catch((e) => this.report("close", e));
  }

  // ---- used by sessions ----

  /** Sends a session's queued events in one request; resolves with the partition (null
   * when Kafka refused them: reported and counted, the agent goes on unguarded). */
  async sendBatch(sessionId: string, partition: number, batch: Queued[]): Promise<void> {
    try {
      const [meta] = await this.producer.send({
        topic: this.eventsTopic,
        messages: batch.map((q) => ({ key: sessionId, value: q.value, partition })),
      });
      this.counts.eventsSent += batch.length;
      this.reach.back();
      this.allowed("write");
      this.reader?.want(meta.partition);
      // One session's batch goes to one partition, its records at consecutive offsets.
      const base = BigInt(meta.baseOffset ?? "-1");
      batch.forEach((q, i) => q.done({ partition: meta.partition, offset: base + BigInt(i) }));
    } catch (e) {
      this.counts.eventsFailed += batch.length;
      this.report("publish", e);
      for (const q of batch) q.done(null);
    }
  }

  addWaiter(eventId: string, w: (v: Verdict) => void): void {
    let set = this.waiters.get(eventId);
    if (set === undefined) this.waiters.set(eventId, (set = new Set()));
    set.add(w);
  }

  dropWaiter(eventId: string, w: (v: Verdict) => void): void {
    const set = this.waiters.get(eventId);
    set?.delete(w);
    if (set?.size === 0) this.waiters.delete(eventId);
  }

  /** Calls `judged` once a marker covers the event at `landed` (at once when one already
   * has); returns a function that stops waiting. */
  awaitMarker(landed: Landed, judged: () => void): () => void {
    const { partition, offset } = landed;
    if (offset < 0n) return () => undefined;
    if ((this.judged.get(partition) ?? -1n) > offset) {
      judged();
      return () => undefined;
    }
    let waiting = this.awaiting.get(partition);
    if (waiting === undefined) this.awaiting.set(partition, (waiting = new Map()));
    waiting.set(offset, judged);
    return () => {
      if (waiting.get(offset) === judged) waiting.delete(offset);
    };
  }

  /** A judged-through marker: every call of this process below it on its partition, still
   * waiting, got no verdict (a verdict would have been read before it). */
  private onMarker(partition: number, value: Buffer | null): void {
    let through: bigint;
    try {
      through = BigInt(JSON.parse(value?.toString() ?? "null").through_offset);
    } catch (e) {
      this.counts.markersInvalid += 1;
      this.report("marker decoding", e);
      return;
    }
    this.counts.markersSeen += 1;
    if (through <= (this.judged.get(partition) ?? -1n)) return;
    this.judged.set(partition, through);
    const waiting = this.awaiting.get(partition);
    if (waiting === undefined) return;
    for (const [offset, judged] of waiting)
      if (offset < through) {
        waiting.delete(offset);
        judged();
      }
  }

  forget(sessionId: string): void {
    this.sessions.delete(sessionId);
  }

  count(name: keyof Stats): void {
    this.counts[name] += 1;
  }

  /** True while the broker refuses this client Read on its verdicts topic or Write on the
   * events topic: tool calls run at once (fail-open). */
  get unguarded(): boolean {
    return this.refused.size > 0;
  }

  /** Calls `run` if Read on the verdicts topic is refused while a tool call waits; returns
   * a function that stops it. */
  whenRefused(run: () => void): () => void {
    this.onRefusal.add(run);
    return () => this.onRefusal.delete(run);
  }

  report(where: string, e: unknown): void {
    this.counts.backgroundErrors += 1;
    const code = authorizationFailed(e);
    const role = where.startsWith("verdict reader") ? "read" : where === "publish" ? "write" : undefined;
    if (code !== undefined && role !== undefined) {
      const brokers = this.options.brokers.join(",");
      const refusal =
        role === "read"
          ? new Refused(brokers, this.verdictsTopic, "verdicts", "Read", { code, cause: e })
          : new Refused(brokers, this.eventsTopic, "events", "Write", { code, cause: e });
      const first = !this.refused.has(role);
      this.refused.set(role, refusal);
      if (role === "read") for (const run of [...this.onRefusal]) run();
      if (!first) return; // said once until the operation succeeds again
      e = refusal;
    }
    if (e instanceof Refused) this.options.logger?.warn?.(`loopguard: ${this.scrub.text(e.message)}`);
    else this.reach.problem(where, e);
    const cb = this.options.onError;
    if (cb === undefined) return;
    try {
      cb(where, e);
    } catch {
      this.counts.callbackErrors += 1;
    }
  }

  /** `role` succeeded: a refusal of it is over (said once, info). */
  private allowed(role: "read" | "write"): void {
    const gone = this.refused.get(role);
    if (gone === undefined) return;
    this.refused.delete(role);
    this.options.logger?.info?.(`loopguard: Kafka at ${this.options.brokers.join(",")} allows this client ${gone.operation} on \`${gone.topic}\` again`);
  }

  private onRecord({ partition, message }: EachMessagePayload): void {
    this.reach.back();
    this.allowed("read");
    if (message.key === null && message.headers?.[MARKER_HEADER]?.toString() === MARKER_KIND) {
      this.onMarker(partition, message.value);
      return;
    }
    const core = message.key ? this.sessions.get(message.key.toString()) : undefined;
    if (core === undefined) {
      this.counts.verdictsOtherSessions += 1; // another process's session on this partition
      return;
    }
    let v: Verdict;
    try {
      v = parseVerdict(JSON.parse(message.value?.toString() ?? "null"), partition, message.offset, Date.now());
    } catch (e) {
      this.counts.verdictsInvalid += 1;
      this.report("verdict decoding", e);
      return;
    }
    if (this.seen.has(v.verdictId)) {
      this.counts.verdictsDuplicate += 1;
      return;
    }
    this.seen.add(v.verdictId);
    if (this.seen.size > this.options.dedupeCapacity) this.seen.delete(this.seen.values().next().value as string);
    if (!v.enforce) {
      // Observe mode: what the guard would have said. Never the answer to a tool call (its
      // waiter goes on to the marker), never in `verdicts` or `stream()`.
      this.counts.verdictsObserved += 1;
      core.observe(v);
      return;
    }
    this.counts.verdictsDelivered += 1;
    const ws = this.waiters.get(v.eventId);
    this.waiters.delete(v.eventId);
    for (const w of ws ?? []) w(v);
    core.deliver(v);
  }
}

/** What a session shares with its handle: ids, turns, the send queue, received verdicts. */
class SessionCore {
  private seq = 0;
  private turn = 0;
  private turnOpen = false;
  private readonly openCalls = new Map<string, string[]>();
  readonly listeners = new Set<VerdictCallback>();
  readonly verdicts: Verdict[] = [];
  /** Observe-mode verdicts (`enforce` false): kept apart, never acted on. */
  readonly observers = new Set<VerdictCallback>();
  readonly observed: Verdict[] = [];
  private queue: Queued[] = [];
  private sending: Promise<void> = Promise.resolve();
  private pumping = false;

  constructor(
    readonly guard: Guard,
    readonly sessionId: string,
    /** The partition of the session's events and verdicts (partitioner.ts); undefined until
     * the guard is connected and knows the partition count. */
    public partition: number | undefined,
    private readonly who: { tenant?: string; agent?: string; model?: string },
  ) {}

  turnId(explicit?: string): string {
    if (explicit !== undefined) return explicit;
    if (!this.turnOpen) {
      this.turn += 1;
      this.turnOpen = true;
    }
    return `t${this.turn}`;
  }

  endTurn(explicit?: string): string {
    if (explicit === undefined && !this.turnOpen) this.turn += 1;
    const id = explicit ?? `t${this.turn}`;
    this.turnOpen = false;
    return id;
  }

  event(type: string, fields: Record<string, unknown>): Record<string, unknown> {
    this.seq += 1;
    const e: Record<string, unknown> = { v: 1, event_id: randomUUID().replaceAll("-", ""), session_id: this.sessionId, ts: Date.now(), type, seq: this.seq };
    for (const [k, v] of Object.entries({ ...this.who, ...fields })) if (v !== undefined) e[k] = v;
    return e;
  }

  openCall(tool: string, callId?: string): string {
    const id = callId ?? randomUUID().replaceAll("-", "").slice(0, 16);
    const list = this.openCalls.get(tool) ?? [];
    list.push(id);
    this.openCalls.set(tool, list);
    return id;
  }

  closeCall(tool: string, callId?: string): string {
    const list = this.openCalls.get(tool) ?? [];
    if (callId === undefined) {
      const first = list.shift();
      if (first === undefined) throw new Error(`call_id: no open call of \`${tool}\`; pass callId`);
      return first;
    }
    const i = list.indexOf(callId);
    if (i >= 0) list.splice(i, 1);
    return callId;
  }

  /** Validates (throwing `ValidationError`) and queues one event; resolves with where it
   * landed once acknowledged (null if it could not be sent, or at once, null, while the guard
   * is not connected: the event waits in its backlog). Events of a session go out in order,
   * those queued during a send together in the next one. */
  publish(event: Record<string, unknown>): Promise<Landed | null> {
    const value = checkEvent(event);
    if (!this.guard.connected) {
      this.guard.hold(this, value);
      return Promise.resolve(null);
    }
    return new Promise((done) => this.enqueue(value, done));
  }

  /** Queues an event to send (the guard is connected). */
  enqueue(value: string, done: (landed: Landed | null) => void = () => undefined): void {
    this.queue.push({ value, done });
    if (!this.pumping) this.sending = this.pump();
  }

  private async pump(): Promise<void> {
    this.pumping = true;
    while (this.queue.length > 0) {
      const batch = this.queue;
      this.queue = [];
      await this.guard.sendBatch(this.sessionId, this.partition ?? 0, batch);
    }
    this.pumping = false;
  }

  async drained(): Promise<void> {
    while (this.pumping) await this.sending;
  }

  observe(v: Verdict): void {
    this.observed.push(v);
    if (this.observed.length > 1000) this.observed.shift();
    for (const cb of this.observers) {
      try {
        cb(v);
      } catch (e) {
        this.guard.count("callbackErrors");
        this.guard.report("onObserved callback", e);
      }
    }
  }

  deliver(v: Verdict): void {
    this.verdicts.push(v);
    if (this.verdicts.length > 1000) this.verdicts.shift();
    for (const cb of this.listeners) {
      try {
        cb(v);
      } catch (e) {
        this.guard.count("callbackErrors");
        this.guard.report("onVerdict callback", e);
      }
    }
  }
}

/** One agent conversation. Each method publishes one event and resolves once Kafka has it
 * (never rejecting for Kafka's sake), except `toolCall`, which also waits up to its
 * deadline for a verdict on the call. */
export class Session {
  constructor(
    private readonly core: SessionCore,
    onVerdict?: VerdictCallback,
  ) {
    if (onVerdict !== undefined) core.listeners.add(onVerdict);
  }

  get sessionId(): string {
    return this.core.sessionId;
  }

  /** Every verdict of this session so far (the last 1,000). */
  get verdicts(): readonly Verdict[] {
    return this.core.verdicts;
  }

  async userMessage(text: string, opts: { limits?: Limits } = {}): Promise<void> {
    const limits = opts.limits?.maxToolRounds !== undefined ? { max_tool_rounds: opts.limits.maxToolRounds } : undefined;
    await this.core.publish(this.core.event("user_message", { text, limits }));
  }

  /** Publishes the call and waits for the guard's answer on it: a verdict, or null as soon
   * as a judged-through marker says the guard judged the call without one; at most
   * `deadlineMs` (default: the guard's `toolCallDeadlineMs`), then null (the guard is down
   * or far behind: fail-open, counted). null: run the tool. A `block` or `abort` verdict:
   * do not run it (see docs/integration.md). */
  async toolCall(tool: string, args: unknown, opts: { callId?: string; turnId?: string; deadlineMs?: number } = {}): Promise<Verdict | null> {
    const started = Date.now();
    const wait = opts.deadlineMs ?? this.core.guard.options.toolCallDeadlineMs;
    const callId = this.core.openCall(tool, opts.callId);
    const event = this.core.event("tool_call", { turn_id: this.core.turnId(opts.turnId), call_id: callId, tool, args });
    if (!this.core.guard.connected) {
      // Nothing could answer it yet: run the tool now; the event waits in the backlog, so
      // the guard still sees the session's history.
      await this.core.publish(event);
      this.core.guard.count("toolCallsNotConnected");
      return null;
    }
    if (this.core.guard.unguarded) {
      // The broker refuses Read on the verdicts topic or Write on the events topic: no answer
      // can come. The event is still sent (the guard sees the history, and a send tells
      // when Write is allowed again); the tool runs now.
      this.core.guard.count("toolCallsRefused");
      void this.core.publish(event);
      return null;
    }
    const eventId = event.event_id as string;
    let resolveVerdict: (v: Verdict | null) => void = () => undefined;
    const verdict = new Promise<Verdict | null>((r) => (resolveVerdict = r));
    const waiter = (v: Verdict) => resolveVerdict(v);
    // Validates (throwing before anything is registered) and queues the event; no verdict
    // can arrive before this synchronous code returns, so registering after is safe.
    const sent = this.core.publish(event);
    this.core.guard.addWaiter(eventId, waiter);
    let timer: NodeJS.Timeout | undefined;
    let timedOut = false;
    const timeout = new Promise<null>(
      (r) =>
        (timer = setTimeout(() => {
          timedOut = true;
          r(null);
        }, Math.max(0, started + wait - Date.now()))),
    );
    // The verdict (or the marker) can be read before this producer has its
    // acknowledgement: wait for whichever comes first, and stop at once (fail open) if the
    // event could not be sent.
    let judged = false;
    let refused = false;
    const stopRefused = this.core.guard.whenRefused(() => {
      refused = true;
      resolveVerdict(null);
    });
    let stopAwaiting: () => void = () => undefined;
    const unsent = sent.then((landed) => {
      if (landed === null) return null;
      stopAwaiting = this.core.guard.awaitMarker(landed, () => {
        judged = true;
        resolveVerdict(null);
      });
      return new Promise<never>(() => undefined);
    });
    try {
      const got = await Promise.race([verdict, timeout, unsent]);
      if (got === null && judged) this.core.guard.count("toolCallsNoVerdict");
      else if (got === null && refused) this.core.guard.count("toolCallsRefused");
      else if (got === null && timedOut) this.core.guard.count("toolCallDeadlines");
      return got;
    } finally {
      clearTimeout(timer);
      stopRefused();
      stopAwaiting();
      this.core.guard.dropWaiter(eventId, waiter);
    }
  }

  /** The call finished. `callId` defaults to the oldest unanswered call of `tool`. */
  async toolResult(tool: string, opts: { status?: "ok" | "error"; callId?: string; error?: string; evidence?: Evidence } = {}): Promise<void> {
    const callId = this.core.closeCall(tool, opts.callId);
    await this.core.publish(
      this.core.event("tool_result", {
        call_id: callId,
        tool,
        status: opts.status ?? "ok",
        error: opts.error,
        evidence: opts.evidence === undefined ? undefined : evidenceToWire(opts.evidence),
      }),
    );
  }

  async reasoning(chunk: string, opts: { final?: boolean; turnId?: string } = {}): Promise<void> {
    await this.core.publish(this.core.event("reasoning", { turn_id: this.core.turnId(opts.turnId), text: chunk, final: opts.final ? true : undefined }));
  }

  async content(chunk: string, opts: { turnId?: string } = {}): Promise<void> {
    await this.core.publish(this.core.event("content", { turn_id: this.core.turnId(opts.turnId), text: chunk }));
  }

  /** `usage`: what the response used, when the model API says (optional). */
  async assistantMessage(text: string, opts: { turnId?: string; usage?: Usage } = {}): Promise<void> {
    const fields: Record<string, unknown> = { turn_id: this.core.turnId(opts.turnId), text };
    if (opts.usage !== undefined) fields.usage = usageToWire(opts.usage);
    await this.core.publish(this.core.event("assistant_message", fields));
  }

  /** `usage`: what the response used, when the model API says (optional). */
  async turnEnd(opts: { turnId?: string; usage?: Usage } = {}): Promise<void> {
    const fields: Record<string, unknown> = { turn_id: this.core.endTurn(opts.turnId) };
    if (opts.usage !== undefined) fields.usage = usageToWire(opts.usage);
    await this.core.publish(this.core.event("turn_end", fields));
  }

  async compaction(): Promise<void> {
    await this.core.publish(this.core.event("compaction", {}));
  }

  /** Says whether a verdict this session got was right (`useful` true) or wrong: it counts
   * toward that verdict's rule in the guard's precision metric
   * (`loopguard_verdict_feedback_total`). `note` (optional) says why; cut at 1,024
   * characters, never exported. */
  async feedback(verdictId: string, useful: boolean, opts: { note?: string } = {}): Promise<void> {
    const fields: Record<string, unknown> = { verdict_id: verdictId, useful };
    if (opts.note !== undefined) fields.note = opts.note.slice(0, MAX_NOTE_CHARS);
    await this.core.publish(this.core.event("feedback", fields));
  }

  /** Tells the guard to forget the session; this handle receives nothing after it. */
  async sessionEnd(): Promise<void> {
    await this.core.publish(this.core.event("session_end", {}));
    this.core.guard.forget(this.sessionId);
  }

  /** Verdicts of rules in observe mode (`enforce` false; the last 1,000): what the guard
   * would have said. Never returned by `toolCall`, never in `verdicts` or `stream()`; do not
   * act on them (docs/contract.md). */
  get observed(): Verdict[] {
    return [...this.core.observed];
  }

  /** Adds a callback for this session's observe-mode verdicts; returns its remover. */
  onObserved(cb: VerdictCallback): () => void {
    this.core.observers.add(cb);
    return () => this.core.observers.delete(cb);
  }

  /** Adds a callback for this session's verdicts; returns a function that removes it. */
  onVerdict(cb: VerdictCallback): () => void {
    this.core.listeners.add(cb);
    return () => this.core.listeners.delete(cb);
  }

  /** Every verdict of the session from now on, as it arrives; stop with `break` or `signal`. */
  async *stream(signal?: AbortSignal): AsyncGenerator<Verdict> {
    const queue: Verdict[] = [];
    let wake: (() => void) | undefined;
    const off = this.onVerdict((v) => {
      queue.push(v);
      wake?.();
    });
    const aborted = new Promise<void>((r) => signal?.addEventListener("abort", () => r(), { once: true }));
    try {
      while (!signal?.aborted) {
        const next = queue.shift();
        if (next !== undefined) {
          yield next;
          continue;
        }
        await Promise.race([new Promise<void>((r) => (wake = r)), aborted]);
      }
    } finally {
      off();
    }
  }
}
