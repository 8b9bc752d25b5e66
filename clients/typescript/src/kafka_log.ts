/**
 * What the Kafka library says, kept out of the agent's output: kafkajs's own lines go to
 * the `logger` option at `debug`, and an outage of the broker is said once per change of
 * state (`warn` when it goes, `info` when it is back). Without a logger nothing is logged.
 */
import kafkajs from "kafkajs";
import type { KafkaConfig, LogEntry } from "kafkajs";

/** Any console-like logger (`console` itself will do). */
export interface Logger {
  debug?: (message: string, extra?: Record<string, unknown>) => void;
  info?: (message: string, extra?: Record<string, unknown>) => void;
  warn?: (message: string, extra?: Record<string, unknown>) => void;
}

/** The kafkajs settings that route its lines to `logger` at debug (none: silent), and its
 * connection errors to `reach` (kafkajs retries those itself and reports nothing else). */
export function libraryLog(logger: Logger | undefined, reach: Reachability): Pick<KafkaConfig, "logLevel" | "logCreator"> {
  if (logger === undefined) return { logLevel: kafkajs.logLevel.NOTHING };
  const debug = logger.debug?.bind(logger);
  return {
    logLevel: kafkajs.logLevel.INFO,
    logCreator:
      () =>
      ({ namespace, level, log }: LogEntry) => {
        const { message, ...extra } = log;
        debug?.(`kafkajs ${namespace}: ${message}`, extra);
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

  constructor(
    private readonly brokers: string,
    private readonly logger: Logger | undefined,
  ) {}

  /** A background problem: the first that says the broker is away is logged, once. */
  problem(where: string, e: unknown): void {
    if (this.down || !(unreachable(e) || where === "Connection")) return;
    this.down = true;
    this.logger?.warn?.(`loopguard: Kafka at ${this.brokers} is unreachable (${where}: ${String(e)}); tool calls run unguarded until it is back`);
  }

  /** Something reached the broker. */
  back(): void {
    if (!this.down) return;
    this.down = false;
    this.logger?.info?.(`loopguard: Kafka at ${this.brokers} is reachable again`);
  }
}
