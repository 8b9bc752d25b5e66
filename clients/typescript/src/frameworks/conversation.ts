/**
 * What every framework adapter shares: one session's verdicts still to apply, and the
 * check of a tool call before it runs. No framework is imported here (nor in the core):
 * each adapter is its own subpath export with its framework as an optional peer.
 *
 * How each action is applied (docs/contract.md, "What a runtime does with each action"):
 * - `block` on a call: the call is refused (not run) and answered with the verdict's
 *   message; the round's later calls are refused the same way;
 * - `abort`: every call from then on is refused; the next model call gets the message and
 *   no tools (its status summary), and the run ends the framework's way;
 * - `steer` and `warn` (on a call, a result, or mid-stream): their message goes into the
 *   next model call, with `directives.reasoningEffort` where the framework takes one;
 * - observe verdicts (`enforce` false) only reach `onObserved`.
 * Publishing never waits on Kafka: events are queued in order and the agent goes on; only a
 * tool call waits for the guard's answer, at most its deadline (fail-open).
 */
import type { ErrorCallback, Session, VerdictCallback } from "../guard.js";
import { outputHash, type Usage, type Verdict } from "../types.js";
import { MAX_ERROR_CHARS, MAX_USAGE_TOKENS } from "../validate.js";

/** What every adapter accepts besides the session. */
export interface AdapterOptions {
  /** Verdicts of rules in observe mode (`enforce` false): what the guard would have done.
   * Never acted on. */
  onObserved?: VerdictCallback;
  /** Problems publishing an event (one the contract refuses); the agent goes on. */
  onError?: ErrorCallback;
  /** The longest a tool call waits for the guard's answer (default: the `Guard`'s
   * `toolCallDeadlineMs`); past it the call runs (fail-open). */
  deadlineMs?: number;
  /** Your own max-iterations setting, announced with each user message
   * (`limits.max_tool_rounds`): the guard aborts past it. */
  maxToolRounds?: number;
}

/** The error a refused call is answered with: the model reads `message` as the call's
 * (failed) result. */
export class LoopguardRefusal extends Error {
  constructor(readonly verdict: Verdict) {
    super(verdict.message);
    this.name = "LoopguardRefusal";
  }

  /** The message alone: frameworks that show the model `String(error)` show it this. */
  override toString(): string {
    return this.message;
  }
}

export class Conversation {
  /** Steers and warns for the next model call. */
  private advice: Verdict[] = [];
  /** A block in the current round: the round's later calls are refused with it. */
  private refusing: Verdict | undefined;
  /** The abort of this run, once one came. */
  aborted: Verdict | undefined;
  /** Whether the abort's message has gone to the model (the summary call). */
  abortDelivered = false;

  private static readonly bySession = new WeakMap<Session, Conversation>();
  private stopObserving: () => void = () => undefined;

  private constructor(
    readonly session: Session,
    public options: AdapterOptions,
  ) {
    session.onVerdict((v) => {
      if (v.action === "steer" || v.action === "warn") this.advice.push(v);
      else if (v.action === "abort") this.aborted ??= v;
    });
  }

  /** The session's conversation: one per session however often an adapter wraps it (a
   * wrap per request is common), so advice left over from one run reaches the next and
   * no callbacks pile up on the session. The latest options apply. */
  static of(session: Session, options: AdapterOptions = {}): Conversation {
    let conv = Conversation.bySession.get(session);
    if (conv === undefined) Conversation.bySession.set(session, (conv = new Conversation(session, options)));
    conv.options = options;
    conv.stopObserving();
    conv.stopObserving = options.onObserved === undefined ? () => undefined : session.onObserved(options.onObserved);
    return conv;
  }

  /** A new run of the agent (a new user request): the last run's abort is over; advice
   * that came after the last run's last model call still goes to the next one. */
  startRun(userText: string): void {
    this.aborted = undefined;
    this.abortDelivered = false;
    this.refusing = undefined;
    const limits = this.options.maxToolRounds === undefined ? undefined : { maxToolRounds: this.options.maxToolRounds };
    this.send(this.session.userMessage(userText, { limits }));
  }

  /** A new model call: the last round's block no longer refuses anything. */
  startRound(): void {
    this.refusing = undefined;
  }

  /** Publishes the call and waits for the guard's answer: the verdict refusing it (do not
   * run it; answer with its message), or null (run it). Calls after a block in the same
   * round, or after an abort, are refused without being published. */
  async check(tool: string, args: unknown, callId?: string): Promise<Verdict | null> {
    const refused = this.aborted ?? this.refusing;
    if (refused !== undefined) return refused;
    let v: Verdict | null;
    try {
      v = await this.session.toolCall(tool, args ?? {}, { callId, deadlineMs: this.options.deadlineMs });
    } catch (e) {
      this.report("tool_call", e); // an event the contract refuses: the call runs unguarded
      return null;
    }
    if (v === null || (v.action !== "block" && v.action !== "abort")) return null;
    if (v.action === "abort") this.aborted ??= v;
    else this.refusing ??= v;
    return v;
  }

  /** The call ran: its status and the hash of its output (or the error). The effect of a
   * framework's tool is unknown here, so none is claimed: the guard never reads "no
   * progress" into a result it cannot judge. */
  result(tool: string, callId: string | undefined, output: { ok: unknown } | { error: unknown }): void {
    if ("ok" in output) {
      this.send(this.session.toolResult(tool, { callId, status: "ok", evidence: { outputHash: outputHash(output.ok ?? null) } }));
    } else {
      const error = output.error instanceof Error ? output.error.message : String(output.error);
      this.send(this.session.toolResult(tool, { callId, status: "error", error: error.slice(0, MAX_ERROR_CHARS) }));
    }
  }

  reasoning(text: string, final = false): void {
    if (text.length > 0) this.send(this.session.reasoning(text, { final }));
  }

  content(text: string): void {
    if (text.length > 0) this.send(this.session.content(text));
  }

  /** A finished response: its visible text (if any), then the end of the turn with what the
   * response used. */
  responseEnd(text: string, usage: Usage | undefined): void {
    if (text.length > 0) this.send(this.session.assistantMessage(text));
    this.send(this.session.turnEnd({ usage }));
  }

  /** What the next model call must hear: the steers and warns received since the last one
   * (each once), and an abort's message (once); the reasoning effort a steer asks for. */
  takeAdvice(): { notes: string[]; warnings: string[]; reasoningEffort?: string; abort?: Verdict } {
    const advice = this.advice;
    this.advice = [];
    const notes = advice.filter((v) => v.action === "steer").map((v) => v.message);
    const warnings = advice.filter((v) => v.action === "warn").map((v) => v.message);
    const reasoningEffort = advice.map((v) => v.directives.reasoningEffort).find((e) => e !== undefined);
    let abort: Verdict | undefined;
    if (this.aborted !== undefined && !this.abortDelivered) {
      abort = this.aborted;
      this.abortDelivered = true;
    }
    return { notes, warnings, reasoningEffort, abort };
  }

  /** Publishing without waiting: events go out in order, a failure is reported. */
  send(p: Promise<void>): void {
    p.catch((e) => this.report("publish", e));
  }

  report(where: string, e: unknown): void {
    try {
      this.options.onError?.(where, e);
    } catch {
      // a failing callback must not break the agent
    }
  }
}

/** Token counts as the contract takes them: integers in range, else left out. */
export function usageOf(input: unknown, output: unknown): Usage | undefined {
  const count = (n: unknown) => (typeof n === "number" && Number.isInteger(n) && n >= 0 && n <= MAX_USAGE_TOKENS ? n : undefined);
  const u: Usage = { inputTokens: count(input), outputTokens: count(output) };
  return u.inputTokens === undefined && u.outputTokens === undefined ? undefined : u;
}
