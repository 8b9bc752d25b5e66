/** The wire contract's messages as typed values (docs/contract.md, version 1). */
import { createHash } from "node:crypto";

/** What the guard asks of the runtime. */
export type Action = "warn" | "steer" | "block" | "abort";
const ACTIONS: readonly string[] = ["warn", "steer", "block", "abort"];

export type Effect = "mutation" | "read" | "none" | "unknown";

export interface Directives {
  reasoningEffort?: string;
  stopToolCalls: boolean;
  prefixWarning?: string;
}

/** One verdict of the guard, as read from the verdicts topic. */
export interface Verdict {
  verdictId: string;
  sessionId: string;
  eventId: string;
  action: Action;
  rule: string;
  message: string;
  attempt: number;
  ts: string;
  directives: Directives;
  evidence: Readonly<Record<string, unknown>>;
  turnId?: string;
  emittedAt?: string;
  tenant?: string;
  agent?: string;
  model?: string;
  /** False for a verdict in observe mode: counted by the guard, not to be acted on. Guards
   * that do not write the field enforce every verdict, so absent reads as true. */
  enforce: boolean;
  /** The policy that produced the verdict (`sha256:` + 12 hex); absent from older guards. */
  policyVersion?: string;
  /** What the loop has cost so far; absent from guards that do not account usage. */
  loopCost?: LoopCost;
  /** Where it was read, and when (Date.now() of this process). */
  partition: number;
  offset: string;
  receivedAt: number;
}

/** What a detected loop has cost so far (a verdict's `loop_cost`; every part optional). */
export interface LoopCost {
  tokens?: number;
  seconds?: number;
  cost?: number;
}

/** What one model response used (sent on `turn_end` or `assistant_message`). Token counts
 * are integers in 0..100,000,000, `cost` a number in 0..1,000,000 (the operator's
 * currency); the guard dead-letters an event outside those bounds. */
export interface Usage {
  inputTokens?: number;
  outputTokens?: number;
  cost?: number;
}

export function usageToWire(u: Usage): Record<string, unknown> {
  const out: Record<string, unknown> = { input_tokens: u.inputTokens, output_tokens: u.outputTokens, cost: u.cost };
  for (const k of Object.keys(out)) if (out[k] === undefined) delete out[k];
  return out;
}

function parseLoopCost(raw: unknown): LoopCost | undefined {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) return undefined;
  const r = raw as Record<string, unknown>;
  const num = (name: string): number | undefined => (typeof r[name] === "number" ? (r[name] as number) : undefined);
  return { tokens: Number.isInteger(r.tokens) ? (r.tokens as number) : undefined, seconds: num("seconds"), cost: num("cost") };
}

function str(raw: Record<string, unknown>, name: string): string {
  const v = raw[name];
  if (typeof v !== "string") throw new Error(`verdict field ${name} missing or not a string`);
  return v;
}

function opt(raw: Record<string, unknown>, name: string): string | undefined {
  const v = raw[name];
  return typeof v === "string" ? v : undefined;
}

/** Parses one verdict; throws when a field the contract requires is wrong. Unknown fields
 * are ignored (the contract's additive changes). */
export function parseVerdict(raw: unknown, partition: number, offset: string, receivedAt: number): Verdict {
  if (typeof raw !== "object" || raw === null) throw new Error("verdict is not an object");
  const r = raw as Record<string, unknown>;
  if (r.v !== 1) throw new Error(`unsupported verdict version ${String(r.v)}`);
  const action = str(r, "action");
  if (!ACTIONS.includes(action)) throw new Error(`unknown action ${action}`);
  if (typeof r.attempt !== "number") throw new Error("verdict field attempt missing or not a number");
  const d = (typeof r.directives === "object" && r.directives !== null ? r.directives : {}) as Record<string, unknown>;
  if (r.enforce !== undefined && typeof r.enforce !== "boolean") throw new Error("verdict field enforce is not a boolean");
  return {
    verdictId: str(r, "verdict_id"),
    sessionId: str(r, "session_id"),
    eventId: str(r, "event_id"),
    action: action as Action,
    rule: str(r, "rule"),
    message: str(r, "message"),
    attempt: r.attempt,
    ts: str(r, "ts"),
    directives: {
      reasoningEffort: opt(d, "reasoning_effort"),
      stopToolCalls: d.stop_tool_calls === true,
      prefixWarning: opt(d, "prefix_warning"),
    },
    evidence: typeof r.evidence === "object" && r.evidence !== null ? (r.evidence as Record<string, unknown>) : {},
    turnId: opt(r, "turn_id"),
    emittedAt: opt(r, "emitted_at"),
    tenant: opt(r, "tenant"),
    agent: opt(r, "agent"),
    model: opt(r, "model"),
    enforce: r.enforce !== false,
    policyVersion: opt(r, "policy_version"),
    loopCost: parseLoopCost(r.loop_cost),
    partition,
    offset,
    receivedAt,
  };
}

/** JSON with sorted keys and no spaces: equal values encode (and hash) alike. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const obj = value as Record<string, unknown>;
    const keys = Object.keys(obj).filter((k) => obj[k] !== undefined).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/** A short stable hash of a tool's output (the Python client's `output_hash` gives the
 * same value for the same bytes, string or JSON value). */
export function outputHash(output: unknown): string {
  const data = Buffer.isBuffer(output) ? output : Buffer.from(typeof output === "string" ? output : canonicalJson(output));
  return createHash("sha256").update(data).digest("hex").slice(0, 16);
}

/** What the runtime can prove about a tool result (every field optional). */
export interface Evidence {
  effect?: Effect;
  resource?: string;
  stateBefore?: string;
  stateAfter?: string;
  readRange?: [number, number];
  outputHash?: string;
  newInfo?: boolean;
}

export const evidence = {
  /** A read of `resource`; `output` (if given) is hashed. */
  read(resource: string, output?: unknown, readRange?: [number, number]): Evidence {
    return { effect: "read", resource, readRange, outputHash: output === undefined ? undefined : outputHash(output) };
  },
  /** A change to `resource`; equal before and after tells the guard it achieved nothing. */
  mutation(resource: string, before: unknown, after: unknown): Evidence {
    return { effect: "mutation", resource, stateBefore: outputHash(before), stateAfter: outputHash(after) };
  },
  /** A call without side effects whose output is hashed (status polls, searches). */
  observed(output: unknown, newInfo?: boolean): Evidence {
    return { effect: "none", outputHash: outputHash(output), newInfo };
  },
};

export function evidenceToWire(e: Evidence): Record<string, unknown> {
  const out: Record<string, unknown> = {
    effect: e.effect,
    resource: e.resource,
    state_before: e.stateBefore,
    state_after: e.stateAfter,
    read_range: e.readRange,
    output_hash: e.outputHash,
    new_info: e.newInfo,
  };
  for (const k of Object.keys(out)) if (out[k] === undefined) delete out[k];
  return out;
}

/** What the runtime itself allows one user request (sent on `user_message`). */
export interface Limits {
  maxToolRounds?: number;
}

/** Counters of one `Guard`. Background problems show up here, never thrown. */
export interface Stats {
  eventsSent: number;
  eventsFailed: number;
  verdictsDelivered: number;
  /** Verdicts of rules in observe mode (`enforce` false): delivered apart, never acted on. */
  verdictsObserved: number;
  verdictsDuplicate: number;
  verdictsOtherSessions: number;
  verdictsInvalid: number;
  callbackErrors: number;
  backgroundErrors: number;
  toolCallDeadlines: number;
  /** Tool calls made before the guard was connected: answered fail-open at once, their
   * events sent once it is. */
  toolCallsNotConnected: number;
  /** Tool calls made while the broker refused this client Read on its verdicts topic or
   * Write on the events topic (TOPIC_AUTHORIZATION_FAILED, said once): answered fail-open at
   * once, their events still sent. */
  toolCallsRefused: number;
  /** Events published before the guard was connected beyond `backlogCapacity`: dropped. */
  eventsOverflowed: number;
  /** Tool calls answered "no verdict" by a judged-through marker, before their deadline. */
  toolCallsNoVerdict: number;
  markersSeen: number;
  markersInvalid: number;
  readerRestarts: number;
}

export function emptyStats(): Stats {
  return {
    eventsSent: 0,
    eventsFailed: 0,
    verdictsDelivered: 0,
    verdictsObserved: 0,
    verdictsDuplicate: 0,
    verdictsOtherSessions: 0,
    verdictsInvalid: 0,
    callbackErrors: 0,
    backgroundErrors: 0,
    toolCallDeadlines: 0,
    toolCallsNotConnected: 0,
    toolCallsRefused: 0,
    eventsOverflowed: 0,
    toolCallsNoVerdict: 0,
    markersSeen: 0,
    markersInvalid: 0,
    readerRestarts: 0,
  };
}
