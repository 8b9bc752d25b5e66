/** A broker restart under a running client: a private broker (scripts/kafka.sh on a free
 * port pair, the shared test broker is never touched) is stopped and started again on the
 * same data. While it is down, `toolCall` fails open after its deadline and nothing throws;
 * once it is back the same client carries on: a looping session is blocked again. */
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { connect, createServer } from "node:net";
import { join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { randomUUID } from "node:crypto";
import { Guard, GuardError, type Session } from "../src/index.js";
import { GuardProcess } from "./harness.js";

const REPO = resolve(import.meta.dirname, "../../../..");
const KAFKA_SH = join(REPO, "scripts", "kafka.sh");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function portFree(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const s = createServer();
    s.once("error", () => ok(false));
    s.listen(port, "127.0.0.1", () => s.close(() => ok(true)));
  });
}

function accepts(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const c = connect({ port, host: "127.0.0.1" });
    c.once("connect", () => {
      c.destroy();
      ok(true);
    });
    c.once("error", () => ok(false));
  });
}

// Below the kernel's ephemeral range (32768 and up): a port taken from it can be handed to
// some outgoing connection while the broker is down, and the broker could not bind it again.
async function portPair(): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const port = 20000 + Math.floor(Math.random() * 12000);
    if ((await portFree(port)) && (await portFree(port + 1))) return port;
  }
  throw new Error("no free port pair");
}

class Broker {
  private pid = 0;
  private argv: string[] = [];
  constructor(readonly port: number) {}
  get bootstrap(): string {
    return `127.0.0.1:${this.port}`;
  }
  private get run(): string {
    return join(REPO, "build", "kafka", `run-${this.port}`);
  }
  start(): void {
    execFileSync("bash", [KAFKA_SH, "start", String(this.port)], { stdio: ["ignore", "ignore", "pipe"], timeout: 180_000 });
    this.pid = Number(readFileSync(join(this.run, "kafka.pid"), "utf8"));
    // Its own command line, to start it again exactly as kafka.sh did.
    this.argv = readFileSync(`/proc/${this.pid}/cmdline`, "utf8").replace(/\0$/, "").split("\0");
  }
  async stop(): Promise<void> {
    process.kill(this.pid, "SIGTERM");
    for (let i = 0; i < 600 && existsSync(`/proc/${this.pid}`); i++) {
      if (/State:\tZ/.test(readFileSync(`/proc/${this.pid}/status`, "utf8"))) break;
      await sleep(100);
    }
  }
  async startAgain(): Promise<void> {
    const log = openSync(join(this.run, "stdout-restarted.log"), "w");
    const p = spawn(this.argv[0], this.argv.slice(1), { stdio: ["ignore", log, log], detached: true });
    p.unref();
    this.pid = p.pid as number;
    writeFileSync(join(this.run, "kafka.pid"), `${this.pid}\n`); // so kafka.sh stop finds it
    // Connect, never listen: a check that bound the port could take it from the broker.
    for (let i = 0; i < 900; i++) {
      if (await accepts(this.port)) return;
      await sleep(100);
    }
    throw new Error(`broker on ${this.port} did not come back`);
  }
  close(): void {
    execFileSync("bash", [KAFKA_SH, "stop", String(this.port)], { stdio: "ignore", timeout: 120_000 });
  }
}

let broker: Broker;
before(async () => {
  broker = new Broker(await portPair());
  broker.start();
});
after(() => broker?.close());

async function loopUntilBlocked(s: Session, tool: string): Promise<string | undefined> {
  let v = null;
  for (let n = 0; n < 3; n++) {
    v = await s.toolCall(tool, { n: 1 }, { deadlineMs: n === 2 ? 15_000 : 0 });
    await s.turnEnd();
  }
  return v?.action;
}

test("the client fails open while the broker is down and carries on after", { timeout: 400_000 }, async () => {
  const g = await GuardProcess.create(broker.bootstrap);
  await g.start();
  const errors: string[] = [];
  // What the client logs: kafkajs's lines at debug only, the outage once per change.
  const logged: { level: string; message: string }[] = [];
  const logger = Object.fromEntries(["debug", "info", "warn"].map((level) => [level, (message: string) => logged.push({ level, message })]));
  const client = await Guard.connect({
    brokers: [broker.bootstrap],
    eventsTopic: g.eventsTopic,
    verdictsTopic: g.verdictsTopic,
    onError: (w, e) => errors.push(`${w}: ${String(e)}`),
    logger,
  });
  try {
    const first = client.session(`before-${randomUUID().slice(0, 8)}`);
    await first.userMessage("go");
    assert.equal(await loopUntilBlocked(first, "status"), "block");

    await broker.stop();
    const down = client.session(`down-${randomUUID().slice(0, 8)}`);
    void down.userMessage("go"); // queued in the client; resolves once the broker is back
    for (let i = 0; i < 3; i++) {
      const started = Date.now();
      assert.equal(await down.toolCall("status", { n: 1 }, { deadlineMs: 300 }), null);
      assert.ok(Date.now() - started < 450, `${Date.now() - started} ms`);
      void down.turnEnd();
    }

    await broker.startAgain();
    let action: string | undefined;
    for (const until = Date.now() + 90_000; action !== "block" && Date.now() < until; ) {
      // The guard process may exit on losing its broker (its orchestrator restarts it);
      // the client must not depend on it.
      if (!g.running()) await g.start(120_000);
      const s = client.session(`after-${randomUUID().slice(0, 8)}`);
      await s.userMessage("go");
      action = await loopUntilBlocked(s, "poll");
    }
    assert.equal(action, "block", `no verdict after the restart; stats ${JSON.stringify(client.stats())}; errors ${errors.join(" | ")}; guard ${g.logTail().slice(-600)}`);
    assert.ok(logged.some((l) => l.level === "debug" && l.message.startsWith("kafkajs ")), "kafkajs's lines were not routed");
    const states = logged.filter((l) => l.level !== "debug").map((l) => (/unreachable/.test(l.message) ? "down" : /reachable again/.test(l.message) ? "up" : l.message));
    assert.deepEqual(states.slice(0, 2), ["down", "up"], JSON.stringify(logged.filter((l) => l.level !== "debug")));
    assert.ok(states.length <= 6 && states.every((x, i) => i === 0 || x !== states[i - 1]), JSON.stringify(states));
  } finally {
    await client.close();
    await g.stop();
  }
});

test("a client connected while the broker is away fails open at once and sends its backlog", { timeout: 400_000 }, async () => {
  // Issue 35: `connect()` does not wait for an absent broker nor throw. It resolves at once,
  // tool calls are answered fail-open at once (not at their deadline), the session's events
  // are kept; once the broker and the guard are up, they reach the guard in order and the
  // loop they began is blocked as usual.
  const g = await GuardProcess.create(broker.bootstrap);
  await broker.stop();
  const errors: string[] = [];
  const logged: { level: string; message: string }[] = [];
  const logger = Object.fromEntries(["debug", "info", "warn"].map((level) => [level, (message: string) => logged.push({ level, message })]));
  const started = performance.now();
  const client = await Guard.connect({
    brokers: [broker.bootstrap],
    eventsTopic: g.eventsTopic,
    verdictsTopic: g.verdictsTopic,
    onError: (w, e) => errors.push(`${w}: ${String(e)}`),
    logger,
  });
  try {
    const made = performance.now() - started;
    assert.ok(made < 500, `${made} ms`); // it threw at once before; now it resolves at once
    assert.equal(client.connected, false);
    const s = client.session(`absent-${randomUUID().slice(0, 8)}`);
    await s.userMessage("The build is broken, fix it.");
    const answers: number[] = [];
    for (let i = 0; i < 2; i++) {
      const called = performance.now();
      assert.equal(await s.toolCall("status", { n: 1 }, { deadlineMs: 15_000 }), null);
      answers.push(performance.now() - called);
      await s.toolResult("status", { status: "error", error: "connection refused" });
      await s.turnEnd();
    }
    assert.ok(Math.max(...answers) < 50, String(answers)); // at once, not at the 15 s deadline
    await assert.rejects(client.ready(300), (e: unknown) => e instanceof GuardError && e.message.includes(`cannot reach Kafka at ${broker.bootstrap}`));
    let st = client.stats();
    assert.equal(st.toolCallsNotConnected, 2);
    assert.equal(st.toolCallDeadlines, 0);
    assert.equal(st.eventsSent, 0);

    await broker.startAgain();
    await g.start(120_000);
    await client.ready(120_000);
    const v = await s.toolCall("status", { n: 1 }, { deadlineMs: 15_000 });
    assert.equal(v?.action, "block", `${JSON.stringify(client.stats())} ${g.logTail().slice(-600)}`);
    assert.equal(v?.evidence.count, 3); // the two calls made while the broker was away came first
    st = client.stats();
    assert.ok(st.eventsSent >= 8, JSON.stringify(st));
    assert.equal(st.eventsFailed, 0);
    assert.equal(st.eventsOverflowed, 0);
    // The outage said once through onError, and once each way in the log.
    assert.equal(errors.filter((e) => e.startsWith("connect")).length, 1, errors.join(" | "));
    const states = logged.filter((l) => l.level !== "debug").map((l) => (/unreachable/.test(l.message) ? "down" : /reachable again/.test(l.message) ? "up" : l.message));
    assert.deepEqual(states, ["down", "up"], JSON.stringify(logged.filter((l) => l.level !== "debug")));
  } finally {
    await client.close();
    await g.stop();
  }
});
