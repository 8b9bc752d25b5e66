//! What a `Guard` connects to: the broker, the two topics, the read path and any extra
//! librdkafka properties (SASL, TLS), taken from the guard's own configuration file.

use crate::config::Config;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct GuardSettings {
    pub bootstrap_servers: String,
    pub events_topic: String,
    pub verdicts_topic: String,
    /// True: verdicts as soon as the guard writes them (each still delivered once). False:
    /// only those of committed transactions, seen when the guard's batch commits.
    pub read_uncommitted: bool,
    /// Extra librdkafka properties for the producer and the reader; they win over ours.
    pub properties: Vec<(String, String)>,
    /// How long `Guard::connect` may take to learn the topics.
    pub startup_timeout: Duration,
}

impl GuardSettings {
    pub fn new(bootstrap_servers: impl Into<String>) -> Self {
        GuardSettings {
            bootstrap_servers: bootstrap_servers.into(),
            events_topic: "agent-events".into(),
            verdicts_topic: "agent-verdicts".into(),
            read_uncommitted: false,
            properties: Vec::new(),
            startup_timeout: Duration::from_secs(10),
        }
    }

    /// The broker, topic names and properties of a guard configuration (`[kafka]`), so a
    /// client beside a guard shares its file.
    pub fn from_config(cfg: &Config) -> Self {
        GuardSettings {
            bootstrap_servers: cfg.kafka.bootstrap_servers.clone(),
            events_topic: cfg.kafka.events_topic.clone(),
            verdicts_topic: cfg.kafka.verdicts_topic.clone(),
            properties: cfg.kafka_properties(),
            ..GuardSettings::new("")
        }
    }
}
