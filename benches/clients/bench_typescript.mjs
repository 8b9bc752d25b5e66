// What a tool call costs an agent through the TypeScript client (scripts/client-bench.sh).
// Against a running `loopguard serve`: for each path (read_committed, read_uncommitted),
// HEALTHY timed calls of healthy sessions (distinct reads: answered by a judged-through
// marker) and LOOPS looping sessions whose third identical call is blocked (timed). With
// IDLE_SECONDS set, only an idle reader's requests per second to the broker instead
// (kafkajs' request events). One JSON line.
//
//   node benches/clients/bench_typescript.mjs BOOTSTRAP EVENTS VERDICTS
import { randomUUID } from "node:crypto";
import { Guard } from "../../clients/typescript/dist/src/index.js";

const [bootstrap, eventsTopic, verdictsTopic] = process.argv.slice(2);
const HEALTHY = Number(process.env.HEALTHY ?? 300);
const LOOPS = Number(process.env.LOOPS ?? 20);
const IDLE_SECONDS = Number(process.env.IDLE_SECONDS ?? 0);
// Up to this long between an answer and the next call (uniform): the tool and the model.
const THINK_MS = Number(process.env.THINK_MS ?? 100);
const id = (p) => `${p}-${randomUUID().slice(0, 8)}`;

function quantiles(xs) {
  xs = [...xs].sort((a, b) => a - b);
  const pick = (q) => Math.round(xs[Math.min(xs.length - 1, Math.floor(q * xs.length))] * 100) / 100;
  return { n: xs.length, p50_ms: pick(0.5), p99_ms: pick(0.99), max_ms: Math.round(xs.at(-1) * 100) / 100 };
}

async function timed(fn) {
  const started = performance.now();
  const out = await fn();
  return [out, performance.now() - started];
}

async function runPath(readUncommitted) {
  const guard = await Guard.connect({ brokers: [bootstrap], eventsTopic, verdictsTopic, readUncommitted, toolCallDeadlineMs: 5000 });
  try {
    // Ten reads a session: a long run of reads alone earns a (correct) discovery warning.
    const sessions = Array.from({ length: Math.ceil(HEALTHY / 10) }, () => guard.session(id("bench-ts-h")));
    for (const s of sessions) {
      await s.userMessage("Read the code base.");
      await s.toolCall("read_file", { path: "warm" }); // the partition is read from here on
    }
    const costs = [];
    for (let i = 0; i < HEALTHY; i++) {
      const s = sessions[i % sessions.length];
      const [v, t] = await timed(() => s.toolCall("read_file", { path: `src/m${i}.ts` }));
      if (v !== null) throw new Error(`a healthy call got ${JSON.stringify(v)}`);
      costs.push(t);
      await s.toolResult("read_file");
      await s.turnEnd();
      // The tool runs and the model thinks: without it, each call would start just after
      // the commit that answered the last one, and wait a whole commit interval.
      await new Promise((r) => setTimeout(r, Math.random() * THINK_MS));
    }
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
      block: quantiles(blocks),
      block_call_to_written: quantiles(splitIn),
      block_written_to_agent: quantiles(splitOut),
      deadlines: st.toolCallDeadlines, no_verdict_by_marker: st.toolCallsNoVerdict };
  } finally {
    await guard.close();
  }
}

/** Requests per second an idle reader (and its producer) sends, after the start-up. */
async function idleRequests(seconds) {
  const guard = await Guard.connect({ brokers: [bootstrap], eventsTopic, verdictsTopic });
  try {
    const s = guard.session(id("bench-ts-idle"));
    await s.userMessage("hello");
    const reader = guard.reader.consumer;
    await new Promise((r) => setTimeout(r, 2000));
    const counts = {};
    const off = reader.on(reader.events.REQUEST, ({ payload }) => (counts[payload.apiName] = (counts[payload.apiName] ?? 0) + 1));
    await new Promise((r) => setTimeout(r, seconds * 1000));
    off();
    const perS = Object.fromEntries(Object.entries(counts).map(([k, n]) => [k, Math.round((n / seconds) * 100) / 100]));
    return { total: Math.round((Object.values(counts).reduce((a, b) => a + b, 0) / seconds) * 100) / 100, ...perS };
  } finally {
    await guard.close();
  }
}

const out = { client: "typescript" };
if (IDLE_SECONDS > 0) out.idle_reader_requests_per_s = await idleRequests(IDLE_SECONDS);
else {
  out.read_committed = await runPath(false);
  out.read_uncommitted = await runPath(true);
}
console.log(JSON.stringify(out));
