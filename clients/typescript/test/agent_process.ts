/** One agent runtime process for the two-process test: loops in its sessions until each is
 * blocked, then prints what it saw as one JSON line.
 *
 *     node agent_process.js BOOTSTRAP EVENTS_TOPIC VERDICTS_TOPIC BARRIER_DIR NAME SESSION... */
import { readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Guard } from "../src/index.js";

const [bootstrap, events, verdicts, barrier, name, ...sessions] = process.argv.slice(2);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const guard = await Guard.connect({ brokers: [bootstrap], eventsTopic: events, verdictsTopic: verdicts });
// Both readers must be up before either process loops, so each sees the other's verdicts.
writeFileSync(join(barrier, `ready-${name}`), "");
for (const until = Date.now() + 60_000; Date.now() < until; await sleep(50))
  if (readdirSync(barrier).filter((f) => f.startsWith("ready-")).length >= 2) break;

const handles = sessions.map((s) => guard.session(s));
for (const h of handles) await h.userMessage("keep polling the job");
let blocks = 0;
for (let n = 0; n < 3; n++)
  for (const h of handles) {
    const v = await h.toolCall("job_status", { id: 7 }, { deadlineMs: n === 2 ? 10_000 : 0 });
    if (v?.action === "block") blocks += 1;
    await h.turnEnd();
  }
for (const until = Date.now() + 20_000; Date.now() < until && guard.stats().verdictsOtherSessions < sessions.length; ) await sleep(50);
const report = {
  verdictSessions: [...new Set(handles.flatMap((h) => h.verdicts.map((v) => v.sessionId)))].sort(),
  blocks,
  partitions: guard.verdictPartitions(),
  stats: guard.stats(),
};
await guard.close();
console.log(JSON.stringify(report));
