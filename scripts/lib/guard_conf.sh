# Sourced by the sizing scripts: a guard configuration on topics named after a tag.
# guard_conf FILE TAG THREADS [ENGINE_TOML]: the [kafka] section for topics TAG-events,
#   TAG-verdicts, ... (group and transactional ids TAG), THREADS stream threads, a 6 s
#   consumer session timeout (a killed guard is noticed quickly), then ENGINE_TOML under
#   [engine]. Needs KAFKA_BOOTSTRAP_SERVERS.
guard_conf() {
  cat >"$1" <<EOF
[kafka]
bootstrap_servers = "$KAFKA_BOOTSTRAP_SERVERS"
group_id = "$2"
events_topic = "$2-events"
verdicts_topic = "$2-verdicts"
dlq_topic = "$2-dlq"
state_topic = "$2-state"
policy_topic = "$2-policy"
transactional_id_prefix = "$2"
threads = $3

[kafka.properties]
"session.timeout.ms" = "6000"

[engine]
${4:-}
EOF
}
