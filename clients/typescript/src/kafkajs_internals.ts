/**
 * The two kafkajs internals the verdict reader uses, in one place: the client's cluster
 * factory (its connections, with the same brokers, TLS, SASL, socket factory and logger as
 * the `Kafka` object) and `Batch` (its record filtering: aborted transactions and control
 * records). kafkajs is pinned to 2.2.x (`~2.2.4`), whose last release was in 2023; both are
 * checked at start-up, so a kafkajs without them fails `Guard.connect()` with a clear error
 * rather than a wrong reading.
 */
import { createRequire } from "node:module";
import type { Kafka, KafkaMessage } from "kafkajs";

const require = createRequire(import.meta.url);

/** One partition of a fetch answer, as kafkajs decodes it. */
export interface FetchedPartition {
  partition: number;
  errorCode?: number;
  highWatermark: string;
  abortedTransactions?: unknown[];
  messages: KafkaMessage[];
}

interface FetchBroker {
  fetch(request: {
    replicaId: number;
    isolationLevel: number;
    maxWaitTime: number;
    minBytes: number;
    maxBytes: number;
    topics: { topic: string; partitions: { partition: number; fetchOffset: string; maxBytes: number }[] }[];
  }): Promise<{ responses: { topicName: string; partitions: FetchedPartition[] }[] }>;
}

/** The part of kafkajs's `Cluster` the reader uses. */
export interface FetchCluster {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  addTargetTopic(topic: string): Promise<void>;
  refreshMetadata(): Promise<void>;
  findTopicPartitionMetadata(topic: string): { partitionId: number; leader: number }[];
  findBroker(node: { nodeId: number }): Promise<FetchBroker>;
  fetchTopicsOffset(
    topics: { topic: string; partitions: { partition: number }[]; fromBeginning: boolean }[],
  ): Promise<{ topic: string; partitions: { partition: number; offset: string }[] }[]>;
}

interface BatchOf {
  messagesWithinOffset: KafkaMessage[];
  messages: KafkaMessage[];
}

/** kafkajs's `Batch`: a partition's answer without what a consumer must not see. */
export const Batch: new (topic: string, fetchedOffset: string, data: FetchedPartition) => BatchOf = require("kafkajs/src/consumer/batch.js");

/** A new cluster (its own connections) of `kafka`'s configuration. */
export function createCluster(kafka: Kafka, isolationLevel: number): FetchCluster {
  const key = Object.getOwnPropertySymbols(kafka).find((s) => s.description === "private:Kafka:createCluster");
  const make = key === undefined ? undefined : (kafka as unknown as Record<symbol, unknown>)[key];
  if (typeof make !== "function" || typeof Batch !== "function")
    throw new Error("this kafkajs has no cluster factory or Batch where 2.2.x has them: install kafkajs ~2.2.4");
  return make({ allowAutoTopicCreation: false, isolationLevel }) as FetchCluster;
}
