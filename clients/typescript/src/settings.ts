/**
 * What the caller configures beyond the topics' names: topics per tenant, and the
 * secrets of `sasl`, `ssl` and `kafka` kept out of everything the client says.
 *
 * A verdicts topic with `{tenant}` in its name (the guard's `kafka.verdicts_topic_template`,
 * e.g. `agent-verdicts.{tenant}`) is the topic of the `Guard`'s own tenant: on a broker with
 * ACLs each tenant's runtime may read its own verdicts topic only, so one `Guard` serves one
 * tenant, and a session of another tenant is an error rather than a call that waits in vain.
 * An events topic with `{tenant}` (the guard's `kafka.events_topic_template`, e.g.
 * `agent-events.{tenant}`) is likewise the `Guard`'s tenant's own: the guard takes the tenant
 * of an event from the topic it was written to, and dead-letters one naming another.
 */

/** The placeholder of a per-tenant topic name. */
export const TENANT = "{tenant}";
/** Kafka's rule for topic names: these characters, 249 at most. */
const TOPIC_NAME = /^[A-Za-z0-9._-]{1,249}$/;

/** A setting whose key contains one of these holds a secret: `password`, `passphrase`,
 * `secretAccessKey`, `sessionToken`, an oauthbearer provider, a TLS private `key`. */
const SENSITIVE = /password|passphrase|secret|token|oauthbearer|credential|jaas|private|^key$|^pfx$/i;
export const REDACTED = "[redacted]";

/** A `Guard` setting that cannot work (thrown by `Guard.connect()` or `guard.session()`);
 * `field` names the setting. */
export class ConfigError extends Error {
  constructor(
    readonly field: string,
    problem: string,
  ) {
    super(`${field}: ${problem}`);
    this.name = "ConfigError";
  }
}

export function isTemplate(topic: string): boolean {
  return topic.includes(TENANT);
}

/** The topic a per-`role` setting names: `template` itself, or with `{tenant}` replaced by the
 * configured tenant (required then, and must make a valid Kafka topic name). */
function topicFor(setting: string, role: "events" | "verdicts", template: string, tenant: string | undefined): string {
  if (!isTemplate(template)) return template;
  if (template.split(TENANT).length !== 2 || template.startsWith(TENANT))
    // The guard's rule for its `kafka.*_topic_template` (a prefix makes prefixed ACLs).
    throw new ConfigError(
      setting,
      `\`${template}\` must hold ${TENANT} once, after a prefix (e.g. "agent-${role}.${TENANT}"), as the guard's kafka.${role}_topic_template does`,
    );
  if (!tenant)
    throw new ConfigError(
      "tenant",
      `${setting} \`${template}\` is per tenant (${TENANT}) but no tenant is configured: set tenant to the tenant whose ${role} this Guard ${role === "verdicts" ? "reads" : "writes"}`,
    );
  const topic = template.replaceAll(TENANT, tenant);
  if (!TOPIC_NAME.test(topic))
    throw new ConfigError(
      "tenant",
      `tenant \`${tenant}\` makes ${role} topic \`${topic}\`, not a valid Kafka topic name (ASCII letters, digits, '.', '_' and '-' only, at most 249 characters)`,
    );
  return topic;
}

/** The verdicts topic this client reads: `template` itself, or with `{tenant}` replaced by
 * the configured tenant (required then, and must make a valid Kafka topic name). */
export function verdictsTopicFor(template: string, tenant: string | undefined): string {
  return topicFor("verdictsTopic", "verdicts", template, tenant);
}

/** The events topic this client writes: `template` itself, or with `{tenant}` replaced by
 * the configured tenant (required then, and must make a valid Kafka topic name). */
export function eventsTopicFor(template: string, tenant: string | undefined): string {
  return topicFor("eventsTopic", "events", template, tenant);
}

/** A session's own tenant, under a per-tenant verdicts topic, must be the `Guard`'s: its
 * verdicts would go to another tenant's topic, which this client does not (and on a broker
 * with ACLs may not) read. Under a per-tenant events topic too: its events would go to the
 * Guard's tenant's topic, where the guard takes them for that tenant's (and dead-letters
 * them, as naming another). */
export function checkSessionTenant(template: string, configured: string | undefined, tenant: string | undefined, eventsTemplate = ""): void {
  if (tenant === undefined || tenant === configured) return;
  if (isTemplate(template))
    throw new ConfigError(
      "tenant",
      `session tenant \`${tenant}\` differs from the Guard's tenant \`${configured}\`: with the per-tenant verdicts topic \`${template}\` this Guard reads only \`${verdictsTopicFor(template, configured)}\`, and the guard would answer this session on \`${template.replaceAll(TENANT, tenant)}\`; make one Guard per tenant (tenant)`,
    );
  if (isTemplate(eventsTemplate))
    throw new ConfigError(
      "tenant",
      `session tenant \`${tenant}\` differs from the Guard's tenant \`${configured}\`: with the per-tenant events topic \`${eventsTemplate}\` this Guard writes only \`${eventsTopicFor(eventsTemplate, configured)}\`, whose events the guard takes as tenant \`${configured}\`'s; make one Guard per tenant (tenant)`,
    );
}

/** True for a setting whose value is a secret (never logged, never in an error). */
export function isSensitive(key: string): boolean {
  return SENSITIVE.test(key);
}

/** `value` with every secret replaced by `[redacted]` (deeply; functions stay functions,
 * buffers and other non-plain objects are shown as `[redacted]` under a secret key only). */
export function redacted<T>(value: T): T {
  if (Array.isArray(value)) return value.map((v) => redacted(v)) as T;
  if (value === null || typeof value !== "object" || Object.getPrototypeOf(value) !== Object.prototype) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) out[k] = isSensitive(k) && v !== undefined ? REDACTED : redacted(v);
  return out as T;
}

/** Every secret string in `values` (under a sensitive key, at any depth). */
function secretsOf(value: unknown, sensitive = false, out: Set<string> = new Set()): Set<string> {
  if (typeof value === "string") {
    if (sensitive && value.length > 0) out.add(value);
  } else if (Buffer.isBuffer(value)) {
    if (sensitive && value.length > 0) out.add(value.toString());
  } else if (Array.isArray(value)) {
    for (const v of value) secretsOf(v, sensitive, out);
  } else if (value !== null && typeof value === "object") {
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) secretsOf(v, sensitive || isSensitive(k), out);
  }
  return out;
}

/** Removes the secret values of some settings from any text before it is said. */
export class Scrubber {
  private readonly secrets: string[];

  constructor(...settings: unknown[]) {
    const found = new Set<string>();
    for (const s of settings) secretsOf(s, false, found);
    // Longest first: a secret containing another is replaced whole.
    this.secrets = [...found].sort((a, b) => b.length - a.length);
  }

  text(s: string): string {
    for (const secret of this.secrets) if (s.includes(secret)) s = s.replaceAll(secret, REDACTED);
    return s;
  }

  /** A log line's extra fields, with secrets removed from every string in them. */
  extra(value: unknown): unknown {
    if (typeof value === "string") return this.text(value);
    if (Array.isArray(value)) return value.map((v) => this.extra(v));
    if (value === null || typeof value !== "object" || Object.getPrototypeOf(value) !== Object.prototype) return value;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) out[k] = isSensitive(k) && v !== undefined ? REDACTED : this.extra(v);
    return out;
  }
}
