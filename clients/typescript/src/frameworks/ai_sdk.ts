/**
 * Vercel AI SDK adapter (`@loopguard/client/ai-sdk`): guards the tool loop of
 * `generateText`, `streamText` and `ToolLoopAgent` by wrapping the settings they are given.
 *
 *     const result = await generateText(withLoopguard(session, { model, tools, prompt, stopWhen: stepCountIs(10) }));
 *
 * - the run starts (the first step): the last user message is published as `user_message`;
 * - each tool's `execute` is wrapped: the call is published as `tool_call` and waits for the
 *   guard's answer before the tool runs; a refused call is not run, it throws
 *   `LoopguardRefusal`, which the SDK hands the model as the call's error result (the
 *   verdict's message); the result is published as `tool_result` with its output's hash;
 * - `streamText`'s reasoning and text deltas are published as they stream (`onChunk`), so a
 *   reasoning loop is caught mid-stream; otherwise the step's reasoning is sent whole;
 * - a model call's text is published as `assistant_message`, each step's end as `turn_end`
 *   with the SDK's usage figures;
 * - `prepareStep` gives the next model call the steers and warns received since the last
 *   one (a warn for that call only) and their reasoning effort; after an abort it gives the
 *   abort's message and no tools, so the model writes its status summary, and the stop
 *   condition ends the run after it (with no `stopWhen` of yours the SDK's default holds:
 *   the summary step has no tool calls, which ends the loop).
 * The SDK is not imported at run time: only its types.
 */
import type { LanguageModelCallEndEvent, ModelMessage, PrepareStepFunction, PrepareStepResult, StepResult, StopCondition, TextStreamPart, ToolSet } from "ai";
import type { Session } from "../guard.js";
import { Conversation, LoopguardRefusal, usageOf, type AdapterOptions } from "./conversation.js";

export { LoopguardRefusal, type AdapterOptions } from "./conversation.js";

type Hook<E> = (event: E) => PromiseLike<void> | void;
type AnyTools = ToolSet;
type Step = StepResult<AnyTools>;
type Prepared = NonNullable<PrepareStepResult<AnyTools>>;

/** The settings the guard takes part in (of `generateText`, `streamText`, `ToolLoopAgent`). */
interface Hooked {
  tools?: AnyTools;
  prepareStep?: PrepareStepFunction<AnyTools>;
  stopWhen?: StopCondition<AnyTools> | Array<StopCondition<AnyTools>>;
  onChunk?: Hook<{ chunk: TextStreamPart<AnyTools> }>;
  onLanguageModelCallEnd?: Hook<LanguageModelCallEndEvent<AnyTools>>;
  experimental_onLanguageModelCallEnd?: Hook<LanguageModelCallEndEvent<AnyTools>>;
  onStepEnd?: Hook<Step>;
  onStepFinish?: Hook<Step>;
}

/** `settings` with every tool call checked by the guard and the run published to it. Give
 * it a session per conversation; your own hooks (`prepareStep`, `onChunk`, `onStepEnd`, ...)
 * still run. */
export function withLoopguard<T extends object>(session: Session, settings: T, options: AdapterOptions = {}): T {
  const s = settings as T & Hooked;
  const conv = Conversation.of(session, options);
  /** Whether this model call streamed its reasoning (then it is not sent again whole). */
  let streamedReasoning = false;
  /** Warnings given to one model call: taken out of the messages for the next. */
  const warned = new Set<string>();

  const prepareStep: PrepareStepFunction<AnyTools> = async (o) => {
    if (o.stepNumber === 0) conv.startRun(lastUserText(o.initialMessages.length > 0 ? o.initialMessages : o.messages));
    conv.startRound();
    streamedReasoning = false;
    const yours: Prepared = (await s.prepareStep?.(o)) ?? {};
    const { notes, warnings, reasoningEffort, abort } = conv.takeAdvice();
    const base = yours.messages ?? o.messages;
    const kept = base.filter((m) => !(m.role === "user" && typeof m.content === "string" && warned.has(m.content)));
    const said = [...notes, ...warnings, ...(abort === undefined ? [] : [abort.message])];
    for (const w of warnings) warned.add(w);
    const out: Prepared = { ...yours };
    if (said.length > 0 || kept.length !== base.length)
      out.messages = said.length > 0 ? [...kept, { role: "user", content: said.join("\n") }] : kept;
    if (reasoningEffort !== undefined) out.reasoning = reasoningEffort as Prepared["reasoning"];
    if (conv.aborted !== undefined) {
      out.activeTools = [];
      out.toolChoice = "none";
    }
    return out;
  };

  const onChunk: Hook<{ chunk: TextStreamPart<AnyTools> }> = (event) => {
    const c = event.chunk;
    if (c.type === "reasoning-delta") {
      streamedReasoning = true;
      conv.reasoning(c.text);
    } else if (c.type === "text-delta") conv.content(c.text);
    return s.onChunk?.(event);
  };

  const yourCallEnd = s.onLanguageModelCallEnd ?? s.experimental_onLanguageModelCallEnd;
  const onLanguageModelCallEnd: Hook<LanguageModelCallEndEvent<AnyTools>> = (event) => {
    if (!streamedReasoning)
      conv.reasoning(
        event.content
          .filter((p) => p.type === "reasoning")
          .map((p) => (p as { text: string }).text)
          .join(""),
        true,
      );
    const text = event.content
      .filter((p) => p.type === "text")
      .map((p) => (p as { text: string }).text)
      .join("");
    if (text.length > 0) conv.send(session.assistantMessage(text));
    return yourCallEnd?.(event);
  };

  const yourStepEnd = s.onStepEnd ?? s.onStepFinish;
  const onStepEnd: Hook<Step> = (step) => {
    conv.send(session.turnEnd({ usage: usageOf(step.usage?.inputTokens, step.usage?.outputTokens) }));
    return yourStepEnd?.(step);
  };

  const out: Record<string, unknown> = { ...s, prepareStep, onChunk, onLanguageModelCallEnd, onStepEnd };
  delete out.onStepFinish;
  delete out.experimental_onLanguageModelCallEnd;
  if (s.tools !== undefined) out.tools = guardTools(s.tools, conv);
  if (s.stopWhen !== undefined) {
    // After the abort's summary step: the run ends here, whatever the model asked for.
    const summarized: StopCondition<AnyTools> = () => conv.aborted !== undefined && conv.abortDelivered;
    out.stopWhen = [...(Array.isArray(s.stopWhen) ? s.stopWhen : [s.stopWhen]), summarized];
  }
  return out as T;
}

type Execute = (input: unknown, options: { toolCallId: string }) => unknown;

/** Each tool with an `execute` of its own, checked before it runs; others as they are. */
function guardTools(tools: AnyTools, conv: Conversation): AnyTools {
  const out: Record<string, unknown> = {};
  for (const [name, tool] of Object.entries(tools)) {
    const execute = (tool as { execute?: Execute }).execute;
    if (typeof execute !== "function") {
      out[name] = tool;
      continue;
    }
    // A tool that streams its output (an async generator) stays one.
    const streaming = Object.prototype.toString.call(execute) === "[object AsyncGeneratorFunction]";
    const run = async (input: unknown, opts: { toolCallId: string }) => {
      const refused = await conv.check(name, input, opts.toolCallId);
      if (refused !== null) throw new LoopguardRefusal(refused);
    };
    out[name] = {
      ...tool,
      execute: streaming
        ? async function* (input: unknown, opts: { toolCallId: string }) {
            await run(input, opts);
            let last: unknown = null;
            try {
              for await (const part of execute.call(tool, input, opts) as AsyncIterable<unknown>) yield (last = part);
            } catch (e) {
              conv.result(name, opts.toolCallId, { error: e });
              throw e;
            }
            conv.result(name, opts.toolCallId, { ok: last });
          }
        : async (input: unknown, opts: { toolCallId: string }) => {
            await run(input, opts);
            try {
              const output = await execute.call(tool, input, opts);
              conv.result(name, opts.toolCallId, { ok: output });
              return output;
            } catch (e) {
              conv.result(name, opts.toolCallId, { error: e });
              throw e;
            }
          },
    };
  }
  return out as AnyTools;
}

/** The text of the last user message (its text parts joined), or "" when there is none. */
function lastUserText(messages: ModelMessage[]): string {
  const m = [...messages].reverse().find((x) => x.role === "user");
  if (m === undefined) return "";
  if (typeof m.content === "string") return m.content;
  return m.content
    .filter((p) => p.type === "text")
    .map((p) => (p as { text: string }).text)
    .join("\n");
}
