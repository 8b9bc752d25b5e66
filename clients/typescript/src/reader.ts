/**
 * The verdict reader: a fetch loop of its own, with no consumer group, reading the
 * partitions this process's sessions are on, each from where it ended when the process
 * started.
 *
 * Why not a kafkajs consumer: kafkajs can read only through a group. Joining one took
 * `group.initial.rebalance.delay.ms` (3 s at Kafka's default, and on the demo's broker), a
 * heartbeat every few seconds was awaited between two records (a healthy call's tail), and
 * a partition resumed while a fetch waited was read only when it returned. This loop
 * fetches with kafkajs's own connections and record decoding (its cluster and `Batch`,
 * which drops aborted and control records), and sends a partition new to the process
 * through a second connection when the first has a fetch in flight, so it is read at once.
 * kafkajs is pinned (`~2.2.4`); the internals used are named in `kafkajs_internals.ts`.
 */
import type { EachMessagePayload, Kafka } from "kafkajs";
import { Batch, createCluster, type FetchCluster, type FetchedPartition } from "./kafkajs_internals.js";

/** The broker's long poll: it answers as soon as a record (or, for read_committed, the
 * commit that makes one visible) arrives, else after this wait (an idle reader: 2 fetches a
 * second). */
export const FETCH_WAIT_MS = 500;
/** The most one fetch asks for per partition. */
const PARTITION_MAX_BYTES = 1 << 20;

export interface ReaderOptions {
  topic: string;
  readUncommitted: boolean;
  /** Where each partition ended at start-up: reading from there misses no verdict. */
  startOffsets: Map<number, string>;
  onRecord: (payload: EachMessagePayload) => void;
  onError: (where: string, e: unknown) => void;
}

/** One connection's fetch loop over the partitions it is given. */
class Lane {
  busy = false;
  stopped = false;
  wake: (() => void) | undefined;

  constructor(
    readonly cluster: FetchCluster,
    readonly name: string,
  ) {}
}

export class VerdictReader {
  /** Next offset to read per wanted partition (a restarted reader goes on from here). */
  private readonly position = new Map<number, bigint>();
  /** Wanted partitions the main lane has not fetched yet: the spare lane reads them. */
  private readonly joining = new Set<number>();
  private main: Lane | undefined;
  private spare: Lane | undefined;
  private closed = false;
  restarts = 0;
  /** Fetch requests sent so far. */
  fetches = 0;

  constructor(
    private readonly kafka: Kafka,
    private readonly opts: ReaderOptions,
  ) {}

  /** Connects both lanes to the topic's leaders; nothing is fetched yet. On a failure,
   * what was connected is disconnected again (the caller may try again). */
  async start(): Promise<void> {
    const isolationLevel = this.opts.readUncommitted ? 0 : 1;
    const clusters = ["main", "spare"].map(() => createCluster(this.kafka, isolationLevel));
    const made = await Promise.allSettled(
      clusters.map(async (cluster, i) => {
        await cluster.connect();
        await cluster.addTargetTopic(this.opts.topic);
        // Connected to every leader now, not in the first call's fetch.
        const leaders = new Set(cluster.findTopicPartitionMetadata(this.opts.topic).map((m) => m.leader));
        await Promise.all([...leaders].map((nodeId) => cluster.findBroker({ nodeId })));
        return new Lane(cluster, i === 0 ? "main" : "spare");
      }),
    );
    const failed = made.find((m): m is PromiseRejectedResult => m.status === "rejected");
    if (failed !== undefined) {
      await Promise.all(clusters.map((c) => c.disconnect().catch(() => undefined)));
      throw failed.reason;
    }
    const lanes = made.map((m) => (m as PromiseFulfilledResult<Lane>).value);
    [this.main, this.spare] = lanes;
    for (const lane of lanes) void this.run(lane);
  }

  /** Asks for `partition` to be read; cheap when it already is. */
  want(partition: number): void {
    if (this.position.has(partition)) return;
    const start = this.opts.startOffsets.get(partition);
    this.position.set(partition, start !== undefined ? BigInt(start) : 0n);
    // The main lane takes it at its next fetch; until then, when that fetch is waiting,
    // the spare reads it at once.
    this.joining.add(partition);
    this.main?.wake?.();
    this.spare?.wake?.();
  }

  partitions(): number[] {
    return [...this.position.keys()].sort((a, b) => a - b);
  }

  /** Closes both connections and opens new ones that go on where the old ones stopped. */
  async restart(): Promise<void> {
    await this.disconnect();
    this.restarts += 1;
    for (const p of this.position.keys()) this.joining.add(p);
    await this.start();
  }

  /** Stops reading for good. */
  async close(): Promise<void> {
    this.closed = true;
    await this.disconnect();
  }

  private async disconnect(): Promise<void> {
    const lanes = [this.main, this.spare].filter((l): l is Lane => l !== undefined);
    this.main = this.spare = undefined;
    for (const lane of lanes) {
      lane.stopped = true;
      lane.wake?.();
    }
    await Promise.all(lanes.map((l) => l.cluster.disconnect().catch((e) => this.opts.onError("verdict reader close", e))));
  }

  /** What `lane` fetches now: the main lane every wanted partition (taking over the joining
   * ones), the spare only those still joining while the main lane is waiting on a fetch. */
  private share(lane: Lane): number[] {
    if (lane === this.main) {
      this.joining.clear();
      return [...this.position.keys()];
    }
    return this.main?.busy ? [...this.joining] : [];
  }

  private async run(lane: Lane): Promise<void> {
    let backoff = 100;
    while (!lane.stopped && !this.closed) {
      const partitions = this.share(lane);
      if (partitions.length === 0) {
        await new Promise<void>((resolve) => (lane.wake = resolve));
        lane.wake = undefined;
        continue;
      }
      lane.busy = true;
      try {
        await this.fetchOnce(lane, partitions);
        backoff = 100;
      } catch (e) {
        if (lane.stopped || this.closed) break;
        if (await this.outOfRange(lane, e)) continue;
        this.opts.onError("verdict reader", e);
        await new Promise((r) => setTimeout(r, backoff));
        backoff = Math.min(backoff * 2, 5000);
        await lane.cluster.refreshMetadata().catch(() => undefined);
      } finally {
        lane.busy = false;
      }
      if (lane === this.main) this.spare?.wake?.();
    }
  }

  /** A partition's position is gone (the topic was recreated, or retention passed it):
   * it goes on from the partition's end, as a reader started now would. */
  private async outOfRange(lane: Lane, e: unknown): Promise<boolean> {
    const err = e as { name?: string; partition?: number };
    if (err?.name !== "KafkaJSOffsetOutOfRange" || err.partition === undefined || !this.position.has(err.partition)) return false;
    const partition = err.partition;
    try {
      const [latest] = await lane.cluster.fetchTopicsOffset([{ topic: this.opts.topic, partitions: [{ partition }], fromBeginning: false }]);
      const end = latest?.partitions.find((p) => p.partition === partition)?.offset;
      if (end === undefined) return false;
      this.position.set(partition, BigInt(end));
      this.opts.onError("verdict reader", new Error(`partition ${partition}: position out of range, reading on from its end (${end})`));
      return true;
    } catch {
      return false;
    }
  }

  /** One fetch per leader of `partitions`, in parallel; hands on every new record. */
  private async fetchOnce(lane: Lane, partitions: number[]): Promise<void> {
    const topic = this.opts.topic;
    const byLeader = new Map<number, number[]>();
    const leaders = new Map(lane.cluster.findTopicPartitionMetadata(topic).map((m) => [m.partitionId, m.leader]));
    for (const p of partitions) {
      const leader = leaders.get(p);
      if (leader === undefined) throw new Error(`no leader known for ${topic} partition ${p}`);
      byLeader.set(leader, [...(byLeader.get(leader) ?? []), p]);
    }
    await Promise.all(
      [...byLeader].map(async ([nodeId, ps]) => {
        const broker = await lane.cluster.findBroker({ nodeId });
        const asked = new Map(ps.map((p) => [p, this.position.get(p) ?? 0n]));
        this.fetches += 1;
        const { responses } = await broker.fetch({
          replicaId: -1,
          isolationLevel: this.opts.readUncommitted ? 0 : 1,
          maxWaitTime: FETCH_WAIT_MS,
          minBytes: 1,
          maxBytes: PARTITION_MAX_BYTES * ps.length,
          topics: [{ topic, partitions: ps.map((p) => ({ partition: p, fetchOffset: String(asked.get(p)), maxBytes: PARTITION_MAX_BYTES })) }],
        });
        for (const { partitions: parts } of responses) for (const data of parts) this.deliver(data, asked.get(data.partition) ?? 0n);
      }),
    );
  }

  /** The records of one partition's answer not handed on yet (the other lane may have). */
  private deliver(data: FetchedPartition, fetchedFrom: bigint): void {
    if (data.errorCode !== undefined && data.errorCode !== 0) throw new Error(`fetch of partition ${data.partition}: error code ${data.errorCode}`);
    const batch = new Batch(this.opts.topic, String(fetchedFrom), data);
    const seen = batch.messagesWithinOffset;
    if (seen.length === 0) return;
    const next = BigInt(seen[seen.length - 1].offset) + 1n;
    const from = this.position.get(data.partition);
    if (from === undefined || next <= from) return; // read already, through the other lane
    this.position.set(data.partition, next);
    for (const message of batch.messages) {
      if (BigInt(message.offset) < from) continue;
      this.opts.onRecord({ topic: this.opts.topic, partition: data.partition, message, heartbeat: async () => undefined, pause: () => () => undefined });
    }
  }
}
