//! `loopguard topics create`: creates the guard's five topics on a broker with the right
//! partitions, retention and compaction. Idempotent; it never alters a topic that exists,
//! it only checks its partition count.

use crate::config::Config;
use crate::service::kafka::topics::{login, partition_count, reachable};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use rdkafka::types::RDKafkaErrorCode;
use std::time::{Duration, Instant};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TopicsError {
    #[error("kafka.bootstrap_servers is empty: give a broker (--bootstrap-servers, the config file or LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS)")]
    NoBroker,
    #[error("--partitions must be at least 1")]
    NoPartitions,
    /// librdkafka's error, its own text once (no source: its chain repeats that text).
    #[error("kafka: {0}")]
    Kafka(rdkafka::error::KafkaError),
    #[error(transparent)]
    Check(#[from] crate::service::kafka::topics::KafkaSetupError),
    #[error("cannot create topic `{topic}`: {code}")]
    Create {
        topic: String,
        code: RDKafkaErrorCode,
    },
    #[error("topic `{topic}` exists with {found} partitions, not {expected}: the events, verdicts and state topics must have equal counts (use --partitions {found}, or delete it)")]
    PartitionMismatch {
        topic: String,
        found: usize,
        expected: usize,
    },
    #[error("--tenant `{0}`: no topic for it: set kafka.verdicts_topic_template (e.g. \"agent-verdicts.{{tenant}}\"), and name tenants with ASCII letters, digits, `.`, `_` or `-`")]
    Tenant(String),
    #[error("topic `{0}` was created but the broker does not list it after 30 s")]
    NotVisible(String),
}

impl From<rdkafka::error::KafkaError> for TopicsError {
    fn from(e: rdkafka::error::KafkaError) -> Self {
        TopicsError::Kafka(e)
    }
}

/// What `topics create` is asked to do; times in hours so the defaults read plainly.
#[derive(Debug, Clone, clap::Args)]
pub struct CreateArgs {
    /// Partitions of the events, verdicts and state topics (they must be equal): the most
    /// guard instances that can share the load. Choose with head-room; see docs/operations.md.
    #[arg(long)]
    pub partitions: usize,
    /// Replication factor of every topic (-1: the broker's default.replication.factor).
    #[arg(long, default_value_t = -1)]
    pub replication_factor: i32,
    /// `min.insync.replicas` of the events, verdicts and state topics (unset: the broker's).
    #[arg(long)]
    pub min_insync_replicas: Option<u32>,
    /// Partitions of the dead-letter topic (any count works).
    #[arg(long, default_value_t = 1)]
    pub dlq_partitions: usize,
    /// Retention of `agent-events`: long enough to replay a day or two for tuning.
    #[arg(long, default_value_t = 72)]
    pub events_retention_hours: u64,
    /// Retention of `agent-verdicts`: runtimes read them live.
    #[arg(long, default_value_t = 24)]
    pub verdicts_retention_hours: u64,
    /// Retention of `agent-events-dlq`: time for an operator to look.
    #[arg(long, default_value_t = 336)]
    pub dlq_retention_hours: u64,
    /// A tenant whose verdicts topic (`kafka.verdicts_topic_template`) to create too,
    /// partitioned like the events topic; repeat for each tenant.
    #[arg(long)]
    pub tenant: Vec<String>,
    /// Broker list; overrides `kafka.bootstrap_servers` of the configuration.
    #[arg(long)]
    pub bootstrap_servers: Option<String>,
}

/// One topic to create: name, partitions, topic configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: usize,
    /// Whether its partition count must equal `partitions` of the events topic.
    pub aligned: bool,
    pub configs: Vec<(&'static str, String)>,
}

/// The five topics for this configuration's names (pure: what `create` will ask for).
pub fn plan(cfg: &Config, args: &CreateArgs) -> Result<Vec<TopicSpec>, TopicsError> {
    if args.partitions == 0 || args.dlq_partitions == 0 {
        return Err(TopicsError::NoPartitions);
    }
    let ms = |hours: u64| (hours * 3_600_000).to_string();
    let isr = |mut c: Vec<(&'static str, String)>| {
        if let Some(n) = args.min_insync_replicas {
            c.push(("min.insync.replicas", n.to_string()));
        }
        c
    };
    let k = &cfg.kafka;
    let mut tenants = Vec::new();
    for t in &args.tenant {
        let topic = k
            .verdicts_topic_for(Some(t))
            .filter(|_| !k.verdicts_topic_template.is_empty())
            .ok_or_else(|| TopicsError::Tenant(t.clone()))?;
        tenants.push(TopicSpec {
            name: topic,
            partitions: args.partitions,
            aligned: true,
            configs: isr(vec![("retention.ms", ms(args.verdicts_retention_hours))]),
        });
        // Tenants from the writer: the tenant's own events topic, and the state topic its
        // sessions are checkpointed to (the guard serves a tenant once all three exist).
        if let Some(events) = k.events_topic_for(t) {
            tenants.push(TopicSpec {
                name: events,
                partitions: args.partitions,
                aligned: true,
                configs: isr(vec![("retention.ms", ms(args.events_retention_hours))]),
            });
            tenants.push(TopicSpec {
                name: k.state_topic_for(Some(t)),
                partitions: args.partitions,
                aligned: true,
                configs: isr(state_configs()),
            });
        }
    }
    let mut specs = vec![
        TopicSpec {
            name: k.events_topic.clone(),
            partitions: args.partitions,
            aligned: true,
            configs: isr(vec![("retention.ms", ms(args.events_retention_hours))]),
        },
        TopicSpec {
            name: k.verdicts_topic.clone(),
            partitions: args.partitions,
            aligned: true,
            configs: isr(vec![("retention.ms", ms(args.verdicts_retention_hours))]),
        },
        TopicSpec {
            name: k.dlq_topic.clone(),
            partitions: args.dlq_partitions,
            aligned: false,
            configs: vec![("retention.ms", ms(args.dlq_retention_hours))],
        },
        TopicSpec {
            // A restore reads a state partition from its start and the active segment is
            // never compacted: small segments keep that read close to the live state.
            name: k.state_topic.clone(),
            partitions: args.partitions,
            aligned: true,
            configs: isr(state_configs()),
        },
        TopicSpec {
            // The live policy: one partition (one order of versions for every instance),
            // compacted under one key, so it holds the version in force and little else.
            name: k.policy_topic.clone(),
            partitions: 1,
            aligned: false,
            configs: isr(vec![("cleanup.policy", "compact".into())]),
        },
    ];
    specs.extend(tenants);
    Ok(specs)
}

/// A state topic's configs: compacted, and a restore reads a partition from its start while
/// the active segment is never compacted, so small segments keep that read close to the
/// live state.
fn state_configs() -> Vec<(&'static str, String)> {
    vec![
        ("cleanup.policy", "compact".into()),
        ("min.compaction.lag.ms", "60000".into()),
        ("segment.ms", "600000".into()),
        ("segment.bytes", "67108864".into()),
        ("min.cleanable.dirty.ratio", "0.2".into()),
    ]
}

/// What happened to one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Exists,
}

/// Creates what is missing, checks what exists; returns one line per topic for the user.
pub async fn create(mut cfg: Config, args: &CreateArgs) -> Result<Vec<String>, TopicsError> {
    let mut setting = "kafka.bootstrap_servers";
    if let Some(b) = &args.bootstrap_servers {
        cfg.kafka.bootstrap_servers = b.clone();
        setting = "--bootstrap-servers";
    }
    if cfg.kafka.bootstrap_servers.is_empty() {
        return Err(TopicsError::NoBroker);
    }
    let specs = plan(&cfg, args)?;
    tokio::task::block_in_place(|| reachable(&cfg.kafka.bootstrap_servers, setting))?;
    let mut client = ClientConfig::new();
    client.set("bootstrap.servers", &cfg.kafka.bootstrap_servers);
    for (k, v) in cfg.kafka_properties() {
        client.set(k, v);
    }
    tokio::task::block_in_place(|| login(&client, &cfg.kafka.bootstrap_servers, setting))?;
    let probe: BaseConsumer = client.create()?;
    let admin: AdminClient<DefaultClientContext> = client.create()?;
    let mut lines = Vec::new();
    for spec in &specs {
        let outcome = match count(&probe, &spec.name, &cfg.kafka.bootstrap_servers, setting)? {
            Some(found) => check(spec, found)?,
            None => match create_one(&admin, spec, args.replication_factor).await? {
                // Another `topics create` (or a guard) won the race: check it like one that
                // existed.
                Outcome::Exists => {
                    match count(&probe, &spec.name, &cfg.kafka.bootstrap_servers, setting)? {
                        Some(found) => check(spec, found)?,
                        None => Outcome::Exists,
                    }
                }
                created => created,
            },
        };
        lines.push(match outcome {
            Outcome::Created => format!(
                "created {} ({} partition{}{})",
                spec.name,
                spec.partitions,
                if spec.partitions == 1 { "" } else { "s" },
                spec.configs
                    .iter()
                    .map(|(k, v)| format!(", {k}={v}"))
                    .collect::<String>()
            ),
            Outcome::Exists => format!("exists  {} (left unchanged)", spec.name),
        });
    }
    // Creation is asynchronous on the broker side: wait until every topic is listed, so a
    // `serve` started right after finds them.
    let deadline = Instant::now() + Duration::from_secs(30);
    for spec in &specs {
        while count(&probe, &spec.name, &cfg.kafka.bootstrap_servers, setting)?.is_none() {
            if Instant::now() > deadline {
                return Err(TopicsError::NotVisible(spec.name.clone()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(lines)
}

/// An existing topic is fine unless its partition count must match and does not.
fn check(spec: &TopicSpec, found: usize) -> Result<Outcome, TopicsError> {
    if spec.aligned && found != spec.partitions {
        return Err(TopicsError::PartitionMismatch {
            topic: spec.name.clone(),
            found,
            expected: spec.partitions,
        });
    }
    Ok(Outcome::Exists)
}

/// The topic's partition count (a blocking metadata request, kept off the async workers).
fn count(
    probe: &BaseConsumer,
    topic: &str,
    servers: &str,
    setting: &'static str,
) -> Result<Option<usize>, TopicsError> {
    Ok(tokio::task::block_in_place(|| {
        partition_count(probe, topic).map_err(|e| e.naming(servers, setting))
    })?)
}

async fn create_one(
    admin: &AdminClient<DefaultClientContext>,
    spec: &TopicSpec,
    replication: i32,
) -> Result<Outcome, TopicsError> {
    let mut t = NewTopic::new(
        &spec.name,
        spec.partitions as i32,
        TopicReplication::Fixed(replication),
    );
    for (k, v) in &spec.configs {
        t = t.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for r in admin.create_topics([&t], &opts).await? {
        match r {
            Ok(_) => {}
            // Another `topics create` (or a guard) won the race: check it like an existing one.
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => return Ok(Outcome::Exists),
            Err((topic, code)) => return Err(TopicsError::Create { topic, code }),
        }
    }
    Ok(Outcome::Created)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: CreateArgs,
    }

    fn args(extra: &[&str]) -> CreateArgs {
        let mut argv = vec!["x", "--partitions", "6"];
        argv.extend_from_slice(extra);
        Cli::parse_from(argv).args
    }

    #[test]
    fn a_tenant_from_the_writer_gets_its_events_verdicts_and_state_topics() {
        let env = [
            (
                "LOOPGUARD__KAFKA__EVENTS_TOPIC_TEMPLATE",
                "agent-events.{tenant}",
            ),
            (
                "LOOPGUARD__KAFKA__VERDICTS_TOPIC_TEMPLATE",
                "agent-verdicts.{tenant}",
            ),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let cfg = crate::config::load_with_env(None, env.into_iter()).unwrap();
        let specs = plan(&cfg, &args(&["--tenant", "acme"])).unwrap();
        let tenant: Vec<_> = specs[5..].iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            tenant,
            [
                "agent-verdicts.acme",
                "agent-events.acme",
                "loopguard-state.acme"
            ]
        );
        assert!(specs[5..].iter().all(|s| s.aligned && s.partitions == 6));
        let state = &specs[7];
        assert!(state
            .configs
            .contains(&("cleanup.policy", "compact".to_string())));
    }

    #[test]
    fn plans_five_topics_with_aligned_partitions_and_compacted_state_and_policy_topics() {
        let cfg = crate::config::load(None).unwrap();
        let specs = plan(&cfg, &args(&["--min-insync-replicas", "2"])).unwrap();
        let names: Vec<_> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "agent-events",
                "agent-verdicts",
                "agent-events-dlq",
                "loopguard-state",
                "loopguard-policy"
            ]
        );
        assert_eq!(
            specs.iter().map(|s| s.partitions).collect::<Vec<_>>(),
            [6, 6, 1, 6, 1]
        );
        let cfg_of = |i: usize, key: &str| {
            specs[i]
                .configs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(cfg_of(0, "retention.ms").as_deref(), Some("259200000"));
        assert_eq!(cfg_of(1, "retention.ms").as_deref(), Some("86400000"));
        assert_eq!(cfg_of(2, "retention.ms").as_deref(), Some("1209600000"));
        assert_eq!(cfg_of(3, "cleanup.policy").as_deref(), Some("compact"));
        assert_eq!(cfg_of(3, "retention.ms"), None);
        assert_eq!(cfg_of(3, "min.insync.replicas").as_deref(), Some("2"));
        assert_eq!(cfg_of(2, "min.insync.replicas"), None);
        assert_eq!(cfg_of(4, "cleanup.policy").as_deref(), Some("compact"));
        assert!(!specs[4].aligned);
    }

    #[test]
    fn zero_partitions_is_refused() {
        let cfg = crate::config::load(None).unwrap();
        let mut a = args(&[]);
        a.partitions = 0;
        assert!(matches!(plan(&cfg, &a), Err(TopicsError::NoPartitions)));
    }
}
