/** The TypeScript client against a real broker and a real `loopguard serve`. */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { randomUUID } from "node:crypto";
import kafkajs from "kafkajs";
import { Guard, ValidationError, evidence, outputHash, parseVerdict, registerLz4, type Session, type Verdict } from "../src/index.js";
import { GuardProcess, PARTITIONS } from "./harness.js";

const WAIT = 10_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const sid = (prefix: string) => `${prefix}-${randomUUID().slice(0, 12)}`;
let g: GuardProcess;

before(async () => {
  g = await GuardProcess.create();
  await g.start();
});
after(async () => {
  await g?.stop();
  await g?.deleteTopics();
});

async function connect(extra: Partial<Parameters<typeof Guard.connect>[0]> = {}): Promise<Guard> {
  return Guard.connect({ brokers: [g.bootstrap], eventsTopic: g.eventsTopic, verdictsTopic: g.verdictsTopic, tenant: "acme", agent: "coder", model: "m-test", ...extra });
}

/** One round of the looping agent: the same call, its result, the end of the turn. */
async function loopRound(s: Session, deadlineMs = 0): Promise<Verdict | null> {
  const v = await s.toolCall("bash", { cmd: "cargo build --locked" }, { deadlineMs });
  if (v === null) await s.toolResult("bash", { status: "error", error: "linker `cc` not found", evidence: evidence.observed("cc not found") });
  await s.turnEnd();
  return v;
}

test("a looping agent is blocked on the third identical call", async () => {
  const guard = await connect();
  try {
    const s = guard.session(sid("loop"));
    await s.userMessage("The build is broken, fix it.", { limits: { maxToolRounds: 15 } });
    assert.equal(await loopRound(s, 300), null);
    assert.equal(await loopRound(s, 300), null);
    const v = await loopRound(s, WAIT);
    assert.ok(v, `no verdict; stats ${JSON.stringify(guard.stats())}`);
    assert.equal(v.action, "block");
    assert.equal(v.rule, "tool.exact_repeat");
    assert.equal(v.directives.stopToolCalls, true);
    assert.deepEqual([v.tenant, v.agent, v.model], ["acme", "coder", "m-test"]);
    assert.equal(v.evidence.count, 3);
    assert.deepEqual(s.verdicts.map((x) => x.verdictId), [v.verdictId]);
    assert.equal(guard.stats().backgroundErrors, 0);
  } finally {
    await guard.close();
  }
});

/** `loopguard_verdict_feedback_total` of `rule` judged `useful`, summed, from the guard's metrics. */
async function feedbackCount(rule: string, useful: boolean): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${g.adminPort}/metrics`)).text();
  return text
    .split("\n")
    .filter((l) => l.startsWith("loopguard_verdict_feedback_total{") && l.includes(`rule="${rule}"`) && l.includes(`useful="${useful}"`))
    .reduce((sum, l) => sum + Number(l.split(" ").pop()), 0);
}

test("feedback on a verdict reaches the precision metric", async () => {
  const guard = await connect();
  try {
    const s = guard.session(sid("feedback"));
    await s.userMessage("The build is broken, fix it.");
    await loopRound(s, 300);
    await loopRound(s, 300);
    const v = await loopRound(s, WAIT);
    assert.ok(v && v.rule === "tool.exact_repeat");
    const before = await feedbackCount(v.rule, true);
    await s.feedback(v.verdictId, true, { note: "it was looping" });
    const deadline = Date.now() + WAIT;
    while ((await feedbackCount(v.rule, true)) < before + 1 && Date.now() < deadline) await sleep(200);
    assert.equal(await feedbackCount(v.rule, true), before + 1);
    await assert.rejects(s.feedback("", false), (e: unknown) => e instanceof ValidationError && e.field === "verdict_id");
  } finally {
    await guard.close();
  }
});

/** `n` distinct reads, each timed: what a healthy call costs the agent (ms). */
async function healthyCalls(s: Session, n: number, deadlineMs: number): Promise<number[]> {
  const costs: number[] = [];
  for (let i = 0; i < n; i++) {
    const started = performance.now();
    const v = await s.toolCall("read_file", { path: `src/module_${i}.ts` }, { deadlineMs });
    costs.push(performance.now() - started);
    assert.equal(v, null);
    await s.toolResult("read_file");
    await s.turnEnd();
  }
  return costs;
}

for (const readUncommitted of [false, true]) {
  test(`a healthy call returns null as soon as a marker covers it (${readUncommitted ? "read_uncommitted" : "read_committed"})`, async () => {
    const guard = await connect({ readUncommitted });
    try {
      const s = guard.session(sid("healthy"));
      await s.userMessage("Read the modules.");
      await healthyCalls(s, 2, WAIT); // warm: the first call on a partition resumes it
      const costs = (await healthyCalls(s, 10, WAIT)).sort((a, b) => a - b);
      const stats = guard.stats();
      assert.equal(stats.toolCallDeadlines, 0, JSON.stringify(stats));
      assert.equal(stats.toolCallsNoVerdict, 12, JSON.stringify(stats));
      // Far below the deadline; the guard commits every 20 ms in these tests.
      assert.ok(costs[5] < 1000 && costs[9] < WAIT / 2, `costs ${costs.map((c) => c.toFixed(1))}`);
    } finally {
      await guard.close();
    }
  });
}

test("observe-mode verdicts are delivered apart and never block a call", async () => {
  // The test guard's config puts tenant `observer` in observe mode (harness.ts).
  const guard = await connect({ tenant: "observer" });
  try {
    const seen: Verdict[] = [];
    const s = guard.session(sid("observe"), { onObserved: (v) => seen.push(v) });
    const streamed: Verdict[] = [];
    s.onVerdict((v) => streamed.push(v));
    await s.userMessage("The build is broken, fix it.");
    const started = Date.now();
    // Each identical call is answered null by a judged-through marker, the third included:
    // tool.exact_repeat's block is only observed.
    for (let i = 0; i < 3; i++) assert.equal(await loopRound(s, WAIT), null);
    assert.ok(Date.now() - started < 3 * WAIT);
    for (const until = Date.now() + WAIT; s.observed.length === 0 && Date.now() < until; ) await sleep(50);
    assert.deepEqual(s.observed.map((v) => [v.rule, v.action, v.enforce]), [["tool.exact_repeat", "block", false]]);
    assert.ok(s.observed[0].policyVersion?.startsWith("sha256:"));
    assert.deepEqual(seen, s.observed);
    assert.deepEqual([s.verdicts.length, streamed.length], [0, 0]);
    const stats = guard.stats();
    assert.deepEqual([stats.verdictsObserved, stats.verdictsDelivered, stats.toolCallDeadlines, stats.toolCallsNoVerdict], [1, 0, 0, 3]);
  } finally {
    await guard.close();
  }
});

test("markers never answer null for a call that gets a verdict", async () => {
  const guard = await connect();
  try {
    const sessions = Array.from({ length: 6 }, (_, i) => guard.session(sid(`many-${i}`)));
    for (const s of sessions) await s.userMessage("The build is broken, fix it.");
    for (const n of [1, 2, 3])
      for (const s of sessions) {
        const v = await loopRound(s, WAIT);
        if (n < 3) assert.equal(v, null);
        else assert.equal(v?.action, "block", `${s.sessionId}: ${JSON.stringify(guard.stats())}`);
      }
    const stats = guard.stats();
    assert.equal(stats.toolCallDeadlines, 0, JSON.stringify(stats));
    assert.equal(stats.toolCallsNoVerdict, 12, JSON.stringify(stats));
  } finally {
    await guard.close();
  }
});

test("streamed reasoning is steered before the turn ends (async iterator)", async () => {
  const guard = await connect();
  try {
    const s = guard.session(sid("reason"));
    await s.userMessage("Why does the test fail?");
    const stop = new AbortController();
    const first = (async () => {
      for await (const v of s.stream(stop.signal)) return v;
      return null;
    })();
    let steer: Verdict | null = null;
    first.then((v) => (steer = v));
    for (let i = 0; i < 40 && steer === null; i++) {
      await s.reasoning("Let me re-check whether the fixture path is right before running it. ");
      await sleep(50);
    }
    const v = await Promise.race([first, sleep(WAIT).then(() => null)]);
    stop.abort();
    assert.ok(v, "no verdict while streaming");
    assert.equal(v.action, "steer");
    assert.match(v.rule, /^reasoning\./);
    assert.equal(v.turnId, "t1");
    await s.turnEnd(); // only now: the steer came while the turn streamed
  } finally {
    await guard.close();
  }
});

test("a stopped guard makes toolCall fail open after the deadline", async () => {
  const guard = await connect();
  try {
    const s = guard.session(sid("down"));
    await s.userMessage("anything");
    await g.stop();
    try {
      for (const deadline of [200, 500]) {
        const started = Date.now();
        for (let i = 0; i < 3; i++) assert.equal(await s.toolCall("bash", { cmd: "make" }, { deadlineMs: deadline }), null);
        const perCall = (Date.now() - started) / 3;
        assert.ok(perCall >= deadline - 5 && perCall < deadline + 150, `per call ${perCall} ms`);
      }
      assert.ok(guard.stats().toolCallDeadlines >= 6);
    } finally {
      await g.start();
    }
    // The guard comes back and judges what was published while it was away.
    for (const until = Date.now() + WAIT; Date.now() < until && s.verdicts.length === 0; ) await sleep(50);
    assert.ok(s.verdicts.length > 0, "no verdict after the restart");
  } finally {
    await guard.close();
  }
});

/** Session ids kafkajs's default partitioner puts on partition 0, so the two processes
 * below really share a verdict partition. */
function samePartitionSessions(prefix: string, count: number): string[] {
  const partitioner = kafkajs.Partitioners.DefaultPartitioner();
  const meta = Array.from({ length: PARTITIONS }, (_, i) => ({ partitionId: i, leader: 0, replicas: [0], isr: [0], partitionErrorCode: 0 }));
  const out: string[] = [];
  for (let i = 0; out.length < count; i++) {
    const key = `${prefix}-${i}`;
    if (partitioner({ topic: "t", partitionMetadata: meta, message: { key, value: null } }) === 0) out.push(key);
  }
  return out;
}

test("two processes each see only their own verdicts", async () => {
  const run = randomUUID().slice(0, 8);
  const barrier = mkdtempSync(join(tmpdir(), "lg-two-"));
  const script = join(import.meta.dirname, "agent_process.js");
  const children = ["a", "b"].map((name) => {
    const sessions = samePartitionSessions(`two-${run}-${name}`, 3);
    const out = promisify(execFile)(process.execPath, [script, g.bootstrap, g.eventsTopic, g.verdictsTopic, barrier, name, ...sessions], { timeout: 120_000 });
    return { name, sessions, out };
  });
  for (const { name, sessions, out } of children) {
    const { stdout } = await out;
    const report = JSON.parse(stdout.trim().split("\n").pop() as string);
    assert.deepEqual(report.verdictSessions, [...sessions].sort(), name);
    assert.deepEqual(report.partitions, [0]);
    assert.equal(report.blocks, sessions.length);
    assert.ok(report.stats.verdictsOtherSessions >= 1, "the other process's verdicts were on the partition");
    assert.equal(report.stats.backgroundErrors, 0);
  }
});

test("a reader restart does not deliver a verdict twice", async () => {
  const guard = await connect();
  try {
    const s = guard.session(sid("restart"));
    const delivered: Verdict[] = [];
    const s2 = guard.session(sid("restart-cb"), { onVerdict: (v) => delivered.push(v) });
    await s.userMessage("go");
    await loopRound(s);
    await loopRound(s);
    const first = await loopRound(s, WAIT);
    assert.ok(first);
    await guard.restartReader();
    // The same verdict written again (the guard does so after a crash in at-least-once
    // mode): same key, same bytes, a later offset. Read it raw, write it back.
    registerLz4();
    const kafka = new kafkajs.Kafka({ brokers: [g.bootstrap], logLevel: kafkajs.logLevel.NOTHING });
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({
      topic: g.verdictsTopic,
      messages: [{ key: first.sessionId, value: JSON.stringify(rawOf(first)), partition: first.partition }],
    });
    await producer.disconnect();
    await s2.userMessage("go");
    await loopRound(s2);
    await loopRound(s2);
    await loopRound(s2, WAIT);
    for (const until = Date.now() + WAIT; Date.now() < until && delivered.length === 0; ) await sleep(50);
    assert.equal(delivered.length, 1);
    for (const until = Date.now() + WAIT; Date.now() < until && guard.stats().verdictsDuplicate === 0; ) await sleep(50);
    assert.deepEqual(s.verdicts.map((v) => v.verdictId), [first.verdictId]);
    const st = guard.stats();
    assert.equal(st.readerRestarts, 1);
    assert.ok(st.verdictsDuplicate >= 1, JSON.stringify(st));
  } finally {
    await guard.close();
  }
});

/** The wire form of a parsed verdict (the fields a duplicate needs). */
function rawOf(v: Verdict): Record<string, unknown> {
  return { v: 1, verdict_id: v.verdictId, session_id: v.sessionId, event_id: v.eventId, ts: v.ts, action: v.action, rule: v.rule, message: v.message, attempt: v.attempt, evidence: v.evidence };
}

test("callbacks that throw are counted, never thrown", async () => {
  const errors: string[] = [];
  const guard = await connect({ onError: (where) => errors.push(where) });
  try {
    const s = guard.session(sid("boom"), {
      onVerdict: () => {
        throw new Error("runtime bug");
      },
    });
    await s.userMessage("x");
    await loopRound(s);
    await loopRound(s);
    const v = await loopRound(s, WAIT);
    assert.equal(v?.action, "block");
    for (const until = Date.now() + WAIT; Date.now() < until && errors.length === 0; ) await sleep(10);
    assert.equal(guard.stats().callbackErrors, 1);
    assert.deepEqual(errors, ["onVerdict callback"]);
  } finally {
    await guard.close();
  }
});

test("invalid events throw naming the field", async () => {
  const guard = await connect();
  try {
    const cases: [() => Promise<unknown>, string][] = [
      [() => guard.session("x".repeat(257)).userMessage("hi"), "session_id"],
      [() => guard.session("ok").toolCall("", {}, { deadlineMs: 0 }), "tool"],
      [() => guard.session("ok").toolCall("bash", {}, { callId: "c".repeat(300), deadlineMs: 0 }), "call_id"],
      [() => guard.session("ok").toolCall("bash", { n: 1n }, { deadlineMs: 0 }), "args"],
      [() => guard.session("ok").reasoning("r", { turnId: "t".repeat(257) }), "turn_id"],
      [() => guard.session("ok").toolResult("bash", { status: "fine" as "ok", callId: "c1" }), "status"],
      [() => guard.session("ok").toolResult("bash", { callId: "c1", evidence: { resource: "r".repeat(1025) } }), "evidence.resource"],
      [() => guard.session("ok").toolResult("bash", { callId: "c1", evidence: { readRange: [5, 1] } }), "evidence.read_range"],
      [() => guard.session("ok").userMessage("hi", { limits: { maxToolRounds: 0 } }), "limits.max_tool_rounds"],
      [() => guard.session("ok", { tenant: "t".repeat(300) }).userMessage("hi"), "tenant"],
      [() => guard.session("ok").content("x".repeat(1_100_000)), "text"],
      [() => guard.session("ok").turnEnd({ usage: { inputTokens: -1 } }), "usage.input_tokens"],
      [() => guard.session("ok").assistantMessage("a", { usage: { outputTokens: 1.5 } }), "usage.output_tokens"],
      [() => guard.session("ok").turnEnd({ usage: { cost: Number.POSITIVE_INFINITY } }), "usage.cost"],
    ];
    for (const [call, field] of cases) {
      await assert.rejects(call, (e: unknown) => e instanceof ValidationError && e.field === field, field);
    }
    assert.equal(guard.stats().eventsSent, 0);
  } finally {
    await guard.close();
  }
});

test("verdicts expose enforce, policy_version and loop_cost; enforce is true when absent", () => {
  const wire = { v: 1, verdict_id: "0".repeat(32), session_id: "s", event_id: "e", ts: "2026-01-01T00:00:00.000Z",
    action: "warn", rule: "progress.no_progress", message: "m", attempt: 1, evidence: {} };
  const old = parseVerdict(wire, 0, "0", 0);
  assert.equal(old.enforce, true);
  assert.equal(old.policyVersion, undefined);
  const v = parseVerdict({ ...wire, enforce: false, policy_version: "sha256:1863c331cf07", loop_cost: { tokens: 900, cost: 0.2 } }, 0, "0", 0);
  assert.equal(v.enforce, false);
  assert.equal(v.policyVersion, "sha256:1863c331cf07");
  assert.deepEqual(v.loopCost, { tokens: 900, seconds: undefined, cost: 0.2 });
  assert.throws(() => parseVerdict({ ...wire, enforce: "no" }, 0, "0", 0));
});

test("evidence helpers hash like the Python client", () => {
  // The same values as loopguard.output_hash in Python (sha256, canonical JSON, 16 hex).
  assert.equal(outputHash("cc not found"), outputHash(Buffer.from("cc not found")));
  assert.equal(outputHash({ b: 1, a: [1, "x"] }), outputHash({ a: [1, "x"], b: 1 }));
  const m = evidence.mutation("db.users", "v1", "v1");
  assert.equal(m.stateBefore, m.stateAfter);
});

test("event-to-verdict latency as the client sees it", async () => {
  // The blocking third call's wait, split at the verdict's `emitted_at` (the guard's clock,
  // same machine): up to the guard writing it, and after (commit, reader).
  const guard = await connect();
  const total: number[] = [];
  const before: number[] = [];
  const afterEmit: number[] = [];
  try {
    const n = Number(process.env.LOOPGUARD_LATENCY_SAMPLES ?? "60");
    for (let i = 0; i < n; i++) {
      const s = guard.session(sid(`lat${i}`));
      await s.userMessage("go");
      await loopRound(s);
      await loopRound(s);
      const wall = Date.now();
      const started = performance.now();
      const v = await s.toolCall("bash", { cmd: "cargo build --locked" }, { deadlineMs: WAIT });
      total.push(performance.now() - started);
      assert.equal(v?.action, "block");
      const emitted = Date.parse(v.emittedAt ?? "");
      before.push(emitted - wall);
      afterEmit.push(v.receivedAt - emitted);
      await s.sessionEnd();
    }
  } finally {
    await guard.close();
  }
  const pct = (xs: number[], q: number) => {
    const s = [...xs].sort((a, b) => a - b);
    return Math.round(s[Math.min(s.length - 1, Math.floor(s.length * q))] * 10) / 10;
  };
  const report = {
    client: "typescript",
    samples: total.length,
    p50_ms: pct(total, 0.5),
    p99_ms: pct(total, 0.99),
    to_emitted_p50_ms: pct(before, 0.5),
    to_emitted_p99_ms: pct(before, 0.99),
    after_emitted_p50_ms: pct(afterEmit, 0.5),
    after_emitted_p99_ms: pct(afterEmit, 0.99),
  };
  console.log(`event-to-verdict latency (typescript client): ${JSON.stringify(report)}`);
  if (process.env.LOOPGUARD_LATENCY_OUT) writeFileSync(process.env.LOOPGUARD_LATENCY_OUT, JSON.stringify(report) + "\n");
});
