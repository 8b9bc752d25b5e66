/**
 * OpenAI Agents JS adapter (`@loopguard/client/openai-agents`): guards an `Agent` run by
 * `run()` or a `Runner`, streamed or not.
 *
 *     const agent = withLoopguard(session, new Agent({ name: "coder", model, tools: [bash] }));
 *     const result = await run(agent, "Fix the failing build.");
 *
 * The returned agent is a clone with:
 * - a tool input guardrail on each function tool: the call is published as `tool_call` and
 *   waits for the guard's answer before the tool runs; a `block` answers it with the
 *   verdict's message (`rejectContent`: the tool is not run, the model reads the message as
 *   its result); an `abort` trips the guardrail (`throwException`): the run rejects the
 *   SDK's way, with a `ToolCallError` around `ToolInputGuardrailTripwireTriggered`, whose
 *   guardrail output carries the verdict (`abortVerdict(error)` reads it);
 * - each function tool's result published as `tool_result` with its output's hash;
 * - its model wrapped: each request gets the steers and warns received since the last one
 *   (and their reasoning effort); each response's reasoning (streamed: as its deltas come,
 *   so a reasoning loop is caught mid-stream), text deltas and text are published, and its
 *   turn ends (`turn_end` with the SDK's usage figures) once its tool calls are published;
 * - the run's user message published when the agent starts.
 * A model given by name is resolved the way `run()` resolves it (the default provider), or
 * by `modelProvider` when you give one. Handoff targets are not guarded unless wrapped too.
 * The SDK is not imported at run time except to resolve a model name.
 */
import type {
  Agent,
  AgentInputItem,
  FunctionCallItem,
  FunctionTool,
  Model,
  ModelProvider,
  ModelRequest,
  ModelResponse,
  StreamEvent,
  Tool,
  ToolGuardrailFunctionOutput,
  ToolInputGuardrailDefinition,
} from "@openai/agents";
import type { Session } from "../guard.js";
import type { Usage, Verdict } from "../types.js";
import { Conversation, usageOf, type AdapterOptions } from "./conversation.js";

export type { AdapterOptions } from "./conversation.js";

export interface AgentsAdapterOptions extends AdapterOptions {
  /** Resolves the agent's model when it is given by name (default: the SDK's default
   * provider, as `run()` uses). */
  modelProvider?: ModelProvider;
}

/** The name of the tool guardrail the adapter adds. */
export const GUARDRAIL_NAME = "loopguard";

/** A guarded clone of `agent`: every function tool call is checked before it runs, and the
 * run is published to the session. */
export function withLoopguard<A extends Agent<any, any>>(session: Session, agent: A, options: AgentsAdapterOptions = {}): A {
  const conv = Conversation.of(session, options);
  const turns = new Turns(conv);
  const guardrail: ToolInputGuardrailDefinition = {
    type: "tool_input",
    name: GUARDRAIL_NAME,
    run: async ({ toolCall }) => {
      const call = toolCall as FunctionCallItem;
      const v = await conv.check(call.name, parseArgs(call.arguments), call.callId);
      if (v === null) return { behavior: { type: "allow" } } satisfies ToolGuardrailFunctionOutput;
      if (v.action === "abort") return { behavior: { type: "throwException" }, outputInfo: v };
      return { behavior: { type: "rejectContent", message: v.message }, outputInfo: v };
    },
  };
  const tools = (agent.tools as Tool[]).map((t) => (t.type === "function" ? guardTool(t as FunctionTool<any, any, any>, guardrail, conv) : t));
  const model = new GuardedModel(agent.model, options.modelProvider, conv, turns);
  const guarded = agent.clone({ tools, model } as Parameters<A["clone"]>[0]) as A;
  guarded.on("agent_start", (_ctx: unknown, _agent: unknown, turnInput?: AgentInputItem[]) => {
    turns.flush();
    conv.startRun(lastUserText(turnInput ?? []));
  });
  guarded.on("agent_end", () => turns.flush());
  return guarded;
}

/** The abort verdict that ended a run, from the error `run()` rejected with (the SDK wraps
 * the guardrail's `ToolInputGuardrailTripwireTriggered` in a `ToolCallError`), else
 * undefined. */
export function abortVerdict(error: unknown): Verdict | undefined {
  for (let e = error, depth = 0; e !== null && typeof e === "object" && depth < 4; depth++) {
    const r = (e as { result?: { guardrail?: { name?: string }; output?: { outputInfo?: unknown } } }).result;
    if (r?.guardrail?.name === GUARDRAIL_NAME) {
      const v = r.output?.outputInfo as Verdict | undefined;
      return v?.action === "abort" ? v : undefined;
    }
    e = (e as { error?: unknown; cause?: unknown }).error ?? (e as { cause?: unknown }).cause;
  }
  return undefined;
}

function guardTool(tool: FunctionTool<any, any, any>, guardrail: ToolInputGuardrailDefinition, conv: Conversation): FunctionTool<any, any, any> {
  return {
    ...tool,
    inputGuardrails: [guardrail, ...(tool.inputGuardrails ?? [])],
    invoke: async (ctx, input, details) => {
      const callId = (details?.toolCall as FunctionCallItem | undefined)?.callId;
      try {
        const output = await tool.invoke(ctx, input, details);
        conv.result(tool.name, callId, { ok: output });
        return output;
      } catch (e) {
        conv.result(tool.name, callId, { error: e });
        throw e;
      }
    },
  };
}

/** A response's `turn_end` waits until its tool calls are published (they belong to its
 * turn): it goes out with the next model request, or when the run ends. */
class Turns {
  private pending: { usage: Usage | undefined } | undefined;

  constructor(private readonly conv: Conversation) {}

  responded(output: readonly unknown[], usage: Usage | undefined): void {
    const calls = output.some((i) => (i as { type?: string }).type === "function_call");
    if (calls) this.pending = { usage };
    else this.conv.send(this.conv.session.turnEnd({ usage }));
  }

  flush(): void {
    const p = this.pending;
    this.pending = undefined;
    if (p !== undefined) this.conv.send(this.conv.session.turnEnd({ usage: p.usage }));
  }
}

/** The agent's model, with the guard's advice added to each request and each response
 * published. */
class GuardedModel implements Model {
  private resolved: Model | undefined;

  constructor(
    private readonly model: string | Model,
    private readonly provider: ModelProvider | undefined,
    private readonly conv: Conversation,
    private readonly turns: Turns,
  ) {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const inner = await this.inner();
    const r = await inner.getResponse(this.advised(request));
    this.published(r.output, usageOf(r.usage?.inputTokens, r.usage?.outputTokens), false);
    return r;
  }

  async *getStreamedResponse(request: ModelRequest): AsyncIterable<StreamEvent> {
    const inner = await this.inner();
    let streamedReasoning = false;
    for await (const event of inner.getStreamedResponse(this.advised(request))) {
      if (event.type === "output_text_delta") this.conv.content(event.delta);
      else if (event.type === "model") {
        const delta = reasoningDelta(event.event);
        if (delta !== undefined) {
          streamedReasoning = true;
          this.conv.reasoning(delta);
        }
      } else if (event.type === "response_done") {
        const u = event.response.usage;
        this.published(event.response.output, usageOf(u?.inputTokens, u?.outputTokens), streamedReasoning);
      }
      yield event;
    }
  }

  private async inner(): Promise<Model> {
    if (this.resolved !== undefined) return this.resolved;
    if (typeof this.model !== "string") return (this.resolved = this.model);
    const provider = this.provider ?? (await defaultProvider());
    return (this.resolved = await provider.getModel(this.model === "" ? undefined : this.model));
  }

  /** The request with the steers and warns received since the last one (this call only). */
  private advised(request: ModelRequest): ModelRequest {
    this.turns.flush();
    this.conv.startRound();
    const { notes, warnings, reasoningEffort } = this.conv.takeAdvice();
    const said = [...notes, ...warnings];
    if (said.length === 0 && reasoningEffort === undefined) return request;
    const out: ModelRequest = { ...request };
    if (said.length > 0) {
      const input: AgentInputItem[] = typeof request.input === "string" ? [{ type: "message", role: "user", content: request.input }] : [...request.input];
      input.push({ type: "message", role: "user", content: said.join("\n") });
      out.input = input;
    }
    if (reasoningEffort !== undefined) {
      const reasoning = { ...request.modelSettings.reasoning, effort: reasoningEffort } as NonNullable<ModelRequest["modelSettings"]["reasoning"]>;
      out.modelSettings = { ...request.modelSettings, reasoning };
    }
    return out;
  }

  /** A response: its reasoning (unless streamed), its text, then its turn's end. */
  private published(output: readonly unknown[], usage: Usage | undefined, streamedReasoning: boolean): void {
    if (!streamedReasoning) this.conv.reasoning(texts(output, "reasoning"), true);
    const text = texts(output, "message");
    if (text.length > 0) this.conv.send(this.conv.session.assistantMessage(text));
    this.turns.responded(output, usage);
  }
}

/** The provider `run()` uses by default, from the SDK the application loaded. */
async function defaultProvider(): Promise<ModelProvider> {
  const sdk = await import("@openai/agents");
  return new sdk.Runner().config.modelProvider;
}

/** The text of a raw reasoning delta (Responses API events), else undefined. */
function reasoningDelta(raw: unknown): string | undefined {
  const e = raw as { type?: unknown; delta?: unknown } | null;
  if (typeof e?.type !== "string" || typeof e.delta !== "string") return undefined;
  return /^response\.reasoning(_summary)?_text\.delta$/.test(e.type) ? e.delta : undefined;
}

/** The text parts of the output items of one kind (`reasoning`, or assistant `message`). */
function texts(output: readonly unknown[], kind: "reasoning" | "message"): string {
  const parts: string[] = [];
  for (const item of output as { type?: string; role?: string; content?: unknown }[]) {
    if (item.type !== kind || (kind === "message" && item.role !== "assistant")) continue;
    if (typeof item.content === "string") parts.push(item.content);
    else if (Array.isArray(item.content))
      for (const c of item.content as { type?: string; text?: unknown }[])
        if (typeof c.text === "string" && c.type !== "refusal") parts.push(c.text);
  }
  return parts.join("");
}

function parseArgs(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

/** The text of the last user message of a run's input, or "". */
function lastUserText(items: AgentInputItem[]): string {
  for (let i = items.length - 1; i >= 0; i--) {
    const m = items[i] as { role?: string; content?: unknown };
    if (m.role !== "user") continue;
    if (typeof m.content === "string") return m.content;
    if (Array.isArray(m.content))
      return (m.content as { type?: string; text?: unknown }[])
        .filter((c) => typeof c.text === "string")
        .map((c) => c.text as string)
        .join("\n");
    return "";
  }
  return "";
}
