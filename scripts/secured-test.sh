#!/usr/bin/env bash
# The guard on a secured broker (issue 31): its own KRaft broker with a SASL_SSL listener
# (certificates made at start; SCRAM-SHA-512 and PLAIN for the same users: the Rust
# binaries log in with PLAIN, the clients with SCRAM, docs/decisions.md (gg)),
# StandardAuthorizer and no ACL but the ones `loopguard topics acls` prints, applied as
# printed. Then, each as its own principal:
#   - the operator creates the topics (two tenants' own events, verdicts and state topics
#     too) and publishes a policy version;
#   - the guard starts with tenants from the writer (kafka.events_topic_template) and gets
#     ready;
#   - tenant acme's and tenant beta's runtimes publish a fleet of sessions, each to its own
#     events topic; the verdicts read read_committed from both tenants' topics are
#     `loopguard replay`'s (none lost, none doubled), each topic holds its own tenant's
#     sessions only, and has markers;
#   - a hostile tenant: beta's runtime, with exactly its printed ACLs, tries to forge a
#     block and an abort of acme's sessions, end one, squat its event ids, flood the
#     partition's session cap, and write to the shared and to acme's events topics; acme's
#     loop is still blocked on its 3rd call, nothing of beta's reaches acme's verdicts;
#   - a malformed event is dead-lettered and read by the dead-letter reader's principal;
#   - the edge and the Claude Code hook path, as acme's runtime, get a verdict;
#   - beta's runtime is refused acme's topic: its edge fails open, saying why once;
#   - the client libraries' secured check (clients/secured_check.sh), when given;
#   - each ACL of the guard removed in turn: the guard names that resource and operation
#     (log line, /readyz, loopguard_kafka_access_denied), and is ready again once granted;
#   - no password appears in any log, metric or output of the run.
#
#   scripts/secured-test.sh [BIN]
# Env: PORT (first free triple from 19300); PYTHON (a Python with the client installed)
#      and TS_DIR (the TypeScript client, built) run clients/secured_check.sh too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
BIN=$(realpath "${1:-target/debug/loopguard}")
CP="$ROOT/build/kafka/${KAFKA_VERSION:-4.1.2}/lib/*"
work=$ROOT/build/secured-$$
mkdir -p "$work"
say() { echo "secured-test: $*" >&2; }
die() { say "FAILED: $*"; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

port=${PORT:-19300}
while port_open "$port" || port_open $((port + 1)) || port_open $((port + 2)); do
  port=$((port + 3))
  ((port < 19400)) || die "no free port triple in 19300-19399"
done
# Passwords that are easy to grep for in every log afterwards.
export KAFKA_SCRAM_PASSWORD_PREFIX=LgSecretPw7x
guard_pid=
edge_pid=
cleanup() {
  [ -n "$guard_pid" ] && kill -9 "$guard_pid" 2>/dev/null || true
  [ -n "$edge_pid" ] && kill -9 "$edge_pid" 2>/dev/null || true
  scripts/kafka.sh stop "$port" >/dev/null 2>&1 || true
}
trap cleanup EXIT
eval "$(scripts/kafka.sh start-secured "$port")"
set -a
# shellcheck disable=SC1090
. "$KAFKA_SECURED_ENV"
set +a
clients=$KAFKA_CLIENTS_DIR
B=$KAFKA_BOOTSTRAP_SERVERS
admin_port=$((port + 100))

# One loopguard configuration per principal: the broker, tenant isolation, its SASL_SSL
# properties (from the broker's client files).
config_for() {
  {
    echo "[kafka]"
    echo "bootstrap_servers = \"$B\""
    echo "verdicts_topic_template = \"agent-verdicts.{tenant}\""
    echo "events_topic_template = \"agent-events.{tenant}\""
    echo "[kafka.properties]"
    # PLAIN over TLS: the service's librdkafka (2.3) cannot log in with SCRAM to a Kafka 4
    # broker (docs/decisions.md (gg)); the clients' check below uses SCRAM-SHA-512.
    grep -v '^bootstrap.servers=' "$clients/$1.plain.properties" | sed -E 's/^([^=]+)=(.*)$/"\1" = "\2"/'
    echo "[admin]"
    echo "listen = \"127.0.0.1:$admin_port\""
    # A small session cap per partition, so a tenant's flood reaches it in this test.
    echo "[engine]"
    echo "max_sessions_per_partition = 60"
  } >"$work/$1.toml"
}
for u in guard runtime runtime-b operator admin dlq-reader; do config_for "$u"; done

log4j=$work/log4j2.properties
printf '%s\n' appender.e.type=Console appender.e.name=E appender.e.target=SYSTEM_ERR \
  appender.e.layout.type=PatternLayout rootLogger.level=WARN rootLogger.appenderRef.e.ref=E >"$log4j"
java_tool() { java "-Dlog4j2.configurationFile=$log4j" -cp "$CP" "$@"; }
acl_tool() {
  java_tool org.apache.kafka.tools.AclCommand --bootstrap-server "$B" \
    --command-config "$clients/admin.java.properties" "$@" >>"$work/acls.log" 2>&1
}

# ---- The ACLs, exactly as printed (the commands' `kafka-acls.sh` is Kafka's AclCommand).
principals=(--guard User:guard --tenant-runtime acme=User:runtime --tenant-runtime beta=User:runtime-b
  --operator User:operator --dlq-reader User:dlq-reader)
"$BIN" topics acls --config "$work/admin.toml" "${principals[@]}" >"$work/acls.table"
"$BIN" topics acls --config "$work/admin.toml" "${principals[@]}" --format kafka-acls >"$work/acls.commands"
prefix='kafka-acls.sh --bootstrap-server "$BOOTSTRAP" --command-config "$ADMIN_CONFIG" '
apply_line() {
  local line=$1 verb=$2
  [[ $line == "$prefix"* ]] || die "unexpected acls line: $line"
  # shellcheck disable=SC2086 # the rest of the line is words without spaces
  acl_tool ${line#"$prefix"} $([ "$verb" = remove ] && echo "--force")
}
while IFS= read -r line; do apply_line "$line" add; done <"$work/acls.commands"
say "$(wc -l <"$work/acls.commands") ACL bindings applied, as \`topics acls --format kafka-acls\` prints them"

# ---- The operator: topics (with both tenants' verdicts topics) and a policy version.
"$BIN" topics create --config "$work/operator.toml" --partitions 2 --tenant acme --tenant beta >"$work/topics.out" 2>&1 ||
  die "topics create as the operator: $(cat "$work/topics.out")"
grep -q 'agent-verdicts.beta' "$work/topics.out" || die "no tenant topic created: $(cat "$work/topics.out")"
printf '[tool]\nrepeat_threshold = 3\n' >"$work/policy.toml"

"$BIN" policy publish --config "$work/operator.toml" "$work/policy.toml" >"$work/publish.out" 2>&1 ||
  die "policy publish as the operator: $(cat "$work/publish.out")"
say "operator: topics created, policy published ($(tail -n 1 "$work/publish.out"))"

# ---- The guard.
ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:$admin_port/readyz")" = 200 ]; }
start_guard() {
  "$BIN" serve --config "$work/guard.toml" >>"$work/guard.log" 2>&1 &
  guard_pid=$!
}
stop_guard() {
  kill -TERM "$guard_pid" 2>/dev/null || true
  wait "$guard_pid" 2>/dev/null || true
  guard_pid=
}
wait_ready() {
  local t0=$SECONDS
  until ready; do
    ((SECONDS - t0 < ${1:-60})) || die "the guard is not ready after ${1:-60}s: $(tail -n 5 "$work/guard.log")"
    sleep 0.5
  done
}
start_guard
wait_ready
say "guard ready as User:guard with exactly its ACLs"

# ---- Two tenants' runtimes publish a fleet; the verdicts are replay's, each in its topic.
"$BIN" loadgen dump --events 3000 --sessions 60 >"$work/fleet.jsonl"
python3 - "$work/fleet.jsonl" "$work" <<'EOF'
import json, sys, zlib
src, work = sys.argv[1], sys.argv[2]
out = {"acme": open(f"{work}/acme.txt", "w"), "beta": open(f"{work}/beta.txt", "w")}
with open(src) as f, open(f"{work}/events.jsonl", "w") as all_events:
    for line in f:
        e = json.loads(line)
        tenant = "acme" if zlib.crc32(e["session_id"].encode()) % 2 == 0 else "beta"
        e["tenant"] = tenant
        text = json.dumps(e, separators=(",", ":"))
        all_events.write(text + "\n")
        out[tenant].write(f"{e['session_id']}\t{text}\n")
EOF
produce_to() { # principal, file, topic: a keyed line per record
  timeout 120 java "-Dlog4j2.configurationFile=$log4j" -cp "$CP" org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$B" --topic "$3" \
    --producer.config "$clients/$1.java.properties" --property parse.key=true \
    --property key.separator=$'\t' <"$2" >"$work/produce-$1.log" 2>&1 || true
}
produce_as() { # principal, file, tenant: to the tenant's own events topic
  produce_to "$1" "$2" "agent-events.$3"
  ! grep -qi 'exception\|error' "$work/produce-$1.log" || die "producing as $1: $(head -n 5 "$work/produce-$1.log")"
}
produce_as runtime "$work/acme.txt" acme
produce_as runtime-b "$work/beta.txt" beta
total=$(wc -l <"$work/events.jsonl")
consumed() {
  curl -s "127.0.0.1:$admin_port/metrics" | awk '/^loopguard_events_consumed_total/ {s += $2} END {print s + 0}'
}
t0=$SECONDS
until [ "$(consumed)" -ge "$total" ]; do
  ((SECONDS - t0 < 120)) || die "the guard consumed $(consumed) of $total events in 120 s"
  sleep 1
done
sleep 2 # the last batch commits within its interval
read_topic() {
  java_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$B" --topic "$1" \
    --consumer.config "$clients/$2.java.properties" --from-beginning --isolation-level read_committed \
    --timeout-ms 8000 --property print.partition=true --property print.headers=true \
    --property print.key=true >"$3" 2>"$3.log" || true
}
read_topic agent-verdicts.acme admin "$work/acme.dump"
read_topic agent-verdicts.beta admin "$work/beta.dump"
cat "$work/acme.dump" "$work/beta.dump" >"$work/both.dump"
"$BIN" replay "$work/events.jsonl" >"$work/replay.jsonl" 2>"$work/replay.log"
python3 scripts/same_stream.py "$work/both.dump" "$work/replay.jsonl" >&2 ||
  die "the verdicts in the tenants' topics are not replay's"
python3 - "$work" <<'EOF' >&2
import sys
work = sys.argv[1]
tenant_of = {}
for t in ("acme", "beta"):
    for line in open(f"{work}/{t}.txt"):
        tenant_of[line.split("\t", 1)[0]] = t
for t in ("acme", "beta"):
    verdicts = markers = 0
    for line in open(f"{work}/{t}.dump"):
        part, headers, key, value = line.rstrip("\n").split("\t", 3)
        if "loopguard-kind:judged" in headers:
            markers += 1
            continue
        verdicts += 1
        if tenant_of.get(key) != t:
            sys.exit(f"agent-verdicts.{t} holds a verdict of session {key} (tenant {tenant_of.get(key)})")
    if not markers or not verdicts:
        sys.exit(f"agent-verdicts.{t}: {verdicts} verdicts, {markers} markers")
    print(f"secured-test: agent-verdicts.{t}: {verdicts} verdicts of its own sessions, {markers} markers")
EOF

# ---- A hostile tenant. acme's session acme-loop makes the same call twice; then beta's
# runtime, with exactly the ACLs printed for it, tries everything the shared layout let it
# do (issue 44); then acme's third same call must be blocked, as with no beta at all.
ev() { # session, event id, n (time), type, more fields: a keyed line
  printf '%s\t{"v":1,"event_id":"%s","session_id":"%s","ts":%s,"type":"%s"%s}\n' \
    "$1" "$2" "$1" "$((1767225600000 + $3 * 1000))" "$4" "${5:-}"
}
same_call() { # session, n, more fields: the same command again (acme's ids are predictable)
  ev "$1" "$1-call-$2" "$2" tool_call ",\"turn_id\":\"t$2\",\"call_id\":\"c$2\",\"tool\":\"bash\",\"args\":{\"cmd\":\"make test\"}${3:-}"
}
metric() { curl -s "127.0.0.1:$admin_port/metrics" | awk -v m="$1" 'index($0, m) == 1 {s += $NF} END {print s + 0}'; }
wait_metric() { # metric prefix, at least
  local t0=$SECONDS
  until [ "$(metric "$1")" -ge "$2" ]; do
    ((SECONDS - t0 < 90)) || die "$1 is $(metric "$1"), expected >= $2"
    sleep 0.5
  done
}
judged0=$(consumed)
{
  ev acme-loop acme-loop-ask 1 user_message ',"text":"make the tests pass"'
  same_call acme-loop 1
  same_call acme-loop 2
} >"$work/acme-loop-1.txt"
produce_as runtime "$work/acme-loop-1.txt" acme
wait_metric loopguard_events_consumed_total $((judged0 + 3))
# beta writes where its ACLs do not reach: the shared events topic and acme's own.
same_call acme-loop 3 ',"tenant":"acme"' >"$work/beta-elsewhere.txt"
for topic in agent-events agent-events.acme; do
  produce_to runtime-b "$work/beta-elsewhere.txt" "$topic"
  grep -q 'TopicAuthorization\|not authorized' "$work/produce-runtime-b.log" ||
    die "beta's runtime wrote to $topic: $(head -n 3 "$work/produce-runtime-b.log")"
done
# beta on its own topic: everything naming acme, then acme's ids and sessions unnamed.
{
  for n in 1 2 3; do same_call acme-victim "$n" ',"tenant":"acme"'; done # a forged block
  ev acme-victim acme-victim-ask 3 user_message ',"tenant":"acme","text":"go","limits":{"max_tool_rounds":1}'
  same_call acme-victim 4 ',"tenant":"acme"' # a forged abort: a one-round budget, two rounds
  same_call acme-victim 5 ',"tenant":"acme"'
  ev acme-loop acme-loop-end 2 session_end ',"tenant":"acme"' # end acme's session
} >"$work/beta-named.txt"
named=$(wc -l <"$work/beta-named.txt")
{
  ev acme-loop acme-loop-end-b 2 session_end ',"tenant":"beta"' # end it, as beta
  ev acme-loop acme-loop-end-n 2 session_end ''                 # end it, unnamed
  same_call acme-loop 3 ''                                      # squat acme's next event id
  for n in 1 2 3; do same_call acme-forged "$n" ''; done        # beta's own loop
  for i in $(seq 1 300); do ev "beta-flood-$i" "beta-flood-$i-ask" 3 user_message ',"text":"hi"'; done
} >"$work/beta-unnamed.txt"
unnamed=$(wc -l <"$work/beta-unnamed.txt")
mismatch0=$(metric 'loopguard_dead_letter_total{reason="tenant_mismatch"}')
judged1=$(consumed)
cat "$work/beta-named.txt" "$work/beta-unnamed.txt" >"$work/beta-attack.txt"
produce_as runtime-b "$work/beta-attack.txt" beta
wait_metric loopguard_events_consumed_total $((judged1 + unnamed))
wait_metric 'loopguard_dead_letter_total{reason="tenant_mismatch"}' $((mismatch0 + named))
[ "$(metric 'loopguard_session_evictions_total{reason="capacity"}')" -gt 0 ] ||
  die "beta's flood of 300 sessions did not reach the session cap"
# acme's third same call: blocked, as if beta had done nothing.
same_call acme-loop 3 >"$work/acme-loop-3.txt"
produce_as runtime "$work/acme-loop-3.txt" acme
t0=$SECONDS
until grep -q '"event_id":"acme-loop-call-3".*"action":"block"' "$work/acme-after.dump" 2>/dev/null; do
  ((SECONDS - t0 < 60)) || die "acme's third same call was not blocked: $(grep acme-loop "$work/acme-after.dump" | head -n 3)"
  read_topic agent-verdicts.acme admin "$work/acme-after.dump"
done
read_topic agent-verdicts.beta admin "$work/beta-after.dump"
python3 - "$work" <<'PY' >&2
import json, sys
work = sys.argv[1]
def verdicts(path):
    for line in open(path):
        part, headers, key, value = line.rstrip("\n").split("\t", 3)
        if "loopguard-kind:judged" not in headers:
            yield key, json.loads(value)
acme = list(verdicts(f"{work}/acme-after.dump"))
loop = [(v["event_id"], v["action"]) for k, v in acme if k == "acme-loop"]
if loop != [("acme-loop-call-3", "block")]:
    sys.exit(f"acme-loop's verdicts: {loop}")
foreign = [k for k, v in acme if k.startswith(("acme-victim", "acme-forged", "beta-flood")) or v.get("tenant") != "acme"]
if foreign:
    sys.exit(f"agent-verdicts.acme holds beta's doing: {foreign[:5]}")
beta = list(verdicts(f"{work}/beta-after.dump"))
forged = [(v["action"], v.get("tenant")) for k, v in beta if k == "acme-forged"]
if forged != [("block", "beta")]:
    sys.exit(f"beta's own loop on its topic (a session named like acme's): {forged}")
if any(k == "acme-victim" for k, v in beta):
    sys.exit("an event naming tenant acme on beta's topic was judged")
print(f"secured-test: hostile tenant: acme-loop blocked on its 3rd call; {len(acme)} verdicts in agent-verdicts.acme, none of beta's; beta's forgeries dead-lettered or judged as beta's own")
PY

# ---- A malformed event (as acme's runtime) is dead-lettered; the dead-letter reader reads
# it with its own group, its reason in the headers.
printf 'dlq-s1\t{"v":1,"event_id":"bad-1","session_id":"dlq-s1","tenant":"acme"\n' >"$work/bad.txt"
produce_as runtime "$work/bad.txt" acme
t0=$SECONDS
: >"$work/dlq.dump"
until grep -q 'loopguard-error-reason:invalid_json' "$work/dlq.dump"; do
  ((SECONDS - t0 < 60)) || die "no dead letter for the malformed event: $(head -c 300 "$work/dlq.dump")"
  java_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$B" --topic agent-events-dlq \
    --consumer.config "$clients/dlq-reader.java.properties" --group loopguard-dlq-reader --from-beginning \
    --timeout-ms 5000 --property print.headers=true >"$work/dlq.dump" 2>"$work/dlq.dump.log" || true
done
grep -q 'loopguard-error-reason:tenant_mismatch' "$work/dlq.dump" ||
  die "no dead letter with reason tenant_mismatch for beta's events naming acme"
say "dead letters: the malformed event and beta's events naming acme are in agent-events-dlq, read by User:dlq-reader with its group"

# ---- The edge and the hook path, as acme's runtime; beta's runtime on acme's topic.
edge_port=$((port + 101))
start_edge() { # principal, tenant, log
  "$BIN" edge --config "$work/$1.toml" --tenant "$2" --listen "127.0.0.1:$edge_port" >"$3" 2>&1 &
  edge_pid=$!
  local t0=$SECONDS
  until curl -s -o /dev/null "127.0.0.1:$edge_port/livez"; do
    ((SECONDS - t0 < 30)) || die "edge as $1 not up: $(tail -n 5 "$3")"
    kill -0 "$edge_pid" 2>/dev/null || return 1
    sleep 0.3
  done
}
stop_edge() { kill -TERM "$edge_pid" 2>/dev/null || true; wait "$edge_pid" 2>/dev/null || true; edge_pid=; }
start_edge runtime acme "$work/edge-acme.log" || die "the edge as acme's runtime exited: $(tail -n 5 "$work/edge-acme.log")"
call() { # n: the same call again
  printf '{"v":1,"event_id":"edge-s1-%s","session_id":"edge-s1","ts":%s,"type":"tool_call","tenant":"acme","turn_id":"t1","call_id":"c%s","tool":"bash","args":{"cmd":"make test"}}' \
    "$1" "$((1767225600000 + $1 * 1000))" "$1"
}
answer=
for n in 1 2 3 4; do
  answer=$(curl -s "127.0.0.1:$edge_port/v1/check?deadline_ms=5000" -H 'content-type: application/json' -d "$(call "$n")")
done
echo "$answer" | grep -q '"answer":"verdict"' || die "edge as acme's runtime: no verdict on the 4th same call: $answer"
hook_in=$(sed 's/"session_id": *"[^"]*"/"session_id": "hook-s1"/' tests/fixtures/hooks/claude-code/pre_tool.json)
hook_out=
for _ in 1 2 3 4; do
  hook_out=$(echo "$hook_in" | LOOPGUARD_EDGE="http://127.0.0.1:$edge_port" LOOPGUARD_HOOK_DEADLINE_MS=5000 \
    "$BIN" hook claude-code --tenant acme 2>>"$work/hook.log")
done
echo "$hook_out" | grep -q 'deny\|block' || die "the Claude Code hook through acme's edge: no block on the 4th same call: $hook_out"
stop_edge
say "acme's runtime: the edge and the Claude Code hook got their verdicts"
if start_edge runtime-b acme "$work/edge-b-on-acme.log"; then
  answer=$(curl -s "127.0.0.1:$edge_port/v1/check?deadline_ms=2000" -H 'content-type: application/json' -d "$(call 9)")
  stop_edge
  echo "$answer" | grep -q '"fail_open"' || die "beta's runtime on acme's topic did not fail open: $answer"
fi
grep -q 'refuses \(Read\|Write\)' "$work/edge-b-on-acme.log" || die "beta's edge on acme's topic does not say it was refused: $(tail -n 5 "$work/edge-b-on-acme.log")"
said=$(grep -c 'refuses \(Read\|Write\)' "$work/edge-b-on-acme.log")
say "beta's runtime refused acme's topics (said $said time(s)): $(grep -m1 'refuses \(Read\|Write\)' "$work/edge-b-on-acme.log" | cut -c1-200)"
start_edge runtime-b beta "$work/edge-beta.log" || die "the edge as beta's runtime exited: $(tail -n 5 "$work/edge-beta.log")"
for n in 1 2 3 4; do
  answer=$(curl -s "127.0.0.1:$edge_port/v1/check?deadline_ms=5000" -H 'content-type: application/json' \
    -d "$(call "$n" | sed 's/"acme"/"beta"/; s/edge-s1/edge-b1/g')")
done
# beta's edge, asked for acme (an event naming it, a web page, a rebinding Host): refused.
code() { curl -s -o "$work/edge-refused.out" -w '%{http_code}' "$@"; }
[ "$(code "127.0.0.1:$edge_port/v1/events" -H 'content-type: application/json' -d "$(call 20)")" = 400 ] &&
  grep -q tenant "$work/edge-refused.out" || die "beta's edge took an event naming acme: $(cat "$work/edge-refused.out")"
[ "$(code "127.0.0.1:$edge_port/v1/events" -H 'content-type: text/plain' -H 'origin: http://127.0.0.1:8000' \
  -d "$(call 21 | sed 's/"acme"/"beta"/')")" = 403 ] || die "beta's edge took a browser's request: $(cat "$work/edge-refused.out")"
c=$(code "127.0.0.1:$edge_port/v1/sessions/edge-b1/verdicts" -H 'host: rebound.example:8080' --max-time 3)
case $c in 4??) ;; *) die "beta's edge served a foreign Host: $c" ;; esac
stop_edge
echo "$answer" | grep -q '"answer":"verdict"' || die "beta's own flow: no verdict: $answer"
say "beta's runtime: its own flow works"

# ---- The client libraries, when the caller has them installed.
if [ -n "${PYTHON:-}" ]; then
  KAFKA_BOOTSTRAP_SERVERS=$B KAFKA_SECURED_ENV=$KAFKA_SECURED_ENV bash clients/secured_check.sh >"$work/clients.log" 2>&1 ||
    die "the clients' secured check: $(tail -n 20 "$work/clients.log")"
  say "client libraries: $(tail -n 1 "$work/clients.log")"
fi

# ---- Each ACL of the guard removed in turn: named, then granted again.
stop_guard
grep -e '--allow-principal User:guard ' "$work/acls.commands" >"$work/guard.acls"
n=0
while IFS= read -r line; do
  n=$((n + 1))
  op=$(sed -E 's/.*--operation ([A-Za-z]+).*/\1/' <<<"$line")
  kind=$(sed -E 's/.*--(topic|group|transactional-id) ([^ ]+).*/\1/' <<<"$line")
  name=$(sed -E 's/.*--(topic|group|transactional-id) ([^ ]+).*/\2/' <<<"$line")
  case $kind in topic) want="Topic:$name" ;; group) want="Group:$name" ;; *) want="TransactionalId:$name" ;; esac
  apply_line "${line/ --add / --remove }" remove
  : >"$work/guard.log"
  start_guard
  t0=$SECONDS
  until grep -q "refuses $op on $want" "$work/guard.log"; do
    ((SECONDS - t0 < 40)) || die "ACL $n removed ($op on $want): the guard did not name it: $(grep -m3 -E 'ERROR|refuses' "$work/guard.log")"
    kill -0 "$guard_pid" 2>/dev/null || die "ACL $n removed ($op on $want): the guard exited: $(tail -n 5 "$work/guard.log")"
    sleep 0.5
  done
  ! ready || die "ACL $n removed: /readyz says ready"
  curl -s "127.0.0.1:$admin_port/metrics" >"$work/metrics-$n.out"
  curl -s "127.0.0.1:$admin_port/readyz" | grep -q "$op on $want" || die "ACL $n removed: /readyz does not name it"
  curl -s "127.0.0.1:$admin_port/metrics" | grep 'loopguard_kafka_access_denied{' | grep -q "$op" ||
    die "ACL $n removed: no loopguard_kafka_access_denied series"
  apply_line "$line" add
  wait_ready 60
  stop_guard
  say "ACL $n of the guard removed: named ($op on $want), ready again once granted"
done <"$work/guard.acls"

# ---- Credentials (issue 44): a secret read from a file works; a wrong password, a CA that
# did not sign the broker's certificate and a SASL mechanism the listener does not take each
# end the command at once with a message of its own and exit code 4 (3 is for a broker that
# cannot be reached), naming the user, never the password.
credentials_check() {
  local wrong_pw=WrongPw9zQ other_ca=$work/other-ca pw_file=$work/operator.password
  # The operator's password from a file: used, and its source told by check-config.
  sed -nE 's/^"sasl.password" = "(.*)"$/\1/p' "$work/operator.toml" >"$pw_file"
  [ -s "$pw_file" ] || die "no sasl.password in operator.toml"
  sed -E "s|^\"sasl.password\" = .*|\"sasl.password\" = { file = \"$pw_file\" }|" "$work/operator.toml" >"$work/from-file.toml"
  "$BIN" check-config "$work/from-file.toml" >"$work/from-file.out" 2>&1 || die "check-config of a secret from a file: $(cat "$work/from-file.out")"
  grep -qF "secret kafka.properties.sasl.password: from file $pw_file (value not shown)" "$work/from-file.out" ||
    die "check-config does not say where the password came from: $(cat "$work/from-file.out")"
  "$BIN" topics create --partitions 2 --config "$work/from-file.toml" >>"$work/from-file.out" 2>&1 ||
    die "topics create with the password from a file: $(tail -n 3 "$work/from-file.out")"
  mkdir -p "$other_ca"
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=not-the-broker-ca \
    -keyout "$other_ca/key.pem" -out "$other_ca/ca.pem" >/dev/null 2>&1 || die "openssl cannot make a CA"
  sed -E "s|^\"sasl.password\" = .*|\"sasl.password\" = \"$wrong_pw\"|" "$work/operator.toml" >"$work/refused-password.toml"
  sed -E "s|^\"ssl.ca.location\" = .*|\"ssl.ca.location\" = \"$other_ca/ca.pem\"|" "$work/operator.toml" >"$work/refused-ca.toml"
  sed -E 's|^"sasl.mechanisms" = .*|"sasl.mechanisms" = "SCRAM-SHA-256"|' "$work/operator.toml" >"$work/refused-mechanism.toml"
  local n=0
  expect_refused() { # case, what the message says; then the command
    local case=$1 want=$2 code=0 t0=$SECONDS out
    shift 2
    n=$((n + 1))
    out=$work/refused-$case-$n.out
    "$BIN" "$@" --config "$work/refused-$case.toml" >"$out" 2>&1 || code=$?
    [ "$code" = 4 ] || die "$case ($*): exit $code, not 4: $(tail -n 3 "$out")"
    grep -qF "$want" "$out" || die "$case ($*): does not say \"$want\": $(tail -n 3 "$out")"
    ! grep -q 'cannot reach' "$out" || die "$case ($*): blames the network: $(tail -n 3 "$out")"
    ((SECONDS - t0 < 15)) || die "$case ($*): $((SECONDS - t0)) s to say so"
  }
  local password="Kafka refused the credentials: SASL/PLAIN authentication failed for user \`operator\`"
  local ca="TLS: the broker's certificate is not trusted (certificate verify failed"
  local mechanism="Kafka refused the SASL mechanism SCRAM-SHA-256"
  local -A wants=([password]=$password [ca]=$ca [mechanism]=$mechanism)
  local case
  for case in password ca mechanism; do
    expect_refused "$case" "${wants[$case]}" topics create --partitions 2
    expect_refused "$case" "${wants[$case]}" policy publish "$work/policy.toml"
    expect_refused "$case" "${wants[$case]}" policy history
    expect_refused "$case" "${wants[$case]}" serve
    expect_refused "$case" "${wants[$case]}" edge --tenant acme --listen "127.0.0.1:$((port + 101))"
  done
  ! grep -rq "$wrong_pw" "$work"/refused-*.out || die "a refused password is printed"
  say "credentials: a password from a file works (its source told); a wrong password, an untrusted CA and a refused SASL mechanism each named, exit 4: $(grep -h -m1 -F "$password" "$work"/refused-password-1.out | cut -c1-160)"
}
credentials_check

# ---- No password anywhere.
grep -rl "$KAFKA_SCRAM_PASSWORD_PREFIX" "$work"/*.log "$work"/*.out "$work"/*.dump "$work"/*.table "$work"/*.commands 2>/dev/null &&
  die "a password appears in the files above"
for toml in "$work"/guard.toml "$work"/operator.toml; do
  "$BIN" check-config "$toml" 2>&1 | grep -q "$KAFKA_SCRAM_PASSWORD_PREFIX" && die "check-config prints the password of $toml"
done
say "no password in any log, dump, metric or check-config output"
say "passed"
