#!/usr/bin/env bash
# Single-node Apache Kafka 4.x (KRaft, combined broker+controller) on 127.0.0.1
# for integration tests; jars from Maven Central via `mvn` (uses ~/.m2), Java 17+.
#   fetch          resolve jars into build/kafka/<version>/lib (no-op when cached)
#   start [PORT]   run on PORT (default 19092, controller PORT+1), print
#                  KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:PORT on stdout (all else: stderr)
#   start-secured [PORT]
#                  the same broker locked down: SASL_SSL + SCRAM-SHA-512 clients on
#                  PORT, ACLs enforced, throwaway CA, inter-broker PORT+2; also
#                  prints KAFKA_SECURED_ENV=<run dir>/secured.env ("secured mode" below)
#   stop  [PORT]   stop either kind and remove build/kafka/run-PORT
#
# Three-node cluster (issue 36): three combined KRaft nodes (broker+controller, node ids
# 1..3, a controller quorum of all three), replication 3, min.insync.replicas 2 (the
# offsets and transaction state topics too), auto-create off, short failure timeouts.
# Port scheme: node N of the cluster at BASE (default 19800) takes clients on
# BASE+2(N-1) and its controller listener on BASE+2(N-1)+1, so BASE..BASE+5 in all.
# Run dirs build/kafka/run-cluster-BASE/node-N (server.properties, data/, kafka.pid,
# server.log of the current start; the earlier starts' in server.log.old).
#   start-cluster [BASE]   format and start the three nodes, wait until all are up, print
#                          KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
#   stop-cluster [BASE]    SIGTERM every node (SIGKILL after 30 s), remove the run dir
#   kill9 BASE N           SIGKILL node N (its data stays, for `restart`)
#   term BASE N            SIGTERM node N (controlled shutdown) and wait for its exit
#   restart BASE N         start node N again on its data; waits until it is up
#   leader BASE TOPIC PARTITION
#                          node id of the partition's leader (-1 or none: no leader)
#   controller BASE        node id of the active controller (the metadata quorum's leader)
#   coordinator BASE TRANSACTIONAL_ID
#                          node id of that id's transaction coordinator (the leader of its
#                          __transaction_state partition; the id must have been used)
#   describe BASE          every topic's partitions (TopicCommand --describe): leader,
#                          replicas, ISR; the internal topics too
#   wait-isr BASE [SECS]   wait (120 s) until every node is up and no partition is
#                          under-replicated or without a leader
#   elect-preferred BASE   preferred leader election on every partition (leadership does
#                          not come back to a restarted node by itself: auto rebalance off)
# The query commands print their answer on stdout (all else: stderr); they run Kafka's
# own tools from the jars (TopicCommand, MetadataQuorumCommand, TransactionsCommand,
# LeaderElectionCommand), a JVM start each (0.5-1 s; a class data sharing archive of
# their classes, build/kafka/<version>/tools.jsa, is made on first use).
# Env: KAFKA_VERSION, KAFKA_START_TIMEOUT (s, 90), KAFKA_AUTO_CREATE_TOPICS (false),
#      KAFKA_JVM_OPTS (extra JVM flags for the broker),
#      KAFKA_SCRAM_PASSWORD_PREFIX (secured: password = PREFIX-USER instead of random);
#      cluster: KAFKA_CLUSTER_XMX (384m: each node's heap), KAFKA_BROKER_SESSION_MS
#      (6000: how long a silent node keeps its partitions before the controller fences it).
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

# --- secured mode -----------------------------------------------------------
# Listeners: SASL_SSL on PORT for every client (SCRAM-SHA-512 over TLS);
# INTERNAL on PORT+2 for inter-broker traffic, SASL_PLAINTEXT + SCRAM-SHA-512 as
# User:admin (loopback only, so TLS would add cost and no protection); CONTROLLER
# on PORT+1, SASL_PLAINTEXT + PLAIN as User:admin, because KRaft controllers
# cannot check SCRAM (its credentials live in the metadata log they serve). The
# broker must be a super user on both: StandardAuthorizer also guards its
# registration with the controller and the requests it forwards there.
SCRAM_USERS=(admin guard runtime runtime-b operator dlq-reader)
declare -A PASS=()            # SCRAM user -> password (secured mode only)
# The PLAIN listener's users: ` user_NAME="PASSWORD"` for each, the SCRAM ones' passwords.
plain_users() {
  local u
  for u in "${SCRAM_USERS[@]}"; do printf ' user_%s="%s"' "$u" "${PASS[$u]}"; done
}
STORE_PASS='' CTRL_PASS=''    # keystore/truststore, controller PLAIN login

# 24 chars of [A-Za-z0-9]: safe unquoted in JAAS strings, SCRAM specs,
# .properties files and the env file.
rand_secret() { head -c18 /dev/urandom | base64 | tr -d '\n' | tr '+/' 'xy'; }
# admin -> ADMIN, dlq-reader -> DLQ_READER (env-name part).
env_name() { local n=${1^^}; echo "${n//-/_}"; }

# Random per start; KAFKA_SCRAM_PASSWORD_PREFIX makes the user passwords
# predictable ("PREFIX-USER") so a test can grep logs for leaks. The store and
# controller passwords never leave the run dir and stay random.
gen_passwords() {
  local prefix=${KAFKA_SCRAM_PASSWORD_PREFIX:-} u
  # The prefix lands unescaped in the same places as rand_secret's output.
  [[ -z $prefix || $prefix =~ ^[A-Za-z0-9._-]+$ ]] ||
    die "KAFKA_SCRAM_PASSWORD_PREFIX may only hold [A-Za-z0-9._-]"
  for u in "${SCRAM_USERS[@]}"; do
    if [[ -n $prefix ]]; then PASS[$u]=$prefix-$u; else PASS[$u]=$(rand_secret); fi
  done
  STORE_PASS=$(rand_secret) CTRL_PASS=$(rand_secret)
}

# Throwaway CA and a broker certificate for 127.0.0.1 (IP SAN, what clients
# dial and librdkafka verifies by default) and localhost, packed as the PKCS12
# keystore the broker serves; ca.pem (librdkafka, kafkajs) and truststore.p12
# (Java) are what clients trust. EC P-256 keys: generated in milliseconds.
make_tls() {
  local dir=$1
  mkdir -m 700 "$dir"   # parent: the fresh run dir
  (
    cd "$dir"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
      -subj "/CN=loopguard throwaway test CA" -keyout ca.key -out ca.pem \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -subj "/CN=127.0.0.1" -keyout broker.key -out broker.csr
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" \
      "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" >broker.ext
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
      -days 30 -extfile broker.ext -out broker.pem
    openssl pkcs12 -export -name broker -in broker.pem -inkey broker.key \
      -certfile ca.pem -out broker.p12 -passout "pass:$STORE_PASS"
    # keytool, not openssl: Java only trusts a certificate in a PKCS12 file
    # when it carries Java's trusted-cert attribute, which OpenSSL 3.0 omits.
    keytool -importcert -noprompt -alias ca -file ca.pem -storetype PKCS12 \
      -keystore truststore.p12 -storepass "$STORE_PASS"
    # Nothing may mint more certificates clients would trust; the broker key
    # lives on in broker.p12 only.
    rm -f ca.key ca.srl broker.key broker.csr broker.ext
  ) >"$dir/gen.log" 2>&1 || { cat "$dir/gen.log" >&2; die "TLS material generation failed"; }
}

# Listener and security part of server.properties (secured mode).
secured_listener_props() {
  local port=$1 cport=$2 iport=$3 tls=$4
  local scram=org.apache.kafka.common.security.scram.ScramLoginModule
  local plain=org.apache.kafka.common.security.plain.PlainLoginModule
  cat <<EOF
listeners=SASL_SSL://127.0.0.1:$port,INTERNAL://127.0.0.1:$iport,CONTROLLER://127.0.0.1:$cport
advertised.listeners=SASL_SSL://127.0.0.1:$port,INTERNAL://127.0.0.1:$iport
controller.listener.names=CONTROLLER
inter.broker.listener.name=INTERNAL
listener.security.protocol.map=SASL_SSL:SASL_SSL,INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT
# The global default is GSSAPI; every listener names its own below.
sasl.enabled.mechanisms=SCRAM-SHA-512
# SCRAM-SHA-512 for every client; PLAIN (over the same TLS) too, with the same users and
# passwords, for clients on librdkafka before 2.6.1, whose SCRAM a Kafka 4 broker refuses
# (the service's, docs/decisions.md (gg)).
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$scram required;
listener.name.sasl_ssl.plain.sasl.jaas.config=$plain required$(plain_users);
listener.name.internal.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.internal.scram-sha-512.sasl.jaas.config=$scram required username="admin" password="${PASS[admin]}";
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
# Server side (user_admin) and the broker's own login to its controller.
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=$plain required username="admin" password="$CTRL_PASS" user_admin="$CTRL_PASS";
sasl.mechanism.controller.protocol=PLAIN
ssl.keystore.type=PKCS12
ssl.keystore.location=$tls/broker.p12
ssl.keystore.password=$STORE_PASS
ssl.key.password=$STORE_PASS
ssl.truststore.type=PKCS12
ssl.truststore.location=$tls/truststore.p12
ssl.truststore.password=$STORE_PASS
ssl.client.auth=none
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin
EOF
}

# secured.env (sourceable: KEY=value, no `export`, so dotenv readers can parse
# it too) and, per user, a librdkafka config and a Java client config.
write_client_configs() {
  local port=$1 run=$2 u n
  local tls=$run/tls dir=$run/clients
  mkdir -m 700 "$dir"   # parent: the fresh run dir
  {
    echo "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$port"
    printf 'KAFKA_CA_PEM=%q\n' "$tls/ca.pem"
    printf 'KAFKA_CLIENTS_DIR=%q\n' "$dir"
    for u in "${SCRAM_USERS[@]}"; do
      echo "KAFKA_USER_$(env_name "$u")_PASSWORD=${PASS[$u]}"
    done
  } >"$run/secured.env"
  for u in "${SCRAM_USERS[@]}"; do
    cat >"$dir/$u.properties" <<EOF
bootstrap.servers=127.0.0.1:$port
security.protocol=SASL_SSL
sasl.mechanisms=SCRAM-SHA-512
sasl.username=$u
sasl.password=${PASS[$u]}
ssl.ca.location=$tls/ca.pem
EOF
    # The same login with PLAIN, for librdkafka before 2.6.1 (the service's).
    sed 's/^sasl.mechanisms=SCRAM-SHA-512$/sasl.mechanisms=PLAIN/' "$dir/$u.properties" >"$dir/$u.plain.properties"
    cat >"$dir/$u.java.properties" <<EOF
bootstrap.servers=127.0.0.1:$port
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$u" password="${PASS[$u]}";
ssl.truststore.type=PKCS12
ssl.truststore.location=$tls/truststore.p12
ssl.truststore.password=$STORE_PASS
EOF
  done
}

# --- plaintext mode ----------------------------------------------------------
plain_listener_props() {
  local port=$1 cport=$2
  cat <<EOF
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
EOF
}

# What `eval "$(kafka.sh start...)"` picks up.
print_env() {
  echo "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$1"
  [[ $2 == plain ]] || printf 'KAFKA_SECURED_ENV=%q\n' "$BASE/run-$1/secured.env"
}

# A running broker only counts when it runs in the mode asked for.
mode_of() { if [[ -f $BASE/run-$1/secured.env ]]; then echo secured; else echo plain; fi; }

# start PORT [plain|secured]
start() {
  local port=$1 mode=${2:-plain}
  [[ $port =~ ^[0-9]+$ ]] || die "bad port: $port"
  local cport=$((port + 1)) iport=$((port + 2)) run=$BASE/run-$port timeout=${KAFKA_START_TIMEOUT:-90}
  local ports=("$port" "$cport") scram=() u
  [[ $mode == plain ]] || ports+=("$iport")
  command -v java >/dev/null || die "java (17+) not found"
  if [[ $mode == secured ]]; then
    command -v openssl >/dev/null || die "openssl not found"
    gen_passwords   # first: a bad prefix must fail before we stop anything
  fi
  fetch
  if live_pid "$port" >/dev/null && ready "$port" && [[ $(mode_of "$port") == "$mode" ]]; then
    say "already running"; print_env "$port" "$mode"; return 0
  fi
  stop "$port" 2>/dev/null || true
  for p in "${ports[@]}"; do ! port_open "$p" || die "port $p on 127.0.0.1 is already in use"; done
  mkdir -p "$run/data"
  if [[ $mode == secured ]]; then
    chmod 700 "$run"   # passwords in server.properties, clients/, secured.env
    make_tls "$run/tls"
    # Credentials go into the bootstrap metadata, so they exist from the first
    # request on (no ConfigCommand round trip after start).
    for u in "${SCRAM_USERS[@]}"; do scram+=(--add-scram "SCRAM-SHA-512=[name=$u,password=${PASS[$u]}]"); done
  fi
  {
    cat <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
EOF
    if [[ $mode == secured ]]; then
      secured_listener_props "$port" "$cport" "$iport" "$run/tls"
    else
      plain_listener_props "$port" "$cport"
    fi
    cat <<EOF
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
  } >"$run/server.properties"
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
  # ${scram[@]+...}: bash < 4.4 calls an empty array unbound under set -u.
  java -cp "$CP" kafka.tools.StorageTool format -t "$cid" -c "$run/server.properties" \
    ${scram[@]+"${scram[@]}"} >"$run/format.log" 2>&1 ||
    { cat "$run/format.log" >&2; die "storage format failed"; }
  # Written only now: its presence marks the run dir as secured (mode_of).
  [[ $mode == plain ]] || write_client_configs "$port" "$run"
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
  print_env "$port" "$mode"
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

# --- three-node cluster ------------------------------------------------------
# Node N of the cluster at BASE: clients on BASE+2(N-1), controller on BASE+2(N-1)+1.
cluster_run() { echo "$BASE/run-cluster-$1"; }
node_dir() { echo "$BASE/run-cluster-$1/node-$2"; }
node_port() { echo $(($1 + 2 * ($2 - 1))); }
check_base() { [[ $1 =~ ^[0-9]+$ ]] || die "bad base port: $1"; }
check_node() { [[ $1 =~ ^[123]$ ]] || die "bad node id: $1 (1, 2 or 3)"; }
cluster_bootstrap() {
  echo "127.0.0.1:$(node_port "$1" 1),127.0.0.1:$(node_port "$1" 2),127.0.0.1:$(node_port "$1" 3)"
}

# Pid of node N, only while that process is still ours.
node_pid() {
  local dir f pid
  dir=$(node_dir "$1" "$2")
  f=$dir/kafka.pid
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  [[ -n $pid ]] && alive "$pid" || return 1
  [[ $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") == *"$dir/server.properties"* ]] && echo "$pid"
}
# Up = its client port accepts and this start of it (server.log is per start) logged the
# end of its startup: the broker has caught up with the metadata log and registered.
node_ready() {
  port_open "$(node_port "$1" "$2")" && grep -q 'Kafka Server started' "$(node_dir "$1" "$2")/server.log" 2>/dev/null
}

node_props() {
  local base=$1 n=$2 dir voters
  dir=$(node_dir "$base" "$n")
  voters=1@127.0.0.1:$((base + 1)),2@127.0.0.1:$((base + 3)),3@127.0.0.1:$((base + 5))
  cat <<EOF
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
EOF
  plain_listener_props "$(node_port "$base" "$n")" $(($(node_port "$base" "$n") + 1))
  cat <<EOF
log.dirs=$dir/data
num.partitions=1
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
# Fewer internal partitions than the default 50 (restarts load less; the tools below ask
# the cluster for the coordinator, so no formula depends on the count).
offsets.topic.num.partitions=6
transaction.state.log.num.partitions=6
transaction.abort.timed.out.transaction.cleanup.interval.ms=2000
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=${KAFKA_AUTO_CREATE_TOPICS:-false}
unclean.leader.election.enable=false
# Leadership comes back to a restarted node only when asked (elect-preferred), so a
# test knows when leaders move.
auto.leader.rebalance.enable=false
# A killed node is fenced (its partitions led elsewhere, it leaves the ISRs) after this
# long without a heartbeat (default 9 s); a stuck follower leaves the ISR after 10 s (30 s).
broker.session.timeout.ms=${KAFKA_BROKER_SESSION_MS:-6000}
broker.heartbeat.interval.ms=1000
replica.lag.time.max.ms=10000
EOF
}

# Starts node N on its (formatted) run dir, in the background; server.log starts afresh
# (the earlier starts' logs are appended to server.log.old).
launch_node() {
  local base=$1 n=$2 dir pid
  dir=$(node_dir "$base" "$n")
  if [[ -f $dir/server.log ]]; then cat "$dir/server.log" >>"$dir/server.log.old" && rm -f "$dir/server.log"; fi
  # shellcheck disable=SC2086 # KAFKA_JVM_OPTS is a list of flags
  nohup java "-Xmx${KAFKA_CLUSTER_XMX:-384m}" -Xms128m ${KAFKA_JVM_OPTS:-} \
    "-Dlog4j2.configurationFile=$dir/log4j2.properties" -cp "$CP" \
    kafka.Kafka "$dir/server.properties" </dev/null >>"$dir/stdout.log" 2>&1 &
  pid=$!
  echo "$pid" >"$dir/kafka.pid"
  say "node $n: pid $pid, 127.0.0.1:$(node_port "$base" "$n")"
}

# wait_nodes BASE TIMEOUT N...: until each node is up; a node that dies or a timeout
# kills the nodes waited for (their run dirs stay, for the logs) and fails.
wait_nodes() {
  local base=$1 timeout=$2 t0=$SECONDS n m pending
  shift 2
  while :; do
    pending=0
    for n in "$@"; do
      node_ready "$base" "$n" && continue
      pending=1
      if ! node_pid "$base" "$n" >/dev/null || ((SECONDS - t0 >= timeout)); then
        tail -n 40 "$(node_dir "$base" "$n")/stdout.log" "$(node_dir "$base" "$n")/server.log" >&2 2>/dev/null || true
        for m in "$@"; do kill -KILL "$(node_pid "$base" "$m")" 2>/dev/null || true; done
        die "node $n not up after $((SECONDS - t0))s (logs: $(node_dir "$base" "$n" | sed "s|^$ROOT/||"))"
      fi
    done
    ((pending)) || break
    sleep 0.5
  done
  say "node(s) $* up after $((SECONDS - t0))s"
}

start_cluster() {
  local base=$1 n up=1 p cid dir timeout=${KAFKA_START_TIMEOUT:-90}
  check_base "$base"
  command -v java >/dev/null || die "java (17+) not found"
  fetch
  for n in 1 2 3; do node_pid "$base" "$n" >/dev/null && node_ready "$base" "$n" || up=0; done
  if ((up)); then
    say "cluster already running"
    echo "KAFKA_BOOTSTRAP_SERVERS=$(cluster_bootstrap "$base")"
    return 0
  fi
  stop_cluster "$base" 2>/dev/null || true
  for ((p = base; p < base + 6; p++)); do ! port_open "$p" || die "port $p on 127.0.0.1 is already in use"; done
  # One cluster id for the three; 16 random bytes, URL-safe (as in start).
  cid=$(head -c16 /dev/urandom | base64 | tr -d '=\n' | tr '+/' 'xy')
  for n in 1 2 3; do
    dir=$(node_dir "$base" "$n")
    mkdir -p "$dir/data"
    node_props "$base" "$n" >"$dir/server.properties"
    cat >"$dir/log4j2.properties" <<EOF
appender.f.type=File
appender.f.name=F
appender.f.fileName=$dir/server.log
appender.f.layout.type=PatternLayout
appender.f.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=INFO
rootLogger.appenderRef.f.ref=F
EOF
    # Static voters (controller.quorum.voters): no --initial-controllers needed.
    java -cp "$CP" kafka.tools.StorageTool format -t "$cid" -c "$dir/server.properties" \
      >"$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; die "storage format of node $n failed"; }
  done
  # All three at once: none is up before a quorum of controllers is.
  for n in 1 2 3; do launch_node "$base" "$n"; done
  say "waiting up to ${timeout}s for the three nodes"
  wait_nodes "$base" "$timeout" 1 2 3
  echo "KAFKA_BOOTSTRAP_SERVERS=$(cluster_bootstrap "$base")"
}

# SIGTERM to every node at once (a node left alone without a controller quorum would wait
# out its controlled shutdown), SIGKILL after 30 s, then drop the run dir.
stop_cluster() {
  local base=$1 n pid i left pids=()
  check_base "$base"
  for n in 1 2 3; do
    if pid=$(node_pid "$base" "$n"); then pids+=("$pid"); kill -TERM "$pid" 2>/dev/null || true; fi
  done
  for ((i = 0; i < 60; i++)); do
    left=0
    for pid in ${pids[@]+"${pids[@]}"}; do ! alive "$pid" || left=1; done
    ((left)) || break
    sleep 0.5
  done
  for pid in ${pids[@]+"${pids[@]}"}; do
    if alive "$pid"; then say "SIGKILL $pid"; kill -KILL "$pid" 2>/dev/null || true; fi
  done
  ((${#pids[@]} == 0)) || say "stopped the cluster at $base"
  rm -rf "$(cluster_run "$base")"
}

# kill9|term|restart BASE N
node_cmd() {
  local cmd=$1 base=$2 n=$3 pid i timeout=${KAFKA_START_TIMEOUT:-90}
  check_base "$base"
  check_node "$n"
  [[ -d $(node_dir "$base" "$n") ]] || die "no cluster at $base (start-cluster $base)"
  case $cmd in
    kill9 | term)
      pid=$(node_pid "$base" "$n") || die "node $n is not running"
      if [[ $cmd == kill9 ]]; then
        kill -KILL "$pid" 2>/dev/null || true
      else
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 120; i++)); do alive "$pid" || break; sleep 0.5; done
        if alive "$pid"; then say "node $n: no exit 60 s after SIGTERM: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
      fi
      for ((i = 0; i < 40; i++)); do alive "$pid" || break; sleep 0.25; done
      ! alive "$pid" || die "node $n (pid $pid) did not die"
      say "node $n: $cmd done"
      ;;
    restart)
      ! node_pid "$base" "$n" >/dev/null || die "node $n is still running"
      ! port_open "$(node_port "$base" "$n")" || die "port $(node_port "$base" "$n") still in use"
      launch_node "$base" "$n"
      wait_nodes "$base" "$timeout" "$n"
      ;;
  esac
}

# Kafka's command line tools, quiet (warnings and errors to stderr), in a small JVM. The
# first call records the classes it loads in a class data sharing archive (tools.jsa);
# later calls map it instead of loading them: half the CPU and wall time of a call
# (0.4 s against 1.1 s here), which counts on a busy machine. An archive the JVM cannot
# use (another JDK) is ignored; JVM logging: errors only, on stderr (never stdout).
tool() {
  local conf=$BASE/$KAFKA_VERSION/tools-log4j2.properties jsa=$BASE/$KAFKA_VERSION/tools.jsa cds
  [[ -f $conf ]] || printf '%s\n' appender.e.type=Console appender.e.name=E \
    appender.e.target=SYSTEM_ERR appender.e.layout.type=PatternLayout rootLogger.level=WARN \
    rootLogger.appenderRef.e.ref=E >"$conf"
  if [[ -f $jsa ]]; then
    cds=-XX:SharedArchiveFile=$jsa
  else
    cds=-XX:ArchiveClassesAtExit=$jsa.$$   # renamed below: a half-written one is never used
  fi
  local rc=0
  java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC "$cds" -Xlog:disable -Xlog:all=error:stderr \
    "-Dlog4j2.configurationFile=$conf" -cp "$CP" "$@" || rc=$?
  if [[ -f $jsa.$$ ]]; then mv -f "$jsa.$$" "$jsa"; fi
  return "$rc"
}
need_args() { (($1 == $2)) || usage; }

# leader BASE TOPIC PARTITION. TopicCommand's describe line per partition is
# "Topic: T<TAB>Partition: P<TAB>Leader: L<TAB>Replicas: ...<TAB>Isr: ...".
leader_of() {
  local base=$1 topic=$2 part=$3 out l
  check_base "$base"
  out=$(tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$(cluster_bootstrap "$base")" \
    --describe --topic "$topic") || die "describing $topic failed"
  l=$(awk -F'\t' -v p="$part" '{ delete f; for (i = 1; i <= NF; i++) { split($i, kv, ": "); gsub(/^ +/, "", kv[1]); f[kv[1]] = kv[2] }
    if (("Partition" in f) && f["Partition"] == p && ("Leader" in f)) { print f["Leader"]; exit } }' <<<"$out")
  [[ -n $l ]] || die "no partition $part of $topic in: $out"
  echo "$l"
}

# controller BASE: MetadataQuorumCommand's "LeaderId: N".
controller_of() {
  local base=$1 out l
  check_base "$base"
  out=$(tool org.apache.kafka.tools.MetadataQuorumCommand --bootstrap-server "$(cluster_bootstrap "$base")" \
    describe --status) || die "describing the metadata quorum failed"
  l=$(awk '$1 == "LeaderId:" { print $2; exit }' <<<"$out")
  [[ -n $l ]] || die "no LeaderId in: $out"
  echo "$l"
}

# coordinator BASE TRANSACTIONAL_ID: TransactionsCommand describe prints a header row
# (CoordinatorId, TransactionalId, ...) and a row of values, tab-separated.
coordinator_of() {
  local base=$1 id=$2 out c
  check_base "$base"
  out=$(tool org.apache.kafka.tools.TransactionsCommand --bootstrap-server "$(cluster_bootstrap "$base")" \
    describe --transactional-id "$id") || die "describing transactional id $id failed"
  c=$(awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) if ($i ~ /^ *CoordinatorId *$/) col = i; next }
    col { v = $col; gsub(/ /, "", v); print v; exit }' <<<"$out")
  [[ -n $c ]] || die "no CoordinatorId in: $out"
  echo "$c"
}

# describe BASE: TopicCommand's description of every topic, the internal ones too.
describe() {
  check_base "$1"
  tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$(cluster_bootstrap "$1")" --describe ||
    die "describing the topics failed"
}

# wait-isr BASE SECS: every node up (this start) and every partition with a leader and
# an ISR as long as its replica list (one describe per try, its lines checked here).
wait_isr() {
  local base=$1 timeout=$2 t0=$SECONDS n out
  check_base "$base"
  while :; do
    out=
    for n in 1 2 3; do node_ready "$base" "$n" || out="node $n not up"; done
    if [[ -z $out ]]; then
      if out=$(tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$(cluster_bootstrap "$base")" --describe 2>&1); then
        out=$(awk -F'\t' '{ delete f; for (i = 1; i <= NF; i++) { split($i, kv, ": "); gsub(/^ +/, "", kv[1]); f[kv[1]] = kv[2] }
          if (!("Partition" in f)) next
          if (f["Leader"] == "none" || f["Leader"] < 0 || split(f["Isr"], a, ",") < split(f["Replicas"], b, ",")) print }' <<<"$out")
      else
        out="describe failed: $out"
      fi
    fi
    [[ -z $out ]] && break
    ((SECONDS - t0 < timeout)) || die "ISRs not full after ${timeout}s: $(head -n 5 <<<"$out")"
    sleep 1
  done
  say "ISRs full after $((SECONDS - t0))s"
}

# elect-preferred BASE: leadership back to each partition's first replica.
elect_preferred() {
  local base=$1 out
  check_base "$base"
  out=$(tool org.apache.kafka.tools.LeaderElectionCommand --bootstrap-server "$(cluster_bootstrap "$base")" \
    --election-type PREFERRED --all-topic-partitions 2>&1) || { echo "$out" >&2; die "preferred leader election failed"; }
  say "preferred leaders: $(grep -c . <<<"$out") line(s) of output"
}

usage() {
  cat >&2 <<EOF
usage: $0 fetch | start [PORT] | start-secured [PORT] | stop [PORT]
       $0 start-cluster [BASE] | stop-cluster [BASE] | kill9|term|restart BASE N
       $0 leader BASE TOPIC PARTITION | controller BASE | coordinator BASE TRANSACTIONAL_ID
       $0 describe BASE | wait-isr BASE [SECS] | elect-preferred BASE
EOF
  exit 2
}

case ${1:-} in
  fetch) fetch; say "jars in ${LIB#"$ROOT"/}" ;;
  start) start "${2:-19092}" ;;
  start-secured) start "${2:-19092}" secured ;;
  stop) stop "${2:-19092}" ;;
  start-cluster) start_cluster "${2:-19800}" ;;
  stop-cluster) stop_cluster "${2:-19800}" ;;
  kill9 | term | restart) need_args $# 3; node_cmd "$1" "$2" "$3" ;;
  leader) need_args $# 4; leader_of "$2" "$3" "$4" ;;
  controller) need_args $# 2; controller_of "$2" ;;
  coordinator) need_args $# 3; coordinator_of "$2" "$3" ;;
  describe) need_args $# 2; describe "$2" ;;
  wait-isr) (($# == 2 || $# == 3)) || usage; wait_isr "$2" "${3:-120}" ;;
  elect-preferred) need_args $# 2; elect_preferred "$2" ;;
  *) usage ;;
esac
