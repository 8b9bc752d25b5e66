/**
 * Runtime client for loopguard, the fleet-wide loop guard for LLM agents.
 *
 *     const guard = await Guard.connect({ brokers: ["kafka:9092"], agent: "coder" });
 *     const session = guard.session("sess-42");
 *     await session.userMessage("fix the build");
 *     const verdict = await session.toolCall("bash", { cmd: "cargo build" });
 *     if (verdict?.action === "block" || verdict?.action === "abort") { ... }
 *
 * The wire contract is docs/contract.md of the loopguard repository.
 */
export { Guard, GuardError, Session } from "./guard.js";
export type { ErrorCallback, GuardOptions, VerdictCallback } from "./guard.js";
export type { Logger } from "./kafka_log.js";
export { murmur2, partitionFor } from "./partitioner.js";
export { canonicalJson, evidence, outputHash, parseVerdict } from "./types.js";
export type { Action, Directives, Effect, Evidence, Limits, LoopCost, Stats, Usage, Verdict } from "./types.js";
export { ValidationError } from "./validate.js";
export { ConfigError } from "./settings.js";
export { registerLz4 } from "./lz4.js";
