// The verdict reader on its own, against the real broker: a position the partition no
// longer has (a topic recreated, retention past it) is reported once and reading goes on
// from the partition's end, instead of failing every fetch.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import kafkajs from "kafkajs";
import { VerdictReader } from "../src/reader.js";

const brokers = [process.env.KAFKA_BOOTSTRAP_SERVERS ?? "127.0.0.1:19092"];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("a position out of range goes on from the partition's end", { timeout: 60_000 }, async () => {
  const kafka = new kafkajs.Kafka({ clientId: "reader-test", brokers, logLevel: kafkajs.logLevel.NOTHING });
  const topic = `reader-test-${randomUUID().slice(0, 8)}`;
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true });
  const producer = kafka.producer();
  await producer.connect();
  const got: string[] = [];
  const errors: string[] = [];
  const reader = new VerdictReader(kafka, {
    topic,
    readUncommitted: true,
    startOffsets: new Map([[0, "1000"]]), // past the end of an empty partition
    onRecord: ({ message }) => got.push(message.value?.toString() ?? ""),
    onError: (_, e) => errors.push(String(e)),
  });
  try {
    await reader.start();
    reader.want(0);
    for (let i = 0; i < 100 && !errors.some((e) => /out of range/.test(e)); i++) await sleep(50);
    assert.ok(errors.some((e) => /position out of range, reading on from its end \(0\)/.test(e)), JSON.stringify(errors));
    await producer.send({ topic, messages: [{ value: "after" }] });
    for (let i = 0; i < 100 && got.length === 0; i++) await sleep(50);
    assert.deepEqual(got, ["after"]);
  } finally {
    await reader.close();
    await producer.disconnect();
    await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
    await admin.disconnect();
  }
});
