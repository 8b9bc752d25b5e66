//! The guard's topics on the broker: is it reachable, do the topics exist with the events
//! topic's partition count (creating what is missing), and the errors that say why not.

use super::access::Denied;
use super::settings::base_config;
use crate::config::Config;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::time::{Duration, Instant};
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
    Denied(Denied),
    /// The broker refused the login: credentials, SASL mechanism or TLS (exit code 4).
    #[error(transparent)]
    Refused(super::settings::Refused),
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

    /// True when the broker refused the login: credentials, SASL mechanism or TLS (exit
    /// code 4: the credentials or certificates to check, not the network).
    pub fn is_refused(&self) -> bool {
        matches!(self, KafkaSetupError::Refused(_))
    }

    /// The exit code this error ends a command with: 3 unreachable, 4 refused, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            KafkaSetupError::Unreachable { .. } => 3,
            KafkaSetupError::Refused(_) => 4,
            _ => 1,
        }
    }
}

/// How long `login` waits for the broker to answer a metadata request.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Logs in to the broker with `client`'s settings (SASL, TLS) and asks for metadata, once,
/// before any other client is made: a refused login (wrong password, a SASL mechanism the
/// broker does not take, a certificate not trusted) is `Refused`, named from what
/// librdkafka reported (which its requests only show as timeouts); a broker that does not
/// answer within 10 s is `Unreachable` (`naming`). Blocking; one round trip when it works.
pub fn login(
    client: &ClientConfig,
    servers: &str,
    setting: &'static str,
) -> Result<(), KafkaSetupError> {
    use super::settings::LoginWatch;
    let probe: BaseConsumer<LoginWatch> = client.create_with_context(LoginWatch::new(client))?;
    let deadline = Instant::now() + LOGIN_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let err = match probe.fetch_metadata(None, left.min(Duration::from_secs(1))) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        // Serve the error events: each goes through `LoginWatch::error`.
        for _ in 0..100 {
            if probe.poll(Duration::ZERO).is_none() {
                break;
            }
        }
        let refused = probe.context().refused().or_else(|| {
            let code = err.rdkafka_error_code();
            super::settings::Login::of(client).classify(code, &err.to_string())
        });
        match refused {
            Some(r) if r.definite() || Instant::now() >= deadline => {
                return Err(KafkaSetupError::Refused(r))
            }
            _ if Instant::now() >= deadline => {
                return Err(KafkaSetupError::Client(err).naming(servers, setting))
            }
            _ => {}
        }
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
        return Err(KafkaSetupError::Denied(Denied {
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
    let (client, servers) = (base_config(cfg), cfg.kafka.bootstrap_servers.clone());
    tokio::task::spawn_blocking(move || login(&client, &servers, "kafka.bootstrap_servers"))
        .await
        .map_err(|e| KafkaSetupError::Unreachable {
            servers: cfg.kafka.bootstrap_servers.clone(),
            setting: "kafka.bootstrap_servers",
            why: format!("the check did not finish: {e}"),
        })??;
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

#[cfg(test)]
mod tests {
    use super::*;

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
