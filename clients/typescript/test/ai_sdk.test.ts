/** The AI SDK adapter inside the SDK's own tool loop (`generateText`, `streamText`), driven
 * by the SDK's mock language model, against a real broker and a real `loopguard serve`. */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import type { LanguageModelV4StreamPart } from "@ai-sdk/provider";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { MockLanguageModelV4, simulateReadableStream } from "ai/test";
import { z } from "zod";
import { Guard, type Verdict } from "../src/index.js";
import { withLoopguard } from "../src/frameworks/ai_sdk.js";
import { GuardProcess } from "./harness.js";

const WAIT = 10_000;
const sid = (prefix: string) => `${prefix}-${randomUUID().slice(0, 12)}`;
let g: GuardProcess;
let guard: Guard;

before(async () => {
  g = await GuardProcess.create();
  await g.start();
  guard = await connect("acme");
});
after(async () => {
  await guard?.close();
  await g?.stop();
  await g?.deleteTopics();
});

function connect(tenant: string): Promise<Guard> {
  return Guard.connect({ brokers: [g.bootstrap], eventsTopic: g.eventsTopic, verdictsTopic: g.verdictsTopic, tenant, agent: "ai-sdk", model: "mock" });
}

type Call = { prompt: unknown; tools?: unknown[]; toolChoice?: unknown };
const usage = { inputTokens: { total: 120, noCache: 120, cacheRead: undefined, cacheWrite: undefined }, outputTokens: { total: 30, text: 30, reasoning: undefined } };

/** One scripted response: a tool call, or a final text. */
function respond(step: { call?: [string, unknown]; text?: string }) {
  const content = step.call
    ? [{ type: "tool-call" as const, toolCallId: `call-${randomUUID().slice(0, 8)}`, toolName: step.call[0], input: JSON.stringify(step.call[1]) }]
    : [{ type: "text" as const, text: step.text ?? "" }];
  return { content, finishReason: { unified: step.call ? ("tool-calls" as const) : ("stop" as const), raw: undefined }, usage, warnings: [] };
}

/** What the model was shown, as one string to search. */
const shown = (c: Call) => JSON.stringify(c.prompt);

/** A build tool that always fails the same way, counting its runs. */
function buildTools() {
  const runs = { bash: 0, read_file: 0 };
  return {
    runs,
    tools: {
      bash: tool({
        description: "run a shell command",
        inputSchema: z.object({ cmd: z.string() }),
        execute: async ({ cmd }) => {
          runs.bash += 1;
          return `${cmd}: error: linker \`cc\` not found`;
        },
      }),
      read_file: tool({
        description: "read a file",
        inputSchema: z.object({ path: z.string() }),
        execute: async ({ path }) => {
          runs.read_file += 1;
          return `contents of ${path}`;
        },
      }),
    },
  };
}

test("generateText: a looping model is blocked on the third identical call and answers from the guard's message", async () => {
  const session = guard.session(sid("ai-loop"));
  const { runs, tools } = buildTools();
  const model = new MockLanguageModelV4({
    // Rebuilds until the tool's answer is the guard's refusal, then gives up in words.
    doGenerate: async (o) => (JSON.stringify(o.prompt).includes("Blocked") ? respond({ text: "The build cannot be fixed here: no C linker." }) : respond({ call: ["bash", { cmd: "cargo build" }] })),
  });
  const result = await generateText(
    withLoopguard(session, { model, tools, prompt: "Fix the failing build.", stopWhen: stepCountIs(10) }, { deadlineMs: WAIT }),
  );
  assert.equal(runs.bash, 2, "the refused call did not run");
  assert.equal(result.text, "The build cannot be fixed here: no C linker.");
  assert.equal(result.steps.length, 4);
  const block = session.verdicts.find((v) => v.action === "block");
  assert.ok(block, `no block; ${JSON.stringify(session.verdicts.map((v) => v.rule))}`);
  assert.equal(block.rule, "tool.exact_repeat");
  // The model read the verdict's message as the third call's result (an error result).
  const calls = model.doGenerateCalls as Call[];
  assert.ok(shown(calls[3]).includes(block.message), shown(calls[3]));
  assert.ok(result.steps[2].content.some((p) => p.type === "tool-error"));
  // The SDK's usage figures reached the guard: the loop's cost is on the verdict.
  assert.ok((block.loopCost?.tokens ?? 0) > 0, JSON.stringify(block.loopCost));
});

test("generateText: a healthy run finishes untouched, each call answered by the guard's marker", async () => {
  const session = guard.session(sid("ai-healthy"));
  const { runs, tools } = buildTools();
  let n = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async () => (n++ < 4 ? respond({ call: ["read_file", { path: `src/module_${n}.ts` }] }) : respond({ text: "All four modules read." })),
  });
  const before = guard.stats();
  const started = performance.now();
  const result = await generateText(withLoopguard(session, { model, tools, prompt: "Read the modules.", stopWhen: stepCountIs(10) }, { deadlineMs: WAIT }));
  const took = performance.now() - started;
  const after = guard.stats();
  assert.equal(result.text, "All four modules read.");
  assert.equal(runs.read_file, 4);
  assert.deepEqual(session.verdicts, []);
  assert.equal(after.toolCallsNoVerdict - before.toolCallsNoVerdict, 4, "each call answered by a marker");
  assert.equal(after.toolCallDeadlines - before.toolCallDeadlines, 0);
  assert.ok(took < 4 * 1000, `the run took ${took} ms`);
  for (const c of model.doGenerateCalls as Call[]) assert.ok(!shown(c).includes("Loop guard"), shown(c));
});

test("streamText: a reasoning loop is caught mid-stream and its steer reaches the next model call", async () => {
  const session = guard.session(sid("ai-stream"));
  const { tools } = buildTools();
  const chunksAt: number[] = [];
  let steeredAt: number | undefined;
  session.onVerdict((v) => {
    if (v.action === "steer") steeredAt ??= chunksAt.length;
  });
  const id = "r1";
  const looping: LanguageModelV4StreamPart[] = [
    { type: "stream-start" as const, warnings: [] },
    { type: "reasoning-start" as const, id },
    ...Array.from({ length: 60 }, () => ({ type: "reasoning-delta" as const, id, delta: "Let me check the config file again to be sure it is right. " })),
    { type: "reasoning-end" as const, id },
    { type: "tool-call" as const, toolCallId: "c1", toolName: "read_file", input: JSON.stringify({ path: "config.toml" }) },
    { type: "finish" as const, finishReason: { unified: "tool-calls" as const, raw: undefined }, usage },
  ];
  const answer = (text: string): LanguageModelV4StreamPart[] => [
    { type: "stream-start" as const, warnings: [] },
    { type: "text-start" as const, id: "t1" },
    { type: "text-delta" as const, id: "t1", delta: text },
    { type: "text-end" as const, id: "t1" },
    { type: "finish" as const, finishReason: { unified: "stop" as const, raw: undefined }, usage },
  ];
  let n = 0;
  const model = new MockLanguageModelV4({
    doStream: async () => ({ stream: simulateReadableStream({ chunks: n++ === 0 ? looping : answer("The config is fine."), chunkDelayInMs: 15 }) }),
  });
  const result = streamText(
    withLoopguard(session, {
      model,
      tools,
      prompt: "Why does the deploy fail?",
      stopWhen: stepCountIs(5),
      onChunk: ({ chunk }) => {
        if (chunk.type === "reasoning-delta") chunksAt.push(Date.now());
      },
    }),
  );
  assert.equal(await result.text, "The config is fine.");
  const steer = session.verdicts.find((v: Verdict) => v.action === "steer");
  assert.ok(steer, `no steer; stats ${JSON.stringify(guard.stats())}`);
  assert.match(steer.rule, /^reasoning\./);
  assert.ok(steeredAt !== undefined && steeredAt < 60, `the steer came after the stream (${steeredAt} of 60 chunks)`);
  const calls = model.doStreamCalls as Call[];
  assert.equal(calls.length, 2);
  assert.ok(shown(calls[1]).includes(steer.message), "the steer went into the next model call");
});

test("generateText: the round budget's warn reaches one model call, its abort ends the run with a status summary", async () => {
  const session = guard.session(sid("ai-abort"));
  const { runs, tools } = buildTools();
  let n = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (o) =>
      o.toolChoice?.type === "none" || (o.tools ?? []).length === 0
        ? respond({ text: "Status: read two files; blocked by the round budget; next: ask the user." })
        : respond({ call: ["read_file", { path: `docs/page_${n++}.md` }] }),
  });
  const result = await generateText(
    withLoopguard(session, { model, tools, prompt: "Read the docs.", stopWhen: stepCountIs(10) }, { deadlineMs: WAIT, maxToolRounds: 2 }),
  );
  assert.equal(result.text, "Status: read two files; blocked by the round budget; next: ask the user.");
  assert.equal(runs.read_file, 2, "the call that started the round past the budget did not run");
  const warn = session.verdicts.find((v) => v.action === "warn");
  const abort = session.verdicts.find((v) => v.action === "abort");
  assert.ok(warn && abort, JSON.stringify(session.verdicts.map((v) => [v.action, v.rule])));
  assert.equal(abort.rule, "budget.tool_rounds");
  const calls = model.doGenerateCalls as Call[];
  assert.equal(calls.length, 4);
  assert.ok(shown(calls[2]).includes(warn.message), "the warn went into the next model call");
  assert.ok(!shown(calls[3]).includes(warn.message), "a warn is for one model call only");
  assert.ok(shown(calls[3]).includes(abort.message), "the abort's message asked for the summary");
});

test("observe mode: verdicts go to onObserved only, the loop runs on", async () => {
  const observer = await connect("observer");
  try {
    const session = observer.session(sid("ai-observe"));
    const { runs, tools } = buildTools();
    const observed: Verdict[] = [];
    let n = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async () => (n++ < 4 ? respond({ call: ["bash", { cmd: "cargo build" }] }) : respond({ text: "Giving up." })),
    });
    const result = await generateText(
      withLoopguard(session, { model, tools, prompt: "Fix the build.", stopWhen: stepCountIs(10) }, { deadlineMs: WAIT, onObserved: (v) => observed.push(v) }),
    );
    assert.equal(result.text, "Giving up.");
    assert.equal(runs.bash, 4, "every call ran");
    assert.deepEqual(session.verdicts, []);
    assert.ok(observed.some((v) => v.action === "block" && !v.enforce), JSON.stringify(observed.map((v) => [v.action, v.rule])));
  } finally {
    await observer.close();
  }
});

test("a guard that is down costs each call only the deadline", async () => {
  const down = await GuardProcess.create(); // its topics exist, no `loopguard serve` reads them
  const client = await Guard.connect({ brokers: [down.bootstrap], eventsTopic: down.eventsTopic, verdictsTopic: down.verdictsTopic });
  try {
    const session = client.session(sid("ai-down"));
    const { runs, tools } = buildTools();
    let n = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async () => (n++ < 2 ? respond({ call: ["bash", { cmd: "cargo build" }] }) : respond({ text: "Done." })),
    });
    const started = performance.now();
    const result = await generateText(withLoopguard(session, { model, tools, prompt: "Build it.", stopWhen: stepCountIs(5) }, { deadlineMs: 300 }));
    const took = performance.now() - started;
    assert.equal(result.text, "Done.");
    assert.equal(runs.bash, 2);
    assert.ok(took >= 600 && took < 2500, `took ${took} ms`);
    assert.equal(client.stats().toolCallDeadlines, 2);
  } finally {
    await client.close();
    await down.deleteTopics();
  }
});
