//! What the configuration fixes about the guard's Kafka clients: the dead-letter size limit
//! and the librdkafka settings `kafka.properties` may not name.

/// The smallest `kafka.dlq_max_bytes` accepted: room for a minimal dead letter.
pub const MIN_DLQ_LIMIT: usize = 4096;
/// librdkafka's default `message.max.bytes`.
pub const PRODUCER_DEFAULT_MAX_BYTES: usize = 1_000_000;

/// The dead-letter limit from `dlq_max_bytes` and the producer's `message.max.bytes`.
pub fn dlq_limit(dlq_max_bytes: usize, producer_max_bytes: Option<usize>) -> usize {
    dlq_max_bytes.min(producer_max_bytes.unwrap_or(PRODUCER_DEFAULT_MAX_BYTES))
}

/// The librdkafka settings the guard's guarantees rest on, with what decides each:
/// `kafka.properties` may not name them (the configuration is refused), and every other
/// property wins over the guard's own tuning (docs/service.md, "Client settings").
pub const GUARD_OWNED_PROPERTIES: [(&str, &str); 10] = [
    ("bootstrap.servers", "set kafka.bootstrap_servers"),
    ("group.id", "set kafka.group_id"),
    ("transactional.id", "set kafka.transactional_id_prefix"),
    (
        "enable.idempotence",
        "set by the guard: no lost or doubled verdicts",
    ),
    (
        "isolation.level",
        "set by the guard: it reads committed records only",
    ),
    (
        "enable.auto.commit",
        "set by the guard: offsets commit with the verdicts",
    ),
    (
        "enable.auto.offset.store",
        "set by the guard: offsets commit with the verdicts",
    ),
    (
        "auto.offset.reset",
        "set by the guard: a new group judges every event",
    ),
    (
        "enable.partition.eof",
        "set by the guard: restores wait for partition ends",
    ),
    (
        "partition.assignment.strategy",
        "set by the guard: its rebalance callbacks are incremental",
    ),
];
