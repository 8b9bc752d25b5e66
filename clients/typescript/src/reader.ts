/**
 * The verdict reader. kafkajs has no manual partition assignment, so the reader is the only
 * member of a group of its own (a random id: it gets every partition, commits nothing).
 * Until the process has a session it reads every partition, so that the first session's
 * partition is already in the fetch in flight when its first tool call is made; from then
 * on it keeps paused every partition none of its sessions is on. Each partition is read
 * from where it ended when the process started.
 *
 * Why not pause everything at first: kafkajs, with every partition paused, sleeps its whole
 * fetch wait before it looks again, so a fresh process's first call waited out that sleep
 * (1 s, its deadline). A partition resumed later is read when the fetch in flight returns:
 * at most `FETCH_WAIT_MS`, once per partition in a process's life.
 */
import type { Consumer, EachMessagePayload, Kafka } from "kafkajs";

/** The broker's long poll: an answer comes as soon as a record (or, for read_committed, the
 * commit that makes one visible) arrives, else after this wait. It bounds how long a
 * partition resumed while a fetch waits is not read; an idle reader fetches 5 times a
 * second (docs/benchmarks.md, "The first call and the tail"). */
export const FETCH_WAIT_MS = 200;

export interface ReaderOptions {
  topic: string;
  readUncommitted: boolean;
  /** Where each partition ended at start-up: reading from there misses no verdict. */
  startOffsets: Map<number, string>;
  onRecord: (payload: EachMessagePayload) => void;
  onError: (where: string, e: unknown) => void;
}

export class VerdictReader {
  private consumer: Consumer | undefined;
  /** Next offset to read per partition read so far (a restarted consumer goes on from here). */
  private readonly position = new Map<number, string>();
  /** The partitions this process's sessions are on. */
  private readonly wanted = new Set<number>();
  private assigned = new Set<number>();
  private running = false;
  private recovering = false;
  private closed = false;
  restarts = 0;

  constructor(
    private readonly kafka: Kafka,
    private readonly opts: ReaderOptions,
  ) {}

  async start(): Promise<void> {
    const consumer = this.kafka.consumer({
      groupId: `loopguard-reader-${crypto.randomUUID()}`,
      readUncommitted: this.opts.readUncommitted,
      maxWaitTimeInMs: FETCH_WAIT_MS,
      sessionTimeout: 10_000,
      heartbeatInterval: 3_000,
    });
    this.consumer = consumer;
    consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
      this.assigned = new Set(payload.memberAssignment[this.opts.topic] ?? []);
      const open = this.wanted.size === 0;
      const idle = [...this.assigned].filter((p) => !open && !this.wanted.has(p));
      if (idle.length > 0) consumer.pause([{ topic: this.opts.topic, partitions: idle }]);
      for (const p of this.assigned) if (open || this.wanted.has(p)) this.seek(consumer, p);
    });
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      this.opts.onError("verdict reader", payload.error);
      // kafkajs restarts a consumer itself after retriable errors only; after a broker
      // restart it can give up ("Failed to find group coordinator"). Start a new one then,
      // going on from the positions read so far.
      if (!payload.restart && consumer === this.consumer) this.recover();
    });
    const joined = new Promise<void>((resolve) => consumer.on(consumer.events.GROUP_JOIN, () => resolve()));
    await consumer.connect();
    await consumer.subscribe({ topics: [this.opts.topic], fromBeginning: false });
    await consumer.run({
      autoCommit: false,
      eachMessage: async (payload) => {
        this.position.set(payload.partition, (BigInt(payload.message.offset) + 1n).toString());
        this.opts.onRecord(payload);
      },
    });
    this.running = true;
    // Verdicts can only be read once the group is joined: wait for it here rather than in
    // the first tool call's deadline.
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, fail) => {
      timer = setTimeout(() => fail(new Error("verdict reader: no group join within 30 s")), 30_000);
    });
    try {
      await Promise.race([joined, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Asks for `partition` to be read; cheap when it already is. */
  want(partition: number): void {
    if (this.wanted.has(partition)) return;
    const open = this.wanted.size === 0;
    this.wanted.add(partition);
    const c = this.consumer;
    if (c === undefined || !this.running) return; // GROUP_JOIN seeks it
    try {
      if (open) {
        // Read already (every partition is, until now): stop reading the others.
        const idle = [...this.assigned].filter((p) => p !== partition);
        if (idle.length > 0) c.pause([{ topic: this.opts.topic, partitions: idle }]);
        return;
      }
      if (!this.assigned.has(partition)) return; // GROUP_JOIN seeks it
      this.seek(c, partition);
      c.resume([{ topic: this.opts.topic, partitions: [partition] }]);
    } catch (e) {
      this.opts.onError("verdict reader", e);
    }
  }

  /** The partitions this process's sessions are on, read now. */
  partitions(): number[] {
    return [...this.wanted].sort((a, b) => a - b);
  }

  /** Reading `partition` goes on after the last record read, else from its start offset. */
  private seek(c: Consumer, partition: number): void {
    const offset = this.position.get(partition) ?? this.opts.startOffsets.get(partition);
    if (offset !== undefined) c.seek({ topic: this.opts.topic, partition, offset });
  }

  /** Replaces a consumer that gave up, retrying until it is back or the reader stops. */
  private recover(): void {
    if (this.recovering || this.closed) return;
    this.recovering = true;
    void (async () => {
      let wait = 500;
      while (!this.closed) {
        try {
          await this.restart();
          break;
        } catch (e) {
          this.opts.onError("verdict reader restart", e);
          await new Promise((r) => setTimeout(r, wait));
          wait = Math.min(wait * 2, 5000);
        }
      }
      this.recovering = false;
    })();
  }

  /** Closes the consumer and starts a new one that goes on where the old one stopped. */
  async restart(): Promise<void> {
    await this.disconnect();
    this.restarts += 1;
    await this.start();
  }

  /** Stops reading for good. */
  async close(): Promise<void> {
    this.closed = true;
    await this.disconnect();
  }

  private async disconnect(): Promise<void> {
    this.running = false;
    const c = this.consumer;
    this.consumer = undefined;
    if (c !== undefined) {
      try {
        await c.disconnect();
      } catch (e) {
        this.opts.onError("verdict reader close", e);
      }
    }
  }
}
