/** Checks an event against the contract's limits before it is published: the guard would
 * dead-letter it unjudged; an exception here names the field at the line that built it. */

export const MAX_EVENT_ID = 128;
export const MAX_SESSION_ID = 256;
export const MAX_NAME = 256;
export const MAX_EVIDENCE_STRING = 1024;
/** Longer error texts are cut by the guard (compared, not kept whole); adapters cut them here. */
export const MAX_ERROR_CHARS = 4096;
/** Most tool rounds a user message may announce (`limits.max_tool_rounds`). */
export const MAX_TOOL_ROUNDS = 1_000_000;
/** A feedback event's verdict id; its note is cut at MAX_NOTE_CHARS by the guard. */
export const MAX_VERDICT_ID = 128;
export const MAX_NOTE_CHARS = 1024;
/** Kafka's default largest record is 1 MiB; room is left for the key and overhead. */
export const MAX_EVENT_BYTES = 1_000_000;
const EFFECTS = ["mutation", "read", "none", "unknown"];
/** docs/contract.md, "usage": per model response. */
export const MAX_USAGE_TOKENS = 100_000_000;
export const MAX_USAGE_COST = 1_000_000;
const TURN_TYPES = ["assistant_message", "tool_call", "reasoning", "content", "turn_end"];

/** An event breaks the contract; `field` names the offending field. */
export class ValidationError extends Error {
  constructor(
    readonly field: string,
    problem: string,
  ) {
    super(`${field}: ${problem}`);
    this.name = "ValidationError";
  }
}

type Event = Record<string, unknown>;

function checkString(e: Event, name: string, lo: number, hi: number, required: boolean, label = name): void {
  const v = e[name];
  if (v === undefined || v === null) {
    if (required) throw new ValidationError(label, "is required");
    return;
  }
  if (typeof v !== "string") throw new ValidationError(label, `must be a string, not ${typeof v}`);
  if (v.length < lo || v.length > hi) throw new ValidationError(label, `must be ${lo}..${hi} characters (got ${v.length})`);
}

/** Validates `event`; returns its JSON encoding, ready to publish. */
export function checkEvent(e: Event): string {
  if (e.v !== 1) throw new ValidationError("v", "must be 1");
  checkString(e, "event_id", 1, MAX_EVENT_ID, true);
  checkString(e, "session_id", 1, MAX_SESSION_ID, true);
  if (!(typeof e.ts === "string" || Number.isInteger(e.ts)))
    throw new ValidationError("ts", "must be epoch milliseconds (integer) or an RFC 3339 string");
  checkString(e, "type", 1, MAX_NAME, true);
  const kind = e.type as string;
  checkString(e, "turn_id", 1, MAX_NAME, TURN_TYPES.includes(kind));
  for (const name of ["tenant", "agent", "model"]) checkString(e, name, 0, MAX_NAME, false);
  if (["user_message", "assistant_message", "reasoning", "content"].includes(kind))
    checkString(e, "text", 0, MAX_EVENT_BYTES, true);
  if (kind === "user_message" && e.limits !== undefined) {
    const rounds = (e.limits as Record<string, unknown>).max_tool_rounds;
    if (rounds !== undefined && !(Number.isInteger(rounds) && (rounds as number) >= 1 && (rounds as number) <= MAX_TOOL_ROUNDS))
      throw new ValidationError("limits.max_tool_rounds", `must be an integer in 1..${MAX_TOOL_ROUNDS}`);
  }
  if ((kind === "turn_end" || kind === "assistant_message") && e.usage !== undefined && e.usage !== null)
    checkUsage(e.usage);
  if (kind === "feedback") {
    checkString(e, "verdict_id", 1, MAX_VERDICT_ID, true);
    if (typeof e.useful !== "boolean") throw new ValidationError("useful", "must be a boolean");
    if (e.note !== undefined && typeof e.note !== "string") throw new ValidationError("note", "must be a string");
  }
  if (kind === "tool_call" || kind === "tool_result") {
    checkString(e, "call_id", 1, MAX_NAME, true);
    checkString(e, "tool", 1, MAX_NAME, true);
  }
  if (kind === "tool_call" && !("args" in e)) throw new ValidationError("args", "is required (any JSON value)");
  if (kind === "tool_result") {
    if (e.status !== "ok" && e.status !== "error") throw new ValidationError("status", "must be 'ok' or 'error'");
    if (e.error !== undefined && typeof e.error !== "string") throw new ValidationError("error", "must be a string");
    if (e.evidence !== undefined) checkEvidence(e.evidence as Event);
  }
  let json: string;
  try {
    json = JSON.stringify(e);
  } catch (err) {
    throw new ValidationError(kind === "tool_call" ? "args" : "event", `is not JSON-serializable (${String(err)})`);
  }
  const bytes = Buffer.byteLength(json);
  if (bytes > MAX_EVENT_BYTES)
    throw new ValidationError(
      kind === "tool_call" ? "args" : "text" in e ? "text" : "event",
      `makes the event ${bytes} bytes; at most ${MAX_EVENT_BYTES} fit a Kafka record`,
    );
  return json;
}

function checkEvidence(ev: Event): void {
  if (typeof ev !== "object" || ev === null) throw new ValidationError("evidence", "must be an object");
  if (ev.effect !== undefined && !EFFECTS.includes(ev.effect as string))
    throw new ValidationError("evidence.effect", `must be one of ${EFFECTS.join(", ")}`);
  for (const name of ["resource", "state_before", "state_after", "output_hash"])
    checkString(ev, name, 0, MAX_EVIDENCE_STRING, false, `evidence.${name}`);
  const rr = ev.read_range;
  if (rr !== undefined) {
    const ok =
      Array.isArray(rr) &&
      rr.length === 2 &&
      rr.every((x) => Number.isInteger(x) && x >= 0) &&
      (rr[0] as number) <= (rr[1] as number);
    if (!ok) throw new ValidationError("evidence.read_range", "must be [start, end], integers, 0 <= start <= end");
  }
  if (ev.new_info !== undefined && typeof ev.new_info !== "boolean")
    throw new ValidationError("evidence.new_info", "must be a boolean");
}

/** As the guard checks it: integers (tokens) and a finite number (cost), in range. */
function checkUsage(u: unknown): void {
  if (typeof u !== "object" || u === null || Array.isArray(u)) throw new ValidationError("usage", "must be an object");
  const r = u as Record<string, unknown>;
  for (const name of ["input_tokens", "output_tokens"]) {
    const v = r[name];
    if (v === undefined || v === null) continue;
    if (typeof v !== "number" || !Number.isInteger(v))
      throw new ValidationError(`usage.${name}`, `must be an integer, not ${typeof v === "number" ? v : typeof v}`);
    if (v < 0 || v > MAX_USAGE_TOKENS)
      throw new ValidationError(`usage.${name}`, `must be in 0..${MAX_USAGE_TOKENS} (got ${v})`);
  }
  const cost = r.cost;
  if (cost !== undefined && cost !== null) {
    if (typeof cost !== "number") throw new ValidationError("usage.cost", `must be a number, not ${typeof cost}`);
    if (!(Number.isFinite(cost) && cost >= 0 && cost <= MAX_USAGE_COST))
      throw new ValidationError("usage.cost", `must be a finite number in 0..${MAX_USAGE_COST} (got ${cost})`);
  }
}
