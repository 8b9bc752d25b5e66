// Settings that need no broker: the verdicts topic per tenant (`{tenant}`), a session of
// another tenant refused under it, and secrets kept out of everything the client says. The
// Guards made here point at a port nothing listens on: they resolve at once and never connect.
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";
import { ConfigError, Guard, GuardError } from "../src/index.js";
import { Refused } from "../src/connecting.js";
import { Reachability, authorizationFailed, libraryLog, loginRefused } from "../src/kafka_log.js";
import { REDACTED, Scrubber, checkSessionTenant, eventsTopicFor, isSensitive, redacted, verdictsTopicFor } from "../src/settings.js";

const TEMPLATE = "agent-verdicts.{tenant}";
const EVENTS_TEMPLATE = "agent-events.{tenant}";
const SECRET = "s3cr3t-Pa55word-never-said";
const SASL = { mechanism: "scram-sha-512" as const, username: "runtime", password: SECRET };

async function closedPort(): Promise<string> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(`127.0.0.1:${port}`));
    });
  });
}

/** A console-like logger that keeps every line, extra fields included. */
function recorder(): { lines: string[]; warnings: string[]; logger: Required<import("../src/index.js").Logger> } {
  const lines: string[] = [];
  const warnings: string[] = [];
  const keep = (m: string, extra?: Record<string, unknown>) => lines.push(`${m} ${extra === undefined ? "" : JSON.stringify(extra)}`);
  return {
    lines,
    warnings,
    logger: {
      debug: keep,
      info: keep,
      warn: (m, extra) => {
        keep(m, extra);
        warnings.push(m);
      },
    },
  };
}

// ---- the verdicts topic per tenant ----

test("a plain verdicts topic is used as it is", () => {
  assert.equal(verdictsTopicFor("agent-verdicts", undefined), "agent-verdicts");
  assert.equal(verdictsTopicFor("agent-verdicts", "acme"), "agent-verdicts");
});

test("the template takes the configured tenant", () => {
  assert.equal(verdictsTopicFor(TEMPLATE, "acme"), "agent-verdicts.acme");
  assert.equal(verdictsTopicFor("verdicts-{tenant}-v2", "beta_2"), "verdicts-beta_2-v2");
});

test("a template is shaped as the guard's", () => {
  for (const template of ["{tenant}-verdicts", "v.{tenant}.{tenant}"]) {
    const e = assertThrowsConfig(() => verdictsTopicFor(template, "acme"));
    assert.equal(e.field, "verdictsTopic");
    assert.match(e.message, /once, after a prefix/);
  }
});

test("a template without a tenant is refused", () => {
  for (const tenant of [undefined, ""]) {
    const e = assertThrowsConfig(() => verdictsTopicFor(TEMPLATE, tenant));
    assert.equal(e.field, "tenant");
    assert.match(e.message, /no tenant is configured/);
    assert.ok(e.message.includes(TEMPLATE));
  }
});

test("a tenant that makes no topic name is refused", () => {
  for (const tenant of ["a b", "acme/prod", "é", "x".repeat(240)])
    assert.throws(() => verdictsTopicFor(TEMPLATE, tenant), (e: unknown) => e instanceof ConfigError && /not a valid Kafka topic name/.test(e.message));
});

test("Guard.connect rejects a template without a tenant before connecting", async () => {
  const brokers = [await closedPort()];
  await assert.rejects(Guard.connect({ brokers, verdictsTopic: TEMPLATE }), (e: unknown) => e instanceof ConfigError && /no tenant is configured/.test(e.message));
});

test("the guard reads its tenant's topic", async () => {
  const g = await Guard.connect({ brokers: [await closedPort()], verdictsTopic: TEMPLATE, tenant: "acme", connectWaitMs: 0 });
  try {
    assert.equal(g.verdictsTopic, "agent-verdicts.acme");
    assert.equal(g.options.verdictsTopic, TEMPLATE);
  } finally {
    await g.close();
  }
});

// ---- a session of another tenant ----

test("the session tenant check", () => {
  checkSessionTenant(TEMPLATE, "acme", undefined);
  checkSessionTenant(TEMPLATE, "acme", "acme");
  checkSessionTenant("agent-verdicts", "acme", "beta"); // one topic for all: any tenant
  checkSessionTenant("agent-verdicts", undefined, "beta");
  const e = assertThrowsConfig(() => checkSessionTenant(TEMPLATE, "acme", "beta"));
  assert.equal(e.field, "tenant");
  assert.ok(e.message.includes("`beta` differs from the Guard's tenant `acme`"), e.message);
  assert.ok(e.message.includes("reads only `agent-verdicts.acme`") && e.message.includes("`agent-verdicts.beta`"), e.message);
  assert.ok(e.message.includes("one Guard per tenant"), e.message);
});

test("a session of another tenant is an error under a template", async () => {
  const g = await Guard.connect({ brokers: [await closedPort()], verdictsTopic: TEMPLATE, tenant: "acme", connectWaitMs: 0 });
  try {
    g.session("s-default");
    g.session("s-same", { tenant: "acme" });
    assert.throws(() => g.session("s-other", { tenant: "beta" }), (e: unknown) => e instanceof ConfigError && /reads only `agent-verdicts\.acme`/.test(e.message));
  } finally {
    await g.close();
  }
});

test("without a template sessions may name any tenant", async () => {
  const g = await Guard.connect({ brokers: [await closedPort()], tenant: "acme", connectWaitMs: 0 });
  try {
    assert.equal(g.verdictsTopic, "agent-verdicts");
    g.session("s-beta", { tenant: "beta" });
  } finally {
    await g.close();
  }
});

// ---- the events topic per tenant ----

test("a plain events topic is used as it is", () => {
  assert.equal(eventsTopicFor("agent-events", undefined), "agent-events");
  assert.equal(eventsTopicFor("agent-events", "acme"), "agent-events");
});

test("the events template takes the configured tenant", () => {
  assert.equal(eventsTopicFor(EVENTS_TEMPLATE, "acme"), "agent-events.acme");
  assert.equal(eventsTopicFor("events-{tenant}-v2", "beta_2"), "events-beta_2-v2");
});

test("an events template is shaped as the guard's", () => {
  for (const template of ["{tenant}-events", "e.{tenant}.{tenant}"]) {
    const e = assertThrowsConfig(() => eventsTopicFor(template, "acme"));
    assert.equal(e.field, "eventsTopic");
    assert.match(e.message, /once, after a prefix/);
    assert.match(e.message, /kafka\.events_topic_template/);
  }
});

test("an events template without a tenant, or with one that makes no topic name, is refused", () => {
  for (const tenant of [undefined, ""]) {
    const e = assertThrowsConfig(() => eventsTopicFor(EVENTS_TEMPLATE, tenant));
    assert.equal(e.field, "tenant");
    assert.ok(e.message.includes("no tenant is configured") && e.message.includes(EVENTS_TEMPLATE), e.message);
  }
  for (const tenant of ["a b", "acme/prod", "x".repeat(240)])
    assert.throws(() => eventsTopicFor(EVENTS_TEMPLATE, tenant), (e: unknown) => e instanceof ConfigError && /makes events topic .* not a valid Kafka topic name/.test(e.message));
});

test("Guard.connect rejects an events template without a tenant before connecting", async () => {
  const brokers = [await closedPort()];
  await assert.rejects(
    Guard.connect({ brokers, eventsTopic: EVENTS_TEMPLATE }),
    (e: unknown) => e instanceof ConfigError && e.message.includes("eventsTopic `agent-events.{tenant}` is per tenant"),
  );
});

test("the guard writes its tenant's events topic", async () => {
  const g = await Guard.connect({ brokers: [await closedPort()], eventsTopic: EVENTS_TEMPLATE, verdictsTopic: TEMPLATE, tenant: "acme", connectWaitMs: 0 });
  try {
    assert.equal(g.eventsTopic, "agent-events.acme");
    assert.equal(g.verdictsTopic, "agent-verdicts.acme");
    assert.equal(g.options.eventsTopic, EVENTS_TEMPLATE);
  } finally {
    await g.close();
  }
  const plain = await Guard.connect({ brokers: [await closedPort()], tenant: "acme", connectWaitMs: 0 });
  try {
    assert.equal(plain.eventsTopic, "agent-events");
  } finally {
    await plain.close();
  }
});

test("under an events template a session of another tenant is an error", async () => {
  checkSessionTenant("agent-verdicts", "acme", "acme", EVENTS_TEMPLATE);
  const e = assertThrowsConfig(() => checkSessionTenant("agent-verdicts", "acme", "beta", EVENTS_TEMPLATE));
  assert.equal(e.field, "tenant");
  assert.ok(e.message.includes("writes only `agent-events.acme`"), e.message);
  const g = await Guard.connect({ brokers: [await closedPort()], eventsTopic: EVENTS_TEMPLATE, tenant: "acme", connectWaitMs: 0 });
  try {
    g.session("s-same", { tenant: "acme" });
    assert.throws(() => g.session("s-other", { tenant: "beta" }), (e: unknown) => e instanceof ConfigError && /writes only `agent-events\.acme`/.test(e.message));
  } finally {
    await g.close();
  }
});

// ---- secrets ----

test("sensitive keys", () => {
  for (const k of ["password", "passphrase", "secretAccessKey", "sessionToken", "oauthBearerProvider", "key", "sasl.password", "ssl.key.password", "sasl.oauthbearer.config"])
    assert.ok(isSensitive(k), k);
  for (const k of ["username", "mechanism", "ca", "cert", "clientId", "rejectUnauthorized", "servername"]) assert.ok(!isSensitive(k), k);
});

test("redacted settings keep their shape and lose their secrets", () => {
  const shown = redacted({ sasl: SASL, ssl: { ca: ["PEM"], key: "PRIVATE", passphrase: "pp" }, clientId: "c" });
  assert.deepEqual(shown, { sasl: { mechanism: "scram-sha-512", username: "runtime", password: REDACTED }, ssl: { ca: ["PEM"], key: REDACTED, passphrase: REDACTED }, clientId: "c" });
  assert.equal(redacted(true), true);
  assert.equal(redacted(undefined), undefined);
  assert.equal(SASL.password, SECRET); // what kafkajs gets is untouched
});

test("the scrubber removes every secret value, at any depth", () => {
  const scrub = new Scrubber(SASL, { ca: ["PEM"], key: Buffer.from("PRIVATE-KEY") }, { sasl: { mechanism: "aws", secretAccessKey: "AWSSECRET" } });
  assert.equal(scrub.text(`login with ${SECRET} failed`), `login with ${REDACTED} failed`);
  assert.equal(scrub.text("PRIVATE-KEY AWSSECRET PEM"), `${REDACTED} ${REDACTED} PEM`);
  assert.deepEqual(scrub.extra({ broker: "b", detail: `x ${SECRET}`, password: "whatever" }), { broker: "b", detail: `x ${REDACTED}`, password: REDACTED });
});

test("kafkajs's lines reach the logger scrubbed", () => {
  const { lines, logger } = recorder();
  const { logCreator } = libraryLog(logger, new Reachability("b:9093", logger), new Scrubber(SASL));
  const log = logCreator!(4);
  log({ namespace: "Connection", level: 4, label: "INFO", log: { message: `auth ${SECRET}`, timestamp: "t", sasl: SASL } });
  assert.equal(lines.length, 1);
  assert.ok(!lines[0].includes(SECRET), lines[0]);
  assert.ok(lines[0].includes(REDACTED), lines[0]);
});

test("a secured Guard says no secret: options, log lines, errors, ready()", async () => {
  const { lines, logger } = recorder();
  const errors: string[] = [];
  const g = await Guard.connect({
    brokers: [await closedPort()],
    ssl: { ca: ["PEM"] },
    sasl: SASL,
    kafka: { clientId: "c", sasl: { mechanism: "plain", username: "u", password: "other-secret-x" } },
    logger,
    connectWaitMs: 100,
    onError: (where, e) => errors.push(`${where}: ${String(e)}`),
  });
  try {
    assert.ok(!JSON.stringify(g.options).includes(SECRET));
    assert.ok(!JSON.stringify(g.options).includes("other-secret-x"));
    assert.equal(g.options.sasl && "password" in g.options.sasl ? g.options.sasl.password : undefined, REDACTED);
    const s = g.session();
    assert.equal(await s.toolCall("bash", { cmd: "ls" }), null); // not connected: fail-open at once
    await assert.rejects(g.ready(200), (e: unknown) => e instanceof GuardError && !e.message.includes(SECRET));
    // A login refusal as kafkajs reports it, said once, scrubbed.
    const login = Object.assign(new Error(`SASL SCRAM SHA512 authentication failed for ${SECRET}`), { name: "KafkaJSSASLAuthenticationError" });
    g.report("connect", login);
    g.report("connect", login);
  } finally {
    await g.close();
  }
  const said = lines.join("\n");
  assert.ok(!said.includes(SECRET), said);
  assert.equal(lines.filter((l) => l.includes("refused this client's login")).length, 1, said);
  assert.ok(errors.length > 0);
});

// ---- refusals: said once ----

test("authorization and login errors are recognised through kafkajs's wrappers", () => {
  const refused = Object.assign(new Error("Not authorized to access topics: [Topic authorization failed]"), { name: "KafkaJSProtocolError", type: "TOPIC_AUTHORIZATION_FAILED", code: 29 });
  const retried = Object.assign(new Error("retries"), { name: "KafkaJSNumberOfRetriesExceeded", cause: refused, originalError: refused });
  assert.equal(authorizationFailed(refused), "TOPIC_AUTHORIZATION_FAILED");
  assert.equal(authorizationFailed(new GuardError("x", { cause: retried })), "TOPIC_AUTHORIZATION_FAILED");
  assert.equal(authorizationFailed(Object.assign(new Error("c"), { type: "CLUSTER_AUTHORIZATION_FAILED" })), "CLUSTER_AUTHORIZATION_FAILED");
  assert.equal(authorizationFailed(new Error("ECONNREFUSED")), undefined);
  assert.ok(loginRefused(Object.assign(new Error("SASL"), { name: "KafkaJSSASLAuthenticationError" })));
  assert.ok(!loginRefused(refused));
});

test("a refusal names the topic and the operation", () => {
  const read = new Refused("b:9093", "agent-verdicts.acme", "verdicts", "Read", { describe: true });
  assert.ok(read instanceof GuardError);
  assert.ok(read.message.includes("refused this client Read on the verdicts topic `agent-verdicts.acme`"), read.message);
  assert.ok(read.message.includes("TOPIC_AUTHORIZATION_FAILED on Describe") && read.message.includes("fail-open"), read.message);
  const write = new Refused("b:9093", "agent-events", "events", "Write");
  assert.ok(write.message.includes("refused this client Write on the events topic `agent-events` (TOPIC_AUTHORIZATION_FAILED)"), write.message);
});

test("a refusal after connecting is said once per operation", async () => {
  const { warnings, logger } = recorder();
  const errors: unknown[] = [];
  const brokers = [await closedPort()];
  const g = await Guard.connect({ brokers, verdictsTopic: TEMPLATE, tenant: "acme", logger, connectWaitMs: 0, onError: (_, e) => errors.push(e) });
  try {
    const refused = Object.assign(new Error("Not authorized to access topics: [Topic authorization failed]"), { name: "KafkaJSProtocolError", type: "TOPIC_AUTHORIZATION_FAILED" });
    for (let i = 0; i < 5; i++) g.report("verdict reader", refused);
    const said = warnings.filter((w) => w.includes("refused this client"));
    assert.deepEqual(said, [
      `loopguard: Kafka at ${brokers[0]} refused this client Read on the verdicts topic \`agent-verdicts.acme\` (TOPIC_AUTHORIZATION_FAILED); tool calls run unguarded (fail-open) until its principal is granted Read on \`agent-verdicts.acme\``,
    ]);
    assert.equal(errors.filter((e) => e instanceof Refused).length, 1);
    assert.ok(g.unguarded);
    for (let i = 0; i < 3; i++) g.report("publish", refused);
    assert.equal(warnings.filter((w) => w.includes("Write on the events topic `agent-events`")).length, 1);
  } finally {
    await g.close();
  }
});

function assertThrowsConfig(f: () => unknown): ConfigError {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof ConfigError, String(e));
    return e;
  }
  assert.fail("no ConfigError");
}
