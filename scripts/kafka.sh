#!/usr/bin/env bash
# Single-node Apache Kafka 4.x (KRaft, combined broker+controller) on 127.0.0.1
# for integration tests; jars from Maven Central via `mvn` (uses ~/.m2), Java 17+.
#   fetch          resolve jars into build/kafka/<version>/lib (no-op when cached)
#   start [PORT]   run on PORT (default 19092, controller PORT+1), print
#                  KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:PORT on stdout (all else: stderr)
#   stop  [PORT]   stop it and remove build/kafka/run-PORT
# Env: KAFKA_VERSION, KAFKA_START_TIMEOUT (s, 90), KAFKA_AUTO_CREATE_TOPICS (false),
#      KAFKA_JVM_OPTS (extra JVM flags for the broker).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KAFKA_VERSION=${KAFKA_VERSION:-4.1.2}
LOG4J_VERSION=2.24.3              # log4j2 line used by Kafka 4.1 (slf4j 1.7 binding)
DEP_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.6.1
BASE=$ROOT/build/kafka
LIB=$BASE/$KAFKA_VERSION/lib
CP="$LIB/*"

say() { echo "kafka.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Up = port accepts and the broker logged the end of its startup.
ready() { port_open "$1" && grep -q 'Kafka Server started' "$BASE/run-$1/server.log" 2>/dev/null; }
alive() { [[ -r /proc/$1/status ]] && ! grep -q '^State:.*Z' "/proc/$1/status"; }  # zombie = dead

# Resolve the broker (kafka_2.13), the CLI tools (kafka-tools minus the Connect
# runtime it drags in) and a log4j2 binding. The .complete marker makes repeat
# calls a no-op; the temp dir keeps an interrupted fetch from counting.
fetch() {
  [[ -f $LIB/.complete ]] && return 0
  command -v mvn >/dev/null || die "mvn not found"
  local dir=$BASE/$KAFKA_VERSION tmp=$LIB.tmp.$$
  mkdir -p "$dir"
  cat >"$dir/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local</groupId><artifactId>kafka-runtime</artifactId><version>0</version><packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version>
      <exclusions><exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId></exclusion></exclusions></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$LOG4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>$LOG4J_VERSION</version></dependency>
  </dependencies>
</project>
EOF
  say "fetching Kafka $KAFKA_VERSION jars with mvn"
  rm -rf "$tmp"
  # Maven logs to stdout (with stray colour codes even under -B): log to a file.
  mvn -B -q -f "$dir/pom.xml" "$DEP_PLUGIN:copy-dependencies" -DincludeScope=runtime \
    -DoutputDirectory="$tmp" >"$dir/mvn.log" 2>&1 || { cat "$dir/mvn.log" >&2; rm -rf "$tmp"; die "mvn failed"; }
  rm -rf "$LIB" && mv "$tmp" "$LIB" && touch "$LIB/.complete"
}

# Pid of our broker for a port, only if that process is still ours.
live_pid() {
  local f=$BASE/run-$1/kafka.pid pid
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  [[ -n $pid ]] && alive "$pid" || return 1
  # No `| grep -q` here: with pipefail an early-exiting grep can fail the pipe.
  [[ $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") == *"run-$1/server.properties"* ]] && echo "$pid"
}

start() {
  local port=$1
  [[ $port =~ ^[0-9]+$ ]] || die "bad port: $port"
  local cport=$((port + 1)) run=$BASE/run-$port timeout=${KAFKA_START_TIMEOUT:-90}
  command -v java >/dev/null || die "java (17+) not found"
  fetch
  if live_pid "$port" >/dev/null && ready "$port"; then
    say "already running"; echo "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$port"; return 0
  fi
  stop "$port" 2>/dev/null || true
  for p in "$port" "$cport"; do ! port_open "$p" || die "port $p on 127.0.0.1 is already in use"; done
  mkdir -p "$run/data"
  cat >"$run/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$run/data
num.partitions=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
# Abort a crashed producer's transaction soon after it times out (tests kill -9 instances).
transaction.abort.timed.out.transaction.cleanup.interval.ms=2000
transaction.state.log.num.partitions=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=${KAFKA_AUTO_CREATE_TOPICS:-false}
EOF
  # log4j2: everything to server.log in the run dir.
  cat >"$run/log4j2.properties" <<EOF
appender.f.type=File
appender.f.name=F
appender.f.fileName=$run/server.log
appender.f.layout.type=PatternLayout
appender.f.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=INFO
rootLogger.appenderRef.f.ref=F
EOF
  # Random cluster id: 16 random bytes as 22 base64 chars; '+' and '/' become
  # letters so it is URL-safe and never starts with '-'.
  local cid
  cid=$(head -c16 /dev/urandom | base64 | tr -d '=\n' | tr '+/' 'xy')
  # kafka.tools.StorageTool is the storage tool main class (checked for 4.1.x).
  java -cp "$CP" kafka.tools.StorageTool format -t "$cid" -c "$run/server.properties" \
    >"$run/format.log" 2>&1 || { cat "$run/format.log" >&2; die "storage format failed"; }
  # Detached from our stdin/stdout so callers like $(kafka.sh start) return.
  # shellcheck disable=SC2086 # KAFKA_JVM_OPTS is a list of flags
  nohup java -Xmx512m -Xms128m ${KAFKA_JVM_OPTS:-} \
    "-Dlog4j2.configurationFile=$run/log4j2.properties" -cp "$CP" \
    kafka.Kafka "$run/server.properties" </dev/null >"$run/stdout.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$run/kafka.pid"
  say "broker pid $pid, waiting up to ${timeout}s for 127.0.0.1:$port"
  local t0=$SECONDS
  until ready "$port"; do
    if ! alive "$pid" || ((SECONDS - t0 >= timeout)); then
      tail -n 40 "$run/stdout.log" "$run/server.log" >&2 2>/dev/null || true
      kill -KILL "$pid" 2>/dev/null || true   # keep the run dir for the logs
      die "broker not up after $((SECONDS - t0))s (logs: ${run#"$ROOT"/})"
    fi
    sleep 0.5
  done
  say "ready after $((SECONDS - t0))s"
  echo "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$port"
}

# SIGTERM (controlled shutdown), SIGKILL after 30 s, then drop the run dir.
stop() {
  local port=$1 pid i
  if pid=$(live_pid "$port"); then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 60; i++)); do live_pid "$port" >/dev/null || break; sleep 0.5; done
    if live_pid "$port" >/dev/null; then
      say "SIGKILL $pid"; kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 20; i++)); do alive "$pid" || break; sleep 0.25; done
    fi
    say "stopped broker on port $port"
  fi
  rm -rf "$BASE/run-$port"
}

case ${1:-} in
  fetch) fetch; say "jars in ${LIB#"$ROOT"/}" ;;
  start) start "${2:-19092}" ;;
  stop) stop "${2:-19092}" ;;
  *) echo "usage: $0 fetch | start [PORT] | stop [PORT]" >&2; exit 2 ;;
esac
