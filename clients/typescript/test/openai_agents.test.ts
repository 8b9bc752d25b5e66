/** The OpenAI Agents JS adapter inside the SDK's own `run()` loop, driven by the SDK's
 * scripted model (`ScriptedModel`), against a real broker and a real `loopguard serve`. */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { Agent, ToolCallError, ToolInputGuardrailTripwireTriggered, Usage, run, tool, type StreamEvent } from "@openai/agents";
import { ScriptedModel, assistantMessage, functionCall, modelResponder, modelStreamResponder, type RecordedModelCall } from "@openai/agents-core/testing";
import { z } from "zod";
import { Guard, type Verdict } from "../src/index.js";
import { abortVerdict, withLoopguard } from "../src/frameworks/openai_agents.js";
import { GuardProcess } from "./harness.js";

const WAIT = 10_000;
const sid = (prefix: string) => `${prefix}-${randomUUID().slice(0, 12)}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
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
  return Guard.connect({ brokers: [g.bootstrap], eventsTopic: g.eventsTopic, verdictsTopic: g.verdictsTopic, tenant, agent: "agents-js", model: "scripted" });
}

const usage = () => new Usage({ requests: 1, inputTokens: 120, outputTokens: 30, totalTokens: 150 });
const callId = () => `call-${randomUUID().slice(0, 8)}`;
/** What the model was shown, as one string to search. */
const shown = (c: RecordedModelCall) => JSON.stringify(c.request.input);

/** A model that answers every request with `respond` (up to 20 requests). */
function scripted(respond: (call: RecordedModelCall) => { call?: [string, unknown]; text?: string }): ScriptedModel {
  return new ScriptedModel(
    Array.from({ length: 20 }, () =>
      modelResponder((c) => {
        const r = respond(c);
        const output = r.call ? [functionCall(r.call[0], r.call[1] as Record<string, unknown>, { callId: callId() })] : [assistantMessage(r.text ?? "")];
        return { usage: usage(), output };
      }),
    ),
  );
}

function buildTools() {
  const runs = { bash: 0, read_file: 0 };
  return {
    runs,
    tools: [
      tool({
        name: "bash",
        description: "run a shell command",
        parameters: z.object({ cmd: z.string() }),
        execute: async ({ cmd }) => {
          runs.bash += 1;
          return `${cmd}: error: linker \`cc\` not found`;
        },
      }),
      tool({
        name: "read_file",
        description: "read a file",
        parameters: z.object({ path: z.string() }),
        execute: async ({ path }) => {
          runs.read_file += 1;
          return `contents of ${path}`;
        },
      }),
    ],
  };
}

test("run(): a looping model is blocked on the third identical call and answers from the guard's message", async () => {
  const session = guard.session(sid("oa-loop"));
  const { runs, tools } = buildTools();
  const model = scripted((c) => (shown(c).includes("Blocked") ? { text: "The build cannot be fixed here: no C linker." } : { call: ["bash", { cmd: "cargo build" }] }));
  const agent = withLoopguard(session, new Agent({ name: "coder", instructions: "Fix builds.", model, tools }), { deadlineMs: WAIT });
  const result = await run(agent, "Fix the failing build.");
  assert.equal(result.finalOutput, "The build cannot be fixed here: no C linker.");
  assert.equal(runs.bash, 2, "the refused call did not run");
  const block = session.verdicts.find((v) => v.action === "block");
  assert.ok(block, `no block; ${JSON.stringify(session.verdicts.map((v) => v.rule))}`);
  assert.equal(block.rule, "tool.exact_repeat");
  assert.equal(model.calls.length, 4);
  assert.ok(shown(model.calls[3]).includes(block.message), "the model read the verdict's message as the call's result");
  assert.ok((block.loopCost?.tokens ?? 0) > 0, `usage reached the guard: ${JSON.stringify(block.loopCost)}`);
});

test("run(): a healthy run finishes untouched, each call answered by the guard's marker", async () => {
  const session = guard.session(sid("oa-healthy"));
  const { runs, tools } = buildTools();
  let n = 0;
  const model = scripted(() => (n++ < 4 ? { call: ["read_file", { path: `src/module_${n}.ts` }] } : { text: "All four modules read." }));
  const agent = withLoopguard(session, new Agent({ name: "reader", model, tools }), { deadlineMs: WAIT });
  const before = guard.stats();
  const started = performance.now();
  const result = await run(agent, "Read the modules.");
  const took = performance.now() - started;
  const after = guard.stats();
  assert.equal(result.finalOutput, "All four modules read.");
  assert.equal(runs.read_file, 4);
  assert.deepEqual(session.verdicts, []);
  assert.equal(after.toolCallsNoVerdict - before.toolCallsNoVerdict, 4, "each call answered by a marker");
  assert.equal(after.toolCallDeadlines - before.toolCallDeadlines, 0);
  assert.ok(took < 4 * 1000, `the run took ${took} ms`);
  for (const c of model.calls) assert.ok(!shown(c).includes("Loop guard"), shown(c));
});

test("run({ stream: true }): a reasoning loop is caught mid-stream and its steer reaches the next model request", async () => {
  const session = guard.session(sid("oa-stream"));
  const { tools } = buildTools();
  let chunks = 0;
  let steeredAt: number | undefined;
  session.onVerdict((v) => {
    if (v.action === "steer") steeredAt ??= chunks;
  });
  async function* looping(): AsyncIterable<StreamEvent> {
    yield { type: "response_started" };
    for (let i = 0; i < 60; i++) {
      await sleep(15);
      chunks += 1;
      yield { type: "model", event: { type: "response.reasoning_summary_text.delta", delta: "Let me check the config file again to be sure it is right. " } };
    }
    const output = [functionCall("read_file", { path: "config.toml" }, { callId: callId() })];
    yield { type: "response_done", response: { id: "r1", usage: usage(), output } };
  }
  async function* answer(): AsyncIterable<StreamEvent> {
    yield { type: "response_started" };
    yield { type: "output_text_delta", delta: "The config is fine." };
    yield { type: "response_done", response: { id: "r2", usage: usage(), output: [assistantMessage("The config is fine.")] } };
  }
  const model = new ScriptedModel([modelStreamResponder(() => looping()), modelStreamResponder(() => answer())]);
  const agent = withLoopguard(session, new Agent({ name: "ops", model, tools }));
  const result = await run(agent, "Why does the deploy fail?", { stream: true });
  for await (const _ of result.toStream()) void _;
  await result.completed;
  assert.equal(result.finalOutput, "The config is fine.");
  const steer = session.verdicts.find((v: Verdict) => v.action === "steer");
  assert.ok(steer, `no steer; stats ${JSON.stringify(guard.stats())}`);
  assert.match(steer.rule, /^reasoning\./);
  assert.ok(steeredAt !== undefined && steeredAt < 60, `the steer came after the stream (${steeredAt} of 60 chunks)`);
  assert.equal(model.calls.length, 2);
  assert.ok(shown(model.calls[1]).includes(steer.message), "the steer went into the next model request");
});

test("run(): the round budget's warn reaches one model request, its abort trips the guardrail and ends the run", async () => {
  const session = guard.session(sid("oa-abort"));
  const { runs, tools } = buildTools();
  let n = 0;
  const model = scripted(() => ({ call: ["read_file", { path: `docs/page_${n++}.md` }] }));
  const agent = withLoopguard(session, new Agent({ name: "reader", model, tools }), { deadlineMs: WAIT, maxToolRounds: 2 });
  const error = await run(agent, "Read the docs.").then(
    () => assert.fail("the run was not ended"),
    (e: unknown) => e,
  );
  assert.ok(error instanceof ToolCallError && error.error instanceof ToolInputGuardrailTripwireTriggered, String(error));
  const abort = abortVerdict(error);
  assert.ok(abort, "the error carries the abort verdict");
  assert.equal(abort.rule, "budget.tool_rounds");
  assert.equal(runs.read_file, 2, "the call that started the round past the budget did not run");
  const warn = session.verdicts.find((v) => v.action === "warn");
  assert.ok(warn, JSON.stringify(session.verdicts.map((v) => [v.action, v.rule])));
  assert.equal(model.calls.length, 3);
  assert.ok(shown(model.calls[2]).includes(warn.message), "the warn went into the next model request");
  assert.ok(!shown(model.calls[1]).includes(warn.message));
});

test("observe mode: verdicts go to onObserved only, the loop runs on", async () => {
  const observer = await connect("observer");
  try {
    const session = observer.session(sid("oa-observe"));
    const { runs, tools } = buildTools();
    const observed: Verdict[] = [];
    let n = 0;
    const model = scripted(() => (n++ < 4 ? { call: ["bash", { cmd: "cargo build" }] } : { text: "Giving up." }));
    const agent = withLoopguard(session, new Agent({ name: "coder", model, tools }), { deadlineMs: WAIT, onObserved: (v) => observed.push(v) });
    const result = await run(agent, "Fix the build.");
    assert.equal(result.finalOutput, "Giving up.");
    assert.equal(runs.bash, 4, "every call ran");
    assert.deepEqual(session.verdicts, []);
    assert.ok(observed.some((v) => v.action === "block" && !v.enforce), JSON.stringify(observed.map((v) => [v.action, v.rule])));
  } finally {
    await observer.close();
  }
});
