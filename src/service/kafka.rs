//! Kafka client settings and topic checks: consumer, transactional producer, state reader,
//! and creating the guard's topics partitioned like the events topic.

use crate::config::{Config, Delivery};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum KafkaSetupError {
    /// librdkafka's error, its own text once (no source: its chain repeats that text).
    #[error("kafka: {0}")]
    Client(rdkafka::error::KafkaError),
    #[error("cannot reach the Kafka broker at {servers} ({setting}): {why}")]
    Unreachable {
        servers: String,
        /// Where the address was given: `kafka.bootstrap_servers`, `--bootstrap-servers`.
        setting: &'static str,
        why: String,
    },
    #[error(transparent)]
    Denied(super::access::Denied),
    #[error("topic `{0}` does not exist: create the guard's topics with `loopguard topics create --partitions N` (same configuration)")]
    MissingTopic(String),
    #[error("topic `{topic}` has {found} partitions; it must match the events topic's {expected}")]
    PartitionMismatch {
        topic: String,
        found: usize,
        expected: usize,
    },
}

impl From<rdkafka::error::KafkaError> for KafkaSetupError {
    fn from(e: rdkafka::error::KafkaError) -> Self {
        KafkaSetupError::Client(e)
    }
}

impl KafkaSetupError {
    /// The broker did not answer: a failed metadata request becomes `Unreachable`, naming
    /// the address and where it was given (an address that accepts connections and never
    /// answers passes `reachable`, and librdkafka's own error names neither).
    pub fn naming(self, servers: &str, setting: &'static str) -> KafkaSetupError {
        use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};
        match self {
            KafkaSetupError::Client(KafkaError::MetadataFetch(
                code @ (C::BrokerTransportFailure
                | C::OperationTimedOut
                | C::AllBrokersDown
                | C::RequestTimedOut),
            )) => KafkaSetupError::Unreachable {
                servers: servers.to_string(),
                setting,
                why: format!("no answer to a metadata request within 10 s ({code})"),
            },
            other => other,
        }
    }

    /// True when the broker could not be reached (exit code 3, unlike an invalid input).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, KafkaSetupError::Unreachable { .. })
    }
}

/// How long `reachable` waits for one address to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Checks that at least one of the bootstrap servers accepts a TCP connection, before any
/// librdkafka client is made: against a closed port those retry until their timeout (10 s)
/// and report a transport failure without the address. Blocking; a few ms when a server
/// answers or refuses, `CONNECT_TIMEOUT` per address that drops the connection attempt.
pub fn reachable(servers: &str, setting: &'static str) -> Result<(), KafkaSetupError> {
    let entries: Vec<&str> = servers
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let mut why = Vec::new();
    for server in &entries {
        match connect(server) {
            Ok(()) => return Ok(()),
            Err(e) if entries.len() == 1 => why.push(e),
            Err(e) => why.push(format!("{server}: {e}")),
        }
    }
    Err(KafkaSetupError::Unreachable {
        servers: servers.to_string(),
        setting,
        why: match why.len() {
            0 => "no address given".into(),
            _ => why.join("; "),
        },
    })
}

/// One bootstrap entry (`host:port`, `[v6]:port`, an optional `PROTOCOL://` prefix; port
/// 9092 when none is given, as librdkafka does).
fn connect(server: &str) -> Result<(), String> {
    use std::net::{TcpStream, ToSocketAddrs};
    let addr = server.split_once("://").map_or(server, |(_, a)| a);
    let has_port = match addr.rsplit_once(':') {
        Some((host, port)) => {
            port.parse::<u16>().is_ok() && (!host.contains(':') || host.ends_with(']'))
        }
        None => false,
    };
    let addr = if has_port {
        addr.to_string()
    } else {
        format!("{addr}:9092")
    };
    let addrs = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve the name: {e}"))?;
    let mut last = String::from("the name resolves to no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

/// The broker and the configuration's `kafka.properties`, for the clients that add their own settings.
pub fn base_config(cfg: &Config) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.kafka.bootstrap_servers);
    for (k, v) in cfg.kafka_properties() {
        c.set(k, v);
    }
    c
}

/// The reader of the policy topic: no group (assigned its one partition, from the start),
/// committed records only.
pub fn policy_reader_config(cfg: &Config) -> ClientConfig {
    let mut c = base_config(cfg);
    c.set("group.id", format!("{}-policy-reader", cfg.kafka.group_id))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "200");
    c
}

/// The group consumer of the events topic.
pub fn consumer_config(cfg: &Config) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.kafka.bootstrap_servers)
        .set("group.id", &cfg.kafka.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000")
        .set("statistics.interval.ms", "5000")
        // A long poll: the broker answers as soon as an event arrives, so the wait costs no
        // latency; at 10 ms an idle guard's two stream threads made the broker spend
        // 0.13-0.39 cores on empty fetches (docs/benchmarks.md, "Judged-through markers").
        .set("fetch.wait.max.ms", "500")
        // librdkafka waits this long before fetching again once a partition's queue is over
        // `queued.min.messages`; its 1 s default starved the guard between batches (it
        // drained the queue in a fraction of that): 12,000 events/s instead of 36,000.
        .set("fetch.queue.backoff.ms", "10")
        .set(
            "queued.max.messages.kbytes",
            cfg.kafka.queue_max_kbytes.to_string(),
        )
        .set(
            "queued.min.messages",
            cfg.kafka.queue_max_messages.to_string(),
        );
    for (k, v) in cfg.kafka_properties() {
        c.set(k, v);
    }
    c
}

/// The producer of verdicts, state and dead letters.
pub fn producer_config(cfg: &Config, instance: &str) -> ClientConfig {
    let mut c = base_config(cfg);
    c.set("enable.idempotence", "true")
        .set("linger.ms", "1")
        .set("compression.type", "lz4")
        .set("queue.buffering.max.messages", "100000")
        // The first AddPartitionsToTxn of a transaction begun right after a commit is
        // refused with CONCURRENT_TRANSACTIONS while the broker writes the previous one's
        // markers; librdkafka retries after this backoff (100 ms by default), which made
        // commits ~80 % of the guard's time (docs/benchmarks.md, "Commit cadence").
        .set("retry.backoff.ms", "10");
    if cfg.kafka.delivery == Delivery::ExactlyOnce {
        c.set(
            "transactional.id",
            format!("{}-{instance}", cfg.kafka.transactional_id_prefix),
        )
        .set("transaction.timeout.ms", "30000");
    }
    for (k, v) in cfg.kafka_properties() {
        c.set(k, v);
    }
    c
}

/// A group-less reader of the state topic (read_committed, reports partition ends).
pub fn state_reader_config(cfg: &Config) -> ClientConfig {
    let mut c = base_config(cfg);
    c.set("group.id", format!("{}-state-reader", cfg.kafka.group_id))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        // A restore waits for each partition's end: the broker's default 500 ms wait
        // for more data was most of a restore's time.
        .set("fetch.wait.max.ms", "10")
        .set("fetch.error.backoff.ms", "10")
        .set("auto.offset.reset", "earliest");
    c
}

/// The state reader's probe for high watermarks: read_uncommitted, so it is told the end
/// of the log, not the last stable offset.
pub fn state_probe_config(cfg: &Config) -> ClientConfig {
    let mut c = state_reader_config(cfg);
    c.set("isolation.level", "read_uncommitted");
    c
}

/// Partitions of `topic`, or None when it does not exist.
pub fn partition_count(
    client: &BaseConsumer,
    topic: &str,
) -> Result<Option<usize>, KafkaSetupError> {
    let md = client.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let refused = md
        .topics()
        .first()
        .and_then(|t| t.error())
        .map(rdkafka::types::RDKafkaErrorCode::from)
        == Some(rdkafka::types::RDKafkaErrorCode::TopicAuthorizationFailed);
    if refused {
        return Err(KafkaSetupError::Denied(super::access::Denied {
            resource: format!("Topic:{topic}"),
            operation: "Describe",
        }));
    }
    Ok(md
        .topics()
        .first()
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.partitions().len()))
}

/// Makes sure the verdict, dead-letter, state and policy topics exist with the events topic's
/// partition count (creating what is missing; the events topic too when `create_events`).
pub async fn ensure_topics(
    cfg: &Config,
    create_events: Option<usize>,
) -> Result<usize, KafkaSetupError> {
    let servers = cfg.kafka.bootstrap_servers.clone();
    tokio::task::spawn_blocking(move || reachable(&servers, "kafka.bootstrap_servers"))
        .await
        .unwrap_or_else(|e| {
            Err(KafkaSetupError::Unreachable {
                servers: cfg.kafka.bootstrap_servers.clone(),
                setting: "kafka.bootstrap_servers",
                why: format!("the check did not finish: {e}"),
            })
        })?;
    let probe: BaseConsumer = base_config(cfg).create()?;
    let admin: AdminClient<DefaultClientContext> = base_config(cfg).create()?;
    let k = &cfg.kafka;
    let named =
        |e: KafkaSetupError| e.naming(&cfg.kafka.bootstrap_servers, "kafka.bootstrap_servers");
    let events = match (
        partition_count(&probe, &k.events_topic).map_err(named)?,
        create_events,
    ) {
        (Some(n), _) => n,
        (None, Some(n)) => {
            create(&admin, &k.events_topic, n, false).await?;
            n
        }
        (None, None) => return Err(KafkaSetupError::MissingTopic(k.events_topic.clone())),
    };
    for (topic, compacted) in [
        (&k.verdicts_topic, false),
        (&k.dlq_topic, false),
        (&k.state_topic, true),
    ] {
        match partition_count(&probe, topic)? {
            Some(n) if n == events || topic == &k.dlq_topic => {}
            Some(n) => {
                return Err(KafkaSetupError::PartitionMismatch {
                    topic: topic.clone(),
                    found: n,
                    expected: events,
                })
            }
            None => create(&admin, topic, events, compacted).await?,
        }
    }
    if partition_count(&probe, &k.policy_topic)?.is_none() {
        create(&admin, &k.policy_topic, 1, true).await?;
    }
    Ok(events)
}

async fn create(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    partitions: usize,
    compacted: bool,
) -> Result<(), KafkaSetupError> {
    let mut t = NewTopic::new(topic, partitions as i32, TopicReplication::Fixed(-1));
    if compacted {
        // A restore reads the partition from its start, and the active segment is never
        // compacted: small segments keep what a restore reads close to the live state.
        t = t
            .set("cleanup.policy", "compact")
            .set("segment.ms", "600000")
            .set("segment.bytes", "67108864")
            .set("min.cleanable.dirty.ratio", "0.2");
    }
    let results = admin
        .create_topics(
            [&t],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await?;
    for r in results {
        if let Err((name, code)) = r {
            if code != rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists {
                tracing::error!(topic = %name, "cannot create topic");
                return Err(KafkaSetupError::Client(
                    rdkafka::error::KafkaError::AdminOp(code),
                ));
            }
        }
    }
    Ok(())
}

/// Publishes one event as a runtime does: JSON value, keyed by its session, waiting for
/// queue space rather than dropping it (used by `demo` and `loadgen`).
pub fn publish_event(
    producer: &rdkafka::producer::BaseProducer,
    topic: &str,
    event: &crate::engine::event::Event,
) -> anyhow::Result<()> {
    use rdkafka::producer::BaseRecord;
    let payload = serde_json::to_vec(&event.to_wire())?;
    let record = BaseRecord::to(topic)
        .key(event.meta.session_id.as_bytes())
        .payload(&payload);
    send_waiting(producer, record);
    Ok(())
}

/// Sends `record`, waiting for room in the producer's queue instead of failing.
pub fn send_waiting<K, P>(
    producer: &rdkafka::producer::BaseProducer,
    mut record: rdkafka::producer::BaseRecord<'_, K, P>,
) where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match producer.send(record) {
            Ok(()) => break,
            Err((_, r)) => {
                producer.poll(Duration::from_millis(5));
                record = r;
            }
        }
    }
    producer.poll(Duration::ZERO);
}

/// Waits until every record `producer` holds is acknowledged (its delivery reports
/// served), for at most `timeout` of wall time. rust-rdkafka's `flush` charges each report
/// it serves a whole poll interval (100 ms): after a stall of the broker, 600 reports due at
/// once used up 60 s of it in half a second and a paced load failed ("Flush error").
pub fn flush_within<C: rdkafka::producer::ProducerContext>(
    producer: &rdkafka::producer::BaseProducer<C>,
    timeout: Duration,
) -> rdkafka::error::KafkaResult<()> {
    use rdkafka::producer::Producer;
    let deadline = std::time::Instant::now() + timeout;
    while producer.in_flight_count() > 0 {
        let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) else {
            break;
        };
        producer.poll(left.min(Duration::from_millis(100)));
    }
    producer.flush(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The deadline is wall time: a record no broker takes is waited for that long.
    #[test]
    fn flush_within_waits_its_whole_timeout_for_a_record_nobody_takes() {
        use rdkafka::producer::{BaseProducer, BaseRecord};
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("log_level", "0")
            .create()
            .unwrap();
        producer
            .send(BaseRecord::to("t").key("k").payload("v"))
            .unwrap();
        let started = std::time::Instant::now();
        assert!(flush_within(&producer, Duration::from_millis(300)).is_err());
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }

    #[test]
    fn a_listening_address_is_reachable_with_or_without_a_protocol() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        for servers in [
            format!("127.0.0.1:{port}"),
            format!("PLAINTEXT://127.0.0.1:{port}"),
            format!(" 127.0.0.1:1 , 127.0.0.1:{port}"),
        ] {
            assert!(
                reachable(&servers, "kafka.bootstrap_servers").is_ok(),
                "{servers}"
            );
        }
        let e = reachable(" , ", "kafka.bootstrap_servers").unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot reach the Kafka broker at  ,  (kafka.bootstrap_servers): no address given"
        );
    }
}
