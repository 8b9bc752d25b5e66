/**
 * What the Kafka library says, kept out of the agent's output: kafkajs's own lines go to
 * the `logger` option at `debug`, and an outage of the broker is said once per change of
 * state (`warn` when it goes, `info` when it is back). Without a logger nothing is logged.
 */
import kafkajs from "kafkajs";
import type { KafkaConfig, LogEntry } from "kafkajs";
import type { Scrubber } from "./settings.js";

/** Any console-like logger (`console` itself will do). */
export interface Logger {
  debug?: (message: string, extra?: Record<string, unknown>) => void;
  info?: (message: string, extra?: Record<string, unknown>) => void;
  warn?: (message: string, extra?: Record<string, unknown>) => void;
}

/** The kafkajs settings that route its lines to `logger` at debug (none: silent), never
 * with a secret of the configuration in them, and its connection errors to `reach` (kafkajs
 * retries those itself and reports nothing else). */
export function libraryLog(logger: Logger | undefined, reach: Reachability, scrub?: Scrubber): Pick<KafkaConfig, "logLevel" | "logCreator"> {
  if (logger === undefined) return { logLevel: kafkajs.logLevel.NOTHING };
  const debug = logger.debug?.bind(logger);
  return {
    logLevel: kafkajs.logLevel.INFO,
    logCreator:
      () =>
      ({ namespace, level, log }: LogEntry) => {
        const { message, ...extra } = log;
        debug?.(`kafkajs ${namespace}: ${scrub ? scrub.text(String(message)) : message}`, scrub ? (scrub.extra(extra) as Record<string, unknown>) : extra);
        if (level === kafkajs.logLevel.ERROR && /ECONNREFUSED|ECONNRESET|ETIMEDOUT|Connection (error|timeout)|Closed connection/.test(message))
          reach.problem(namespace, new Error(message));
      },
  };
}

// kafkajs errors that say only that the broker cannot be reached now (it retries them).
const UNREACHABLE = new Set([
  "KafkaJSConnectionError",
  "KafkaJSConnectionClosedError",
  "KafkaJSRequestTimeoutError",
  "KafkaJSBrokerNotFound",
  "KafkaJSGroupCoordinatorNotFound",
  "KafkaJSNumberOfRetriesExceeded",
]);

/** The first error in `e`'s chain (causes, a retry's original error) that says what kafkajs
 * `type` it is, when it is one of `types`. */
function findType(e: unknown, types: Set<string>): { type: string; name: string } | undefined {
  const seen = new Set<unknown>();
  const todo: unknown[] = [e];
  while (todo.length > 0 && seen.size < 16) {
    const x = todo.shift() as { type?: unknown; name?: unknown; cause?: unknown; originalError?: unknown; errors?: unknown } | undefined;
    if (x === null || typeof x !== "object" || seen.has(x)) continue;
    seen.add(x);
    if (typeof x.type === "string" && types.has(x.type)) return { type: x.type, name: String(x.name) };
    if (typeof x.name === "string" && types.has(x.name)) return { type: x.name, name: x.name };
    todo.push(x.cause, x.originalError, ...(Array.isArray(x.errors) ? x.errors : []));
  }
  return undefined;
}

/** "TOPIC_AUTHORIZATION_FAILED" (or "CLUSTER_AUTHORIZATION_FAILED": an idempotent producer
 * with Write on no topic) when `e` says the broker refused this client an operation. */
export function authorizationFailed(e: unknown): string | undefined {
  return findType(e, new Set(["TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"]))?.type;
}

/** True when `e` says the broker refused this client's login (SASL). */
export function loginRefused(e: unknown): boolean {
  return findType(e, new Set(["KafkaJSSASLAuthenticationError", "SASL_AUTHENTICATION_FAILED", "ILLEGAL_SASL_STATE", "UNSUPPORTED_SASL_MECHANISM"])) !== undefined;
}

/** True for an error that says only that the broker is away. */
export function unreachable(e: unknown): boolean {
  for (let x: unknown = e, depth = 0; x instanceof Error && depth < 4; x = (x as { cause?: unknown }).cause, depth++) {
    if (UNREACHABLE.has(x.name) || /ECONNREFUSED|ECONNRESET|ETIMEDOUT/.test(x.message)) return true;
  }
  return false;
}

/** The broker's state as this process sees it; says each change once. */
export class Reachability {
  private down = false;
  private loginSaid = false;

  constructor(
    private readonly brokers: string,
    private readonly logger: Logger | undefined,
    private readonly scrub?: Scrubber,
  ) {}

  /** A background problem: the first that says the broker is away is logged, once; so is
   * the first that says it refused this client's login. */
  problem(where: string, e: unknown): void {
    const text = this.scrub ? this.scrub.text(String(e)) : String(e);
    if (loginRefused(e)) {
      if (this.loginSaid) return;
      this.loginSaid = true;
      this.logger?.warn?.(
        `loopguard: Kafka at ${this.brokers} refused this client's login (${where}: ${text}); tool calls run unguarded (fail-open) until it accepts it: check the sasl/ssl settings`,
      );
      return;
    }
    if (this.down || !(unreachable(e) || where === "Connection")) return;
    this.down = true;
    if (this.loginSaid) return; // why was said already
    this.logger?.warn?.(`loopguard: Kafka at ${this.brokers} is unreachable (${where}: ${text}); tool calls run unguarded until it is back`);
  }

  /** Something reached the broker. */
  back(): void {
    this.loginSaid = false;
    if (!this.down) return;
    this.down = false;
    this.logger?.info?.(`loopguard: Kafka at ${this.brokers} is reachable again`);
  }
}
