# Sourced by the benchmark scripts. use_topics TAG: points `loopguard serve` and the load
# tool (through LOOPGUARD__* variables) at fresh topics, group and transactional ids named
# after TAG (the policy topic too: a version published on another run's topic never
# reaches this one), the admin HTTP at ADMIN_PORT, and creates the topics with PARTITIONS
# partitions. lg ARGS: the load tool on those topics.
# Needs BIN, KAFKA_BOOTSTRAP_SERVERS, ADMIN_PORT, PARTITIONS.
use_topics() {
  tag=$1
  export LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP_SERVERS
  export LOOPGUARD__KAFKA__EVENTS_TOPIC=$tag-events LOOPGUARD__KAFKA__VERDICTS_TOPIC=$tag-verdicts
  export LOOPGUARD__KAFKA__DLQ_TOPIC=$tag-dlq LOOPGUARD__KAFKA__STATE_TOPIC=$tag-state
  export LOOPGUARD__KAFKA__POLICY_TOPIC=$tag-policy
  export LOOPGUARD__KAFKA__GROUP_ID=$tag LOOPGUARD__KAFKA__TRANSACTIONAL_ID_PREFIX=$tag
  export LOOPGUARD__ADMIN__LISTEN=127.0.0.1:$ADMIN_PORT
  "$BIN" topics create --partitions "$PARTITIONS" >&2
}
lg() { "$BIN" loadgen --events-topic "$tag-events" --verdicts-topic "$tag-verdicts" "$@"; }
