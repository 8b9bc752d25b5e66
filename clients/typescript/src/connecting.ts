/**
 * Connecting in the background: what a `Guard` needs before it can guard a call (both topics
 * there with one partition count, where each verdict partition ends), asked again until the
 * broker answers it, whatever its state when the process started. Nothing here throws into
 * the agent: until it is done the `Guard` answers tool calls fail-open at once and keeps what
 * sessions publish (guard.ts).
 */
import type { Kafka } from "kafkajs";
import { authorizationFailed } from "./kafka_log.js";

export class GuardError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "GuardError";
  }
}

/** The broker answered, and the guard's topics are missing or differ in partition count,
 * or (`Refused`) this client may not use them. */
export class Misconfigured extends GuardError {}

/** The broker refused this client's principal `operation` (Read or Write) on `topic`. */
export class Refused extends Misconfigured {
  constructor(
    brokers: string,
    readonly topic: string,
    role: "events" | "verdicts",
    readonly operation: "Read" | "Write",
    how: { describe?: boolean; code?: string; cause?: unknown } = {},
  ) {
    const code = how.code ?? "TOPIC_AUTHORIZATION_FAILED";
    const detail = how.describe
      ? `${code} on Describe, which ${operation} includes; or the topic does not exist: Kafka does not tell a principal without Describe which`
      : code === "CLUSTER_AUTHORIZATION_FAILED"
        ? `${code}: an idempotent producer needs Write on a topic or IdempotentWrite on the cluster`
        : code;
    super(
      `Kafka at ${brokers} refused this client ${operation} on the ${role} topic \`${topic}\` (${detail}); tool calls run unguarded (fail-open) until its principal is granted ${operation} on \`${topic}\``,
      { cause: how.cause },
    );
  }
}

/** A broker that did not answer is asked again after this, doubling up to the max. */
export const UNREACHABLE_PAUSE_MS = 200;
export const UNREACHABLE_PAUSE_MAX_MS = 2000;
/** A broker that answers with the wrong topics is asked again after this, doubling up to
 * the max: the topics may be created after the agent started. */
export const MISCONFIGURED_PAUSE_MS = 500;
export const MISCONFIGURED_PAUSE_MAX_MS = 5000;

export interface Topics {
  brokers: string;
  eventsTopic: string;
  verdictsTopic: string;
}

/** Where each verdict partition ends now, and the events topic's partition count; throws
 * `Misconfigured` unless both topics exist with the same number of partitions. One try: a
 * broker that does not answer fails it at once (the caller asks again). */
export async function startOffsets(kafka: Kafka, t: Topics): Promise<{ start: Map<number, string>; partitions: number }> {
  const admin = kafka.admin({ retry: { retries: 0 } });
  try {
    await admin.connect();
    const topics = await admin.listTopics();
    for (const [name, role, operation] of [
      [t.eventsTopic, "events", "Write"],
      [t.verdictsTopic, "verdicts", "Read"],
    ] as const)
      if (!topics.includes(name)) {
        // Not listed: a broker with ACLs lists only the topics the principal may Describe.
        // Asked by name, it says which.
        const refused = await admin.fetchTopicMetadata({ topics: [name] }).then(
          () => undefined,
          (e: unknown) => (authorizationFailed(e) === "TOPIC_AUTHORIZATION_FAILED" ? e : undefined),
        );
        if (refused !== undefined) throw new Refused(t.brokers, name, role, operation, { describe: true, cause: refused });
        throw new Misconfigured(`topic \`${name}\` does not exist on ${t.brokers}: create the guard's topics with \`loopguard topics create --partitions N\``);
      }
    const { topics: md } = await admin.fetchTopicMetadata({ topics: [t.eventsTopic, t.verdictsTopic] });
    const partitions = md.find((x) => x.name === t.eventsTopic)?.partitions.length ?? 0;
    const verdictPartitions = md.find((x) => x.name === t.verdictsTopic)?.partitions.length ?? 0;
    if (partitions === 0 || partitions !== verdictPartitions)
      throw new Misconfigured(
        `\`${t.eventsTopic}\` has ${partitions} partitions and \`${t.verdictsTopic}\` ${verdictPartitions}: a verdict goes to its event's partition number, so both need the same count (docs/contract.md)`,
      );
    const start = new Map<number, string>();
    for (const { partition, offset } of await admin.fetchTopicOffsets(t.verdictsTopic)) start.set(partition, offset);
    return { start, partitions };
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}

/** Runs `attempt` until it succeeds or `stopped()`; each failure goes to `onProblem` once per
 * distinct problem (an outage once until connected), and `onAnswer` hears the first outcome. */
export async function connectLoop(
  t: Topics,
  attempt: () => Promise<void>,
  hooks: {
    stopped: () => boolean;
    onProblem: (e: GuardError, said: boolean) => void;
    onAnswer: () => void;
    sleep: (ms: number) => Promise<void>;
  },
): Promise<void> {
  let said = "";
  let outage = false;
  let unreachablePause = UNREACHABLE_PAUSE_MS;
  let misconfiguredPause = MISCONFIGURED_PAUSE_MS;
  while (!hooks.stopped()) {
    try {
      await attempt();
      hooks.onAnswer();
      return;
    } catch (e) {
      if (hooks.stopped()) return;
      let pause: number;
      if (e instanceof Misconfigured) {
        hooks.onProblem(e, e.message !== said);
        said = e.message;
        pause = misconfiguredPause;
        misconfiguredPause = Math.min(misconfiguredPause * 2, MISCONFIGURED_PAUSE_MAX_MS);
      } else {
        hooks.onProblem(new GuardError(`cannot reach Kafka at ${t.brokers} (brokers): ${String(e)}`, { cause: e }), !outage);
        outage = true;
        pause = unreachablePause;
        unreachablePause = Math.min(unreachablePause * 2, UNREACHABLE_PAUSE_MAX_MS);
      }
      hooks.onAnswer();
      await hooks.sleep(pause);
    }
  }
}
