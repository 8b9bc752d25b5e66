/** A real broker (KAFKA_BOOTSTRAP_SERVERS), private topics made by `loopguard topics
 * create`, and a real `loopguard serve` (LOOPGUARD_BIN) that tests can stop and restart. */
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { randomUUID } from "node:crypto";
import kafkajs from "kafkajs";

const REPO = resolve(import.meta.dirname, "../../../..");
export const PARTITIONS = 2;

function binary(): string {
  if (process.env.LOOPGUARD_BIN) return process.env.LOOPGUARD_BIN;
  for (const profile of ["debug", "release"]) {
    const p = join(REPO, "target", profile, "loopguard");
    if (existsSync(p)) return p;
  }
  throw new Error("no loopguard binary: build it (cargo build) or set LOOPGUARD_BIN");
}

async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
  });
}

export class GuardProcess {
  readonly name = `tsclient-${randomUUID().slice(0, 10)}`;
  readonly dir = mkdtempSync(join(tmpdir(), "lg-ts-"));
  readonly binary = binary();
  readonly config = join(this.dir, "loopguard.toml");
  private proc: ChildProcess | undefined;
  private starts = 0;

  private constructor(
    readonly adminPort: number,
    readonly bootstrap: string,
  ) {}

  /** Writes the configuration and creates the topics with `loopguard topics create`. */
  static async create(bootstrap = process.env.KAFKA_BOOTSTRAP_SERVERS ?? "127.0.0.1:19092"): Promise<GuardProcess> {
    const g = new GuardProcess(await freePort(), bootstrap);
    writeFileSync(
      g.config,
      [
        "[kafka]",
        `bootstrap_servers = "${g.bootstrap}"`,
        `group_id = "${g.name}-group"`,
        `events_topic = "${g.name}-events"`,
        `verdicts_topic = "${g.name}-verdicts"`,
        `dlq_topic = "${g.name}-dlq"`,
        `state_topic = "${g.name}-state"`,
        `policy_topic = "${g.name}-policy"`,
        `transactional_id_prefix = "${g.name}"`,
        "batch_max_ms = 20",
        "[kafka.properties]",
        '"transaction.timeout.ms" = "10000"',
        '"session.timeout.ms" = "6000"',
        "[admin]",
        `listen = "127.0.0.1:${g.adminPort}"`,
        // Tenant `observer` runs every rule in observe mode (guard.test.ts).
        "[[policy.overrides]]",
        'tenant = "observer"',
        "[policy.overrides.set]",
        'mode = "observe"',
        "",
      ].join("\n"),
    );
    g.createTopics();
    return g;
  }

  /** `loopguard topics create` for the five private topics. */
  createTopics(): void {
    execFileSync(this.binary, ["topics", "create", "--config", this.config, "--partitions", String(PARTITIONS)], { stdio: "pipe" });
  }

  get eventsTopic(): string {
    return `${this.name}-events`;
  }

  get verdictsTopic(): string {
    return `${this.name}-verdicts`;
  }

  async start(timeoutMs = 60_000): Promise<void> {
    this.starts += 1;
    const log = openSync(join(this.dir, `guard-${this.starts}.log`), "w");
    const proc = spawn(this.binary, ["serve", "--config", this.config], {
      stdio: ["ignore", "ignore", log],
      env: { ...process.env, RUST_LOG: "warn", LOOPGUARD_INSTANCE_ID: `${this.name}-${this.starts}` },
    });
    this.proc = proc;
    const until = Date.now() + timeoutMs;
    while (Date.now() < until) {
      if (proc.exitCode !== null) throw new Error(`loopguard serve exited: ${this.logTail()}`);
      try {
        const r = await fetch(`http://127.0.0.1:${this.adminPort}/readyz`);
        if (r.status === 200) return;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`loopguard serve not ready: ${this.logTail()}`);
  }

  running(): boolean {
    return this.proc !== undefined && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  async stop(): Promise<void> {
    const p = this.proc;
    this.proc = undefined;
    if (p === undefined || p.exitCode !== null) return;
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGTERM");
    const timer = setTimeout(() => p.kill("SIGKILL"), 30_000);
    await exited;
    clearTimeout(timer);
  }

  /** Removes the four private topics (a shared development broker keeps no litter). */
  async deleteTopics(): Promise<void> {
    const kafka = new kafkajs.Kafka({ brokers: [this.bootstrap], logLevel: kafkajs.logLevel.NOTHING });
    const admin = kafka.admin();
    try {
      await admin.connect();
      await admin.deleteTopics({ topics: ["events", "verdicts", "dlq", "state", "policy"].map((k) => `${this.name}-${k}`) });
    } catch {
      // already gone: nothing to clean
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  }

  logTail(): string {
    const p = join(this.dir, `guard-${this.starts}.log`);
    return existsSync(p) ? readFileSync(p, "utf8").slice(-3000) : "";
  }
}
