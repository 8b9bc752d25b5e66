// What a tool call costs an agent through the TypeScript client (scripts/client-bench.sh).
// Against a running `loopguard serve`: for each path (read_committed, read_uncommitted),
// HEALTHY timed calls of healthy sessions (distinct reads: answered by a judged-through
// marker; a new session every ten calls, its first call timed with the rest), with the
// default deadline, and the share of them answered by it; LOOPS looping sessions whose
// third identical call is blocked (timed); the first call of FRESH (20) fresh processes (one
// call each, as a hook runs) and of FRESH fresh Guards in one process. With
// IDLE_SECONDS set, only an idle reader's requests per second to the broker instead
// (kafkajs' request events). One JSON line.
//
//   node benches/clients/bench_typescript.mjs BOOTSTRAP EVENTS VERDICTS
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { promisify } from "node:util";
import { Guard } from "../../clients/typescript/dist/src/index.js";

const [bootstrap, eventsTopic, verdictsTopic] = process.argv.slice(2);
const HEALTHY = Number(process.env.HEALTHY ?? 300);
const LOOPS = Number(process.env.LOOPS ?? 20);
const IDLE_SECONDS = Number(process.env.IDLE_SECONDS ?? 0);
// Up to this long between an answer and the next call (uniform): the tool and the model.
const THINK_MS = Number(process.env.THINK_MS ?? 100);
const FRESH = Number(process.env.FRESH ?? 20);
const id = (p) => `${p}-${randomUUID().slice(0, 8)}`;
const run = promisify(execFile);

function quantiles(xs) {
  xs = [...xs].sort((a, b) => a - b);
  const pick = (q) => Math.round(xs[Math.min(xs.length - 1, Math.floor(q * xs.length))] * 100) / 100;
  return { n: xs.length, p50_ms: pick(0.5), p90_ms: pick(0.9), p99_ms: pick(0.99), max_ms: Math.round(xs.at(-1) * 100) / 100 };
}

async function timed(fn) {
  const started = performance.now();
  const out = await fn();
  return [out, performance.now() - started];
}

// One process, one call, as a hook runs: prints its Guard's connect, the call, the close.
const FRESH_PROCESS = `
const t0 = performance.now();
const { Guard } = await import(process.argv[1]);
const t1 = performance.now();
const [bootstrap, eventsTopic, verdictsTopic, unc] = process.argv.slice(2);
const g = await Guard.connect({ brokers: [bootstrap], eventsTopic, verdictsTopic, readUncommitted: unc === "1" });
const t2 = performance.now();
const s = g.session();
await s.userMessage("Read the code base.");
const v = await s.toolCall("read_file", { path: "README.md" });
const t3 = performance.now();
const deadlines = g.stats().toolCallDeadlines;
await g.close();
const t4 = performance.now();
console.log(JSON.stringify({ import: t1 - t0, construct: t2 - t1, call: t3 - t2, close: t4 - t3, deadlines, verdict: v !== null }));
`;

/** N processes, each a fresh Guard guarding one healthy call (a new session). */
async function freshProcesses(readUncommitted, n) {
  const runs = [];
  const walls = [];
  const dist = new URL("../../clients/typescript/dist/src/index.js", import.meta.url).href;
  for (let i = 0; i < n; i++) {
    const started = performance.now();
    const { stdout } = await run(process.execPath, ["--input-type=module", "-e", FRESH_PROCESS, dist, bootstrap, eventsTopic, verdictsTopic, readUncommitted ? "1" : "0"]);
    walls.push(performance.now() - started);
    const r = JSON.parse(stdout);
    if (r.verdict) throw new Error(`a fresh process's healthy call got a verdict`);
    runs.push(r);
  }
  return {
    first_call: quantiles(runs.map((r) => r.call)),
    construct: quantiles(runs.map((r) => r.construct)),
    close: quantiles(runs.map((r) => r.close)),
    process_wall: quantiles(walls),
    deadlines: runs.reduce((a, r) => a + r.deadlines, 0),
  };
}

/** In one process, a fresh Guard per session: each Guard's first (healthy) call. */
async function freshGuards(readUncommitted, n) {
  const calls = [];
  let deadlines = 0;
  for (let i = 0; i < n; i++) {
    const guard = await Guard.connect({ brokers: [bootstrap], eventsTopic, verdictsTopic, readUncommitted });
    try {
      const s = guard.session(id("bench-ts-f"));
      await s.userMessage("Read the code base.");
      const [v, t] = await timed(() => s.toolCall("read_file", { path: "README.md" }));
      if (v !== null) throw new Error(`a fresh Guard's healthy call got ${JSON.stringify(v)}`);
      calls.push(t);
      deadlines += guard.stats().toolCallDeadlines;
    } finally {
      await guard.close();
    }
  }
  return { first_call: quantiles(calls), deadlines };
}

async function runPath(readUncommitted) {
  // The default deadline (1 s): a call it answers is a call that ran unguarded.
  const guard = await Guard.connect({ brokers: [bootstrap], eventsTopic, verdictsTopic, readUncommitted });
  try {
    // Ten reads a session (a long run of reads alone earns a correct discovery warning), a
    // new session every ten calls: each session's first call is timed too, on a partition
    // this process may not have read before.
    let s;
    const costs = [];
    for (let i = 0; i < HEALTHY; i++) {
      if (i % 10 === 0) {
        s = guard.session(id("bench-ts-h"));
        await s.userMessage("Read the code base.");
      }
      const [v, t] = await timed(() => s.toolCall("read_file", { path: `src/m${i}.ts` }));
      if (v !== null) throw new Error(`a healthy call got ${JSON.stringify(v)}`);
      costs.push(t);
      await s.toolResult("read_file");
      await s.turnEnd();
      // The tool runs and the model thinks: without it, each call would start just after
      // the commit that answered the last one, and wait a whole commit interval.
      await new Promise((r) => setTimeout(r, Math.random() * THINK_MS));
    }
    const healthyDeadlines = guard.stats().toolCallDeadlines;
    const blocks = [];
    const splitIn = [];
    const splitOut = [];
    for (let l = 0; l < LOOPS; l++) {
      const s = guard.session(id("bench-ts-l"));
      await s.userMessage("Fix the build.");
      let v, t;
      for (let n = 0; n < 3; n++) {
        [v, t] = await timed(() => s.toolCall("bash", { cmd: "cargo build" }));
        if (n < 2) {
          if (v !== null) throw new Error(`call ${n + 1} got ${JSON.stringify(v)}`);
          await s.toolResult("bash", { status: "error", error: "linker `cc` not found" });
          await s.turnEnd();
        }
      }
      if (v?.action !== "block") throw new Error(`third call: ${JSON.stringify(v)}`);
      blocks.push(t);
      // Where a block's time goes: to the guard writing it, then to the agent having it.
      const emitted = Date.parse(v.emittedAt);
      splitIn.push(emitted - (v.receivedAt - t));
      splitOut.push(v.receivedAt - emitted);
    }
    const st = guard.stats();
    return {
      healthy: quantiles(costs),
      healthy_by_deadline: Math.round((healthyDeadlines / Math.max(1, costs.length)) * 10000) / 10000,
      block: quantiles(blocks),
      block_call_to_written: quantiles(splitIn),
      block_written_to_agent: quantiles(splitOut),
      deadlines: st.toolCallDeadlines, no_verdict_by_marker: st.toolCallsNoVerdict };
  } finally {
    await guard.close();
  }
}

/** Fetch requests per second an idle reader sends, after the start-up. */
async function idleRequests(seconds) {
  const guard = await Guard.connect({ brokers: [bootstrap], eventsTopic, verdictsTopic });
  try {
    const s = guard.session(id("bench-ts-idle"));
    await s.userMessage("hello");
    const reader = guard.reader;
    await new Promise((r) => setTimeout(r, 2000));
    const before = reader.fetches ?? 0;
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const fetches = Math.round((((reader.fetches ?? 0) - before) / seconds) * 100) / 100;
    return { total: fetches, Fetch: fetches };
  } finally {
    await guard.close();
  }
}

const out = { client: "typescript" };
if (IDLE_SECONDS > 0) out.idle_reader_requests_per_s = await idleRequests(IDLE_SECONDS);
else {
  for (const [name, unc] of [["read_committed", false], ["read_uncommitted", true]]) {
    out[name] = await runPath(unc);
    out[name].fresh_process = await freshProcesses(unc, FRESH);
    out[name].fresh_guard = await freshGuards(unc, FRESH);
  }
}
console.log(JSON.stringify(out));
