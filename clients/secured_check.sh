#!/usr/bin/env bash
# Both client libraries against a secured broker (SASL_SSL + SCRAM-SHA-512, ACLs), no guard
# needed: `scripts/kafka.sh start-secured PORT` makes one.
#
#   KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19392 \
#   KAFKA_SECURED_ENV=build/kafka/run-19392/secured.env \
#   PYTHON=build/pyclient-2.16.1/bin/python TS_DIR=clients/typescript \
#     clients/secured_check.sh
#
# Env:
#   KAFKA_BOOTSTRAP_SERVERS  the broker's SASL_SSL listener (required)
#   KAFKA_SECURED_ENV        the env file kafka.sh wrote: KAFKA_CA_PEM and
#                            KAFKA_USER_<NAME>_PASSWORD for admin, runtime, runtime-b (required)
#   PYTHON                   a Python with this repo's client installed (`pip install
#                            ./clients/python`, confluent-kafka with it); default python3
#   TS_DIR                   the TypeScript client, installed and built (`npm ci` there:
#                            node_modules/ and dist/); default clients/typescript
#   SECURED_CHECK_SETUP      1 (default): first create, as admin, each tenant's own topics
#                            agent-events.T and agent-verdicts.T (acme, beta) where missing
#                            (with agent-events' partition count, else 2) and grant runtime
#                            Write on agent-events.acme and Read on agent-verdicts.acme,
#                            runtime-b the same on beta's (no more; adding an ACL that exists
#                            is a no-op). 0: they are there already.
#
# Checked, for each client:
#   1. `runtime`, tenant acme, topics `agent-events.{tenant}` and `agent-verdicts.{tenant}`
#      (tenants from the writer): connects (reads agent-verdicts.acme, writes
#      agent-events.acme), a tool call gets no verdict (no guard runs:
#      its deadline, or a marker if a guard does) without any authorization problem, and a
#      session of tenant beta is refused (ConfigError).
#   2. `runtime-b` with the same templates but tenant acme (it may write agent-events.beta
#      and read agent-verdicts.beta only): over several seconds and connection retries, ONE
#      warning naming an acme topic and the refused operation ("refused this client Read on
#      the verdicts topic `agent-verdicts.acme`" or "... Write on the events topic
#      `agent-events.acme`"), one `on_error`/`onError` for it, and every tool call answered
#      None/null at once (fail-open); `ready()` raises naming the same problem.
#   3. Nothing either run logs (librdkafka's debug lines and configuration dump, kafkajs's
#      lines, the client's own), hands to the error callback or raises holds a password of
#      the env file.
# Exits non-zero on any unexpected outcome.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${KAFKA_BOOTSTRAP_SERVERS:?set KAFKA_BOOTSTRAP_SERVERS (scripts/kafka.sh start-secured prints it)}"
: "${KAFKA_SECURED_ENV:?set KAFKA_SECURED_ENV (scripts/kafka.sh start-secured prints it)}"
PYTHON=${PYTHON:-python3}
TS_DIR=$(cd "${TS_DIR:-$here/typescript}" && pwd)
[[ -f $TS_DIR/dist/src/index.js && -d $TS_DIR/node_modules/kafkajs ]] ||
  { echo "secured_check: $TS_DIR is not installed and built (run npm ci there)" >&2; exit 2; }
"$PYTHON" -c 'import loopguard, confluent_kafka' ||
  { echo "secured_check: $PYTHON has no loopguard client (pip install ./clients/python)" >&2; exit 2; }

bootstrap=$KAFKA_BOOTSTRAP_SERVERS
set -a
# shellcheck disable=SC1090 # the broker's env file: KEY=value lines (values %q-quoted)
. "$KAFKA_SECURED_ENV"
set +a
export KAFKA_BOOTSTRAP_SERVERS=$bootstrap
for v in KAFKA_CA_PEM KAFKA_USER_ADMIN_PASSWORD KAFKA_USER_RUNTIME_PASSWORD KAFKA_USER_RUNTIME_B_PASSWORD; do
  [[ -n ${!v:-} ]] || { echo "secured_check: $KAFKA_SECURED_ENV has no $v" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

# ---- topics and ACLs ---------------------------------------------------------------------
if [[ ${SECURED_CHECK_SETUP:-1} != 0 ]]; then
  "$PYTHON" - <<'EOF'
import os, sys
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)
e = os.environ
admin = AdminClient({"bootstrap.servers": e["KAFKA_BOOTSTRAP_SERVERS"], "security.protocol": "SASL_SSL",
                     "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "admin",
                     "sasl.password": e["KAFKA_USER_ADMIN_PASSWORD"], "ssl.ca.location": e["KAFKA_CA_PEM"]})
topics = admin.list_topics(timeout=15).topics
n = len(topics["agent-events"].partitions) if "agent-events" in topics else 2
names = ("agent-events.acme", "agent-events.beta", "agent-verdicts.acme", "agent-verdicts.beta")
new = [NewTopic(t, n, 1) for t in names if t not in topics]
for t, f in (admin.create_topics(new, operation_timeout=15) if new else {}).items():
    f.result(); print(f"secured_check: created {t} ({n} partitions)")
grants = [("runtime", AclOperation.WRITE, "agent-events.acme"), ("runtime", AclOperation.READ, "agent-verdicts.acme"),
          ("runtime-b", AclOperation.WRITE, "agent-events.beta"), ("runtime-b", AclOperation.READ, "agent-verdicts.beta")]
acls = [AclBinding(ResourceType.TOPIC, t, ResourcePatternType.LITERAL, f"User:{u}", "*", op, AclPermissionType.ALLOW)
        for u, op, t in grants]
for f in admin.create_acls(acls, request_timeout=15).values():
    f.result()
EOF
fi

# ---- Python ----------------------------------------------------------------------------------
cat >"$work/check.py" <<'EOF'
"""One scenario of the Python client (argv: allowed | refused); prints ok/FAIL lines."""
import logging, os, sys, time

from loopguard import ConfigError, Guard, GuardError

e = os.environ
scenario = sys.argv[1]
user = "runtime" if scenario == "allowed" else "runtime-b"
records = []


class Keep(logging.Handler):
    def emit(self, r: logging.LogRecord) -> None:
        records.append(r)
        print(f"  [{r.levelname} {r.name}] {r.getMessage()}"[:400], file=sys.stderr)


logging.getLogger("loopguard").addHandler(Keep())
logging.getLogger("loopguard").setLevel(logging.DEBUG)
errors = []
bad = 0


def check(ok: bool, what: str) -> None:
    global bad
    print(f"{'ok' if ok else 'FAIL'} - python, {user}: {what}")
    bad += 0 if ok else 1


guard = Guard(
    e["KAFKA_BOOTSTRAP_SERVERS"],
    events_topic="agent-events.{tenant}",
    verdicts_topic="agent-verdicts.{tenant}",
    tenant="acme",
    agent="secured-check",
    tool_call_deadline=1.0,
    kafka={
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": e["KAFKA_USER_RUNTIME_PASSWORD" if user == "runtime" else "KAFKA_USER_RUNTIME_B_PASSWORD"],
        "ssl.ca.location": e["KAFKA_CA_PEM"],
        # librdkafka's own lines (its configuration dump included) go to loopguard.kafka:
        # they must not hold the password either.
        "debug": "conf,security,broker",
    },
    on_error=lambda where, ex: errors.append(f"{where}: {ex}"),
)
try:
    session = guard.session()
    if scenario == "allowed":
        try:
            guard.ready(15)
            check(True, "connected (Read on agent-verdicts.acme, Write on agent-events.acme)")
        except GuardError as ex:
            check(False, f"connected: {ex}")
        check(guard.verdicts_topic == "agent-verdicts.acme", f"reads {guard.verdicts_topic}")
        t = time.monotonic()
        verdict = session.tool_call("bash", {"cmd": "ls"})
        took = time.monotonic() - t
        check(verdict is None and took < 3, f"tool call answered None (no verdict) in {took:.2f} s")
        time.sleep(0.5)
        st = guard.stats()
        check(st.events_sent >= 1 and st.events_failed == 0, f"event delivered (events_sent={st.events_sent}, events_failed={st.events_failed})")
        check(st.tool_calls_refused == 0 and st.tool_calls_not_connected == 0, "the call was guarded (not refused, not before connecting)")
        try:
            guard.session(tenant="beta")
            check(False, "a session of tenant beta is refused")
        except ConfigError as ex:
            check("reads only `agent-verdicts.acme`" in str(ex), f"a session of tenant beta is refused: {ex}")
        auth = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
        check(not auth, f"no warning logged ({auth[:2]})")
        check(not errors, f"no background error ({errors[:2]})")
    else:
        times = []
        for _ in range(5):
            t = time.monotonic()
            v = session.tool_call("bash", {"cmd": "ls"})
            times.append(time.monotonic() - t)
            check(v is None, "tool call answered None (fail-open)")
            time.sleep(0.8)  # the connection retries meanwhile
        check(max(times) < 0.5, f"every call answered at once (slowest {max(times):.3f} s)")
        wants = ("refused this client Read on the verdicts topic `agent-verdicts.acme`",
                 "refused this client Write on the events topic `agent-events.acme`")
        names_it = lambda m: any(w in m for w in wants)
        warned = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
        check(len(warned) == 1 and names_it(warned[0]), f"one warning: {warned}")
        said = [x for x in errors if "refused this client" in x]
        check(len(said) == 1 and len(errors) == 1, f"one on_error: {errors}")
        try:
            guard.ready(0.5)
            check(False, "ready() raises")
        except GuardError as ex:
            check(names_it(str(ex)), f"ready() raises GuardError naming it: {ex}")
        check(guard.stats().tool_calls_not_connected == 5, "the calls counted as not connected")
finally:
    guard.close(2)
passwords = [v for k, v in e.items() if k.startswith("KAFKA_USER_") and k.endswith("_PASSWORD") and v]
leaks = [m for m in [r.getMessage() for r in records] + errors if any(p in m for p in passwords)]
check(not leaks and len(records) > 0, f"no password in {len(records)} log lines and {len(errors)} errors")
sys.exit(1 if bad else 0)
EOF

# ---- TypeScript ------------------------------------------------------------------------------
cat >"$work/check.mjs" <<'EOF'
// One scenario of the TypeScript client (argv: allowed | refused); prints ok/FAIL lines.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
const { ConfigError, Guard, GuardError } = await import(pathToFileURL(`${process.env.TS_DIR}/dist/src/index.js`).href);

const e = process.env;
const scenario = process.argv[2];
const user = scenario === "allowed" ? "runtime" : "runtime-b";
const lines = [];
const warnings = [];
const errors = [];
let bad = 0;
const check = (ok, what) => {
  console.log(`${ok ? "ok" : "FAIL"} - typescript, ${user}: ${what}`);
  if (!ok) bad += 1;
};
const keep = (level) => (m, extra) => {
  const line = `${m} ${extra === undefined ? "" : JSON.stringify(extra)}`;
  lines.push(line);
  if (level === "warn") warnings.push(m);
  console.error(`  [${level}] ${line}`.slice(0, 400));
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const guard = await Guard.connect({
  brokers: e.KAFKA_BOOTSTRAP_SERVERS.split(","),
  eventsTopic: "agent-events.{tenant}",
  verdictsTopic: "agent-verdicts.{tenant}",
  tenant: "acme",
  agent: "secured-check",
  toolCallDeadlineMs: 1000,
  ssl: { ca: [readFileSync(e.KAFKA_CA_PEM, "utf8")] },
  sasl: { mechanism: "scram-sha-512", username: user, password: user === "runtime" ? e.KAFKA_USER_RUNTIME_PASSWORD : e.KAFKA_USER_RUNTIME_B_PASSWORD },
  logger: { debug: keep("debug"), info: keep("info"), warn: keep("warn") },
  onError: (where, x) => errors.push(`${where}: ${String(x)}`),
});
try {
  const session = guard.session();
  if (scenario === "allowed") {
    try {
      await guard.ready(15_000);
      check(true, "connected (Read on agent-verdicts.acme, Write on agent-events.acme)");
    } catch (x) {
      check(false, `connected: ${x}`);
    }
    check(guard.verdictsTopic === "agent-verdicts.acme", `reads ${guard.verdictsTopic}`);
    const t = Date.now();
    const verdict = await session.toolCall("bash", { cmd: "ls" });
    const took = Date.now() - t;
    check(verdict === null && took < 3000, `tool call answered null (no verdict) in ${took} ms`);
    await sleep(500);
    const st = guard.stats();
    check(st.eventsSent >= 1 && st.eventsFailed === 0, `event delivered (eventsSent=${st.eventsSent}, eventsFailed=${st.eventsFailed})`);
    check(st.toolCallsRefused === 0 && st.toolCallsNotConnected === 0, "the call was guarded (not refused, not before connecting)");
    try {
      guard.session(undefined, { tenant: "beta" });
      check(false, "a session of tenant beta is refused");
    } catch (x) {
      check(x instanceof ConfigError && x.message.includes("reads only `agent-verdicts.acme`"), `a session of tenant beta is refused: ${x}`);
    }
    check(warnings.length === 0, `no warning logged (${warnings.slice(0, 2)})`);
    check(errors.length === 0, `no background error (${errors.slice(0, 2)})`);
  } else {
    const times = [];
    for (let i = 0; i < 5; i++) {
      const t = Date.now();
      const v = await session.toolCall("bash", { cmd: "ls" });
      times.push(Date.now() - t);
      check(v === null, "tool call answered null (fail-open)");
      await sleep(800); // the connection retries meanwhile
    }
    check(Math.max(...times) < 500, `every call answered at once (slowest ${Math.max(...times)} ms)`);
    const wants = ["refused this client Read on the verdicts topic `agent-verdicts.acme`",
      "refused this client Write on the events topic `agent-events.acme`"];
    const namesIt = (m) => wants.some((w) => m.includes(w));
    check(warnings.length === 1 && namesIt(warnings[0]), `one warning: ${JSON.stringify(warnings)}`);
    check(errors.length === 1 && namesIt(errors[0]), `one onError: ${JSON.stringify(errors)}`);
    try {
      await guard.ready(500);
      check(false, "ready() rejects");
    } catch (x) {
      check(x instanceof GuardError && namesIt(x.message), `ready() rejects with GuardError naming it: ${x}`);
    }
    check(guard.stats().toolCallsNotConnected === 5, "the calls counted as not connected");
  }
} finally {
  await guard.close();
}
const passwords = Object.entries(e).filter(([k, v]) => /^KAFKA_USER_.*_PASSWORD$/.test(k) && v).map(([, v]) => v);
const said = [...lines, ...errors, JSON.stringify(guard.options)];
const leaks = said.filter((m) => passwords.some((p) => m.includes(p)));
check(leaks.length === 0 && lines.length > 0, `no password in ${lines.length} log lines, ${errors.length} errors and guard.options`);
process.exit(bad ? 1 : 0);
EOF

run() {  # NAME COMMAND...: the command's stdout and stderr kept; both searched for passwords
  local name=$1
  shift
  if "$@" >"$work/$name.out" 2>"$work/$name.err"; then :; else failed=1; fi
  grep -E '^(ok|FAIL) ' "$work/$name.out" || true
  if grep -q '^FAIL ' "$work/$name.out" || ! grep -q '^ok ' "$work/$name.out"; then
    failed=1
    echo "-- $name: output" >&2
    cat "$work/$name.out" "$work/$name.err" >&2
  fi
  local v
  for v in "${!KAFKA_USER_@}"; do
    [[ $v == *_PASSWORD && -n ${!v} ]] || continue
    if grep -qF -- "${!v}" "$work/$name.out" "$work/$name.err"; then
      echo "FAIL - $name: the output holds the password of ${v}" >&2
      failed=1
    fi
  done
}

export TS_DIR
for scenario in allowed refused; do
  run "python-$scenario" "$PYTHON" "$work/check.py" "$scenario"
  run "typescript-$scenario" node "$work/check.mjs" "$scenario"
done

if ((failed)); then
  echo "secured_check: FAILED" >&2
  exit 1
fi
echo "secured_check: both clients passed"
