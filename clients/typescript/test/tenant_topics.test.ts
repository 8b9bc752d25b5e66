/** Topics per tenant on the real broker (KAFKA_BOOTSTRAP_SERVERS): a `Guard` given the guard's
 * templates (`eventsTopic: "...events.{tenant}"`, `verdictsTopic: "...verdicts.{tenant}"`) and
 * its tenant connects to its tenant's own topics and writes its events to its own events
 * topic, nothing to the shared one. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { randomUUID } from "node:crypto";
import kafkajs from "kafkajs";
import { Guard, partitionFor, registerLz4 } from "../src/index.js";
import { VerdictReader } from "../src/reader.js";
import { PARTITIONS } from "./harness.js";

const WAIT = 10_000;
const BOOTSTRAP = process.env.KAFKA_BOOTSTRAP_SERVERS ?? "127.0.0.1:19092";

/** (key, type, tenant) of every event of `topic`'s partition `partition`, in order. */
async function eventsIn(topic: string, partition: number): Promise<[string, string, string | undefined][]> {
  registerLz4();
  const kafka = new kafkajs.Kafka({ brokers: [BOOTSTRAP], logLevel: kafkajs.logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const high = Number((await admin.fetchTopicOffsets(topic)).find((p) => p.partition === partition)?.high ?? 0);
  await admin.disconnect();
  const out: [string, string, string | undefined][] = [];
  if (high === 0) return out;
  let done: () => void = () => undefined;
  const finished = new Promise<void>((r) => (done = r));
  const reader = new VerdictReader(kafka, {
    topic,
    readUncommitted: true,
    startOffsets: new Map([[partition, "0"]]),
    onRecord: ({ message }) => {
      const e = JSON.parse(message.value?.toString() ?? "{}");
      out.push([message.key?.toString() ?? "", e.type, e.tenant]);
      if (Number(message.offset) + 1 >= high) done();
    },
    onError: () => undefined,
  });
  await reader.start();
  reader.want(partition);
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([finished, new Promise((r) => (timer = setTimeout(r, WAIT)))]);
  clearTimeout(timer);
  await reader.close();
  return out;
}

test("a guard writes its events to its tenant's own topic", async () => {
  const name = `tenants-ts-${randomUUID().slice(0, 10)}`;
  const topics = [`${name}-events.acme`, `${name}-verdicts.acme`, `${name}-events`];
  const admin = new kafkajs.Kafka({ brokers: [BOOTSTRAP], logLevel: kafkajs.logLevel.NOTHING }).admin();
  await admin.connect();
  await admin.createTopics({ topics: topics.map((topic) => ({ topic, numPartitions: PARTITIONS, replicationFactor: 1 })), waitForLeaders: true });
  try {
    const g = await Guard.connect({
      brokers: [BOOTSTRAP],
      tenant: "acme",
      eventsTopic: `${name}-events.{tenant}`,
      verdictsTopic: `${name}-verdicts.{tenant}`,
    });
    const session = "s-tenant";
    try {
      assert.equal(g.eventsTopic, `${name}-events.acme`);
      assert.equal(g.verdictsTopic, `${name}-verdicts.acme`);
      await g.ready(WAIT);
      const s = g.session(session);
      await s.userMessage("hello");
      await s.turnEnd();
    } finally {
      await g.close();
    }
    const p = partitionFor(session, PARTITIONS);
    assert.deepEqual(await eventsIn(`${name}-events.acme`, p), [
      [session, "user_message", "acme"],
      [session, "turn_end", "acme"],
    ]);
    for (let q = 0; q < PARTITIONS; q++) assert.deepEqual(await eventsIn(`${name}-events`, q), [], "nothing on the shared topic");
  } finally {
    await admin.deleteTopics({ topics }).catch(() => undefined);
    await admin.disconnect();
  }
});
