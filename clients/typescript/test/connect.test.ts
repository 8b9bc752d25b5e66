/** A `Guard` connected before the guard's topics are usable resolves at once: tool calls are
 * answered fail-open at once (not at their deadline) and counted, what sessions publish is
 * kept and sent in order once the topics are there, the problem is said once through
 * `onError`, and `ready()` rejects with `GuardError` naming it for callers that fail fast. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { randomUUID } from "node:crypto";
import { createServer, type AddressInfo, type Socket } from "node:net";
import kafkajs from "kafkajs";
import { Guard, GuardError, partitionFor, registerLz4 } from "../src/index.js";
import { VerdictReader } from "../src/reader.js";
import { GuardProcess, PARTITIONS } from "./harness.js";

const WAIT = 10_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const sid = (prefix: string) => `${prefix}-${randomUUID().slice(0, 12)}`;

async function topicsGone(g: GuardProcess): Promise<void> {
  await g.deleteTopics();
  const admin = new kafkajs.Kafka({ brokers: [g.bootstrap], logLevel: kafkajs.logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    for (let i = 0; i < 150 && (await admin.listTopics()).includes(g.eventsTopic); i++) await sleep(200);
  } finally {
    await admin.disconnect();
  }
}

/** (seq, type) of the session's events, in the order its partition holds them (read with
 * the client's own group-less reader). */
async function eventsOf(g: GuardProcess, sessionId: string): Promise<[number, string][]> {
  registerLz4();
  const kafka = new kafkajs.Kafka({ brokers: [g.bootstrap], logLevel: kafkajs.logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const partition = partitionFor(sessionId, PARTITIONS);
  const high = Number((await admin.fetchTopicOffsets(g.eventsTopic)).find((p) => p.partition === partition)?.high ?? 0);
  await admin.disconnect();
  const out: [number, string][] = [];
  let done: () => void = () => undefined;
  const finished = new Promise<void>((r) => (done = r));
  const reader = new VerdictReader(kafka, {
    topic: g.eventsTopic,
    readUncommitted: true,
    startOffsets: new Map([[partition, "0"]]),
    onRecord: ({ message }) => {
      if (message.key?.toString() === sessionId) {
        const e = JSON.parse(message.value?.toString() ?? "{}");
        out.push([e.seq, e.type]);
      }
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

test("a guard connected before its topics fails open at once and sends its backlog in order", { timeout: 120_000 }, async () => {
  const g = await GuardProcess.create();
  await topicsGone(g);
  const errors: [string, unknown][] = [];
  const started = performance.now();
  const client = await Guard.connect({ brokers: [g.bootstrap], eventsTopic: g.eventsTopic, verdictsTopic: g.verdictsTopic, onError: (w, e) => errors.push([w, e]) });
  try {
    // The broker answers at once that the topics are missing: no wait for connectWaitMs.
    assert.ok(performance.now() - started < 500, `${performance.now() - started} ms`);
    assert.equal(client.connected, false);
    await assert.rejects(client.ready(300), (e: unknown) => e instanceof GuardError && e.message.includes(`topic \`${g.eventsTopic}\` does not exist`));
    const s = client.session(sid("early"));
    await s.userMessage("The build is broken, fix it.");
    for (let i = 0; i < 2; i++) {
      const called = performance.now();
      assert.equal(await s.toolCall("bash", { cmd: "cargo build --locked" }, { deadlineMs: WAIT }), null);
      assert.ok(performance.now() - called < 50, `${performance.now() - called} ms`); // at once, not at its deadline
      await s.toolResult("bash", { status: "error", error: "linker `cc` not found" });
      await s.turnEnd();
    }
    let st = client.stats();
    assert.equal(st.toolCallsNotConnected, 2);
    assert.equal(st.toolCallDeadlines, 0);
    // Said once, by name, however many attempts it took.
    await sleep(1500);
    assert.equal(errors.length, 1, String(errors));
    assert.equal(errors[0][0], "connect");
    assert.ok(String(errors[0][1]).includes(g.eventsTopic));

    g.createTopics();
    await g.start();
    await client.ready(30_000);
    assert.equal(client.connected, true);
    // The backlog reached the guard in order, so the third identical call is the loop's.
    const v = await s.toolCall("bash", { cmd: "cargo build --locked" }, { deadlineMs: WAIT });
    assert.equal(v?.action, "block", JSON.stringify(client.stats()));
    assert.equal(v?.rule, "tool.exact_repeat");
    assert.equal(v?.evidence.count, 3);
    const seen = await eventsOf(g, s.sessionId);
    assert.deepEqual(
      seen.map(([seq]) => seq),
      [1, 2, 3, 4, 5, 6, 7, 8],
      JSON.stringify(seen),
    );
    assert.deepEqual(
      seen.slice(0, 4).map(([, t]) => t),
      ["user_message", "tool_call", "tool_result", "turn_end"],
    );
    // From here on a call is answered as any other: by the guard, well within the deadline.
    const h = client.session(sid("later"));
    await h.userMessage("Read the modules.");
    const called = performance.now();
    assert.equal(await h.toolCall("read_file", { path: "src/a.ts" }, { deadlineMs: WAIT }), null);
    assert.ok(performance.now() - called < WAIT / 2);
    st = client.stats();
    assert.equal(st.toolCallsNotConnected, 2);
    assert.equal(st.toolCallDeadlines, 0);
    assert.equal(st.eventsFailed, 0);
    assert.ok(st.toolCallsNoVerdict >= 1, JSON.stringify(st));
  } finally {
    await client.close();
    await g.stop();
    await g.deleteTopics();
  }
});

test("topics of different partition counts are said once and ready() names them", async () => {
  const g = await GuardProcess.create();
  const admin = new kafkajs.Kafka({ brokers: [g.bootstrap], logLevel: kafkajs.logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    await admin.deleteTopics({ topics: [g.verdictsTopic] });
    for (let i = 0; i < 150 && (await admin.listTopics()).includes(g.verdictsTopic); i++) await sleep(200);
    await admin.createTopics({ topics: [{ topic: g.verdictsTopic, numPartitions: 3 }], waitForLeaders: true });
    const errors: string[] = [];
    const started = performance.now();
    const client = await Guard.connect({ brokers: [g.bootstrap], eventsTopic: g.eventsTopic, verdictsTopic: g.verdictsTopic, onError: (w, e) => errors.push(`${w}: ${String(e)}`) });
    try {
      assert.ok(performance.now() - started < 500);
      await assert.rejects(client.ready(300), (e: unknown) => e instanceof GuardError && new RegExp(`has ${PARTITIONS} partitions and .* 3`).test(e.message));
      const s = client.session(sid("mismatch"));
      const called = performance.now();
      assert.equal(await s.toolCall("bash", { cmd: "ls" }, { deadlineMs: WAIT }), null);
      assert.ok(performance.now() - called < 50);
      assert.equal(client.connected, false);
    } finally {
      await client.close();
    }
    assert.equal(errors.length, 1, String(errors));
    assert.match(errors[0], /same count/);
  } finally {
    await admin.disconnect();
    await g.deleteTopics();
  }
});

test("the backlog is bounded and its overflow said once", async () => {
  const errors: string[] = [];
  // Nothing listens on port 1: refused at once.
  const client = await Guard.connect({ brokers: ["127.0.0.1:1"], backlogCapacity: 5, onError: (w) => errors.push(w) });
  const s = client.session(sid("overflow"));
  for (let i = 0; i < 8; i++) await s.content(`chunk ${i}`);
  assert.equal(client.stats().eventsOverflowed, 3);
  assert.equal(errors.filter((w) => w === "backlog").length, 1, String(errors));
  const started = performance.now();
  await client.close();
  assert.ok(performance.now() - started < 1000);
  assert.equal(client.stats().eventsFailed, 5); // never sent, counted at close
});

test("a broker that takes connections and never answers costs connect() connectWaitMs and close() nothing", async () => {
  const accepted: Socket[] = [];
  const silent = createServer((s) => accepted.push(s));
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
  const { port } = silent.address() as AddressInfo;
  const errors: [number, string][] = [];
  const started = performance.now();
  const client = await Guard.connect({ brokers: [`127.0.0.1:${port}`], connectWaitMs: 300, onError: (w, e) => errors.push([performance.now() - started, `${w}: ${String(e)}`]) });
  try {
    const made = performance.now() - started;
    assert.ok(made >= 280 && made < 800, `${made} ms`);
    const s = client.session(sid("silent"));
    const called = performance.now();
    assert.equal(await s.toolCall("bash", { cmd: "ls" }, { deadlineMs: WAIT }), null);
    assert.ok(performance.now() - called < 50);
    // Said once the first question runs out (2 s), naming the address.
    for (let i = 0; i < 50 && errors.length === 0; i++) await sleep(100);
    assert.equal(errors.length, 1, JSON.stringify(errors));
    assert.match(errors[0][1], new RegExp(`^connect: GuardError: cannot reach Kafka at 127.0.0.1:${port}`));
  } finally {
    const closing = performance.now();
    await client.close();
    assert.ok(performance.now() - closing < 500, `${performance.now() - closing} ms`);
    for (const s of accepted) s.destroy();
    silent.close();
  }
});
