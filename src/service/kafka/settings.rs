//! librdkafka settings of each client the guard makes: the group consumer, the
//! transactional producer, the state and policy readers.
//!
//! One precedence rule for every client (docs/service.md, "Client settings"): the guard's
//! tuning first, then `kafka.properties`, which win over it; last the settings the guard's
//! guarantees rest on (`config::GUARD_OWNED_PROPERTIES`), which `kafka.properties` may not
//! name at all: the configuration naming one is refused, so nothing is silently ignored.

use crate::config::{Config, Delivery};
use rdkafka::config::ClientConfig;
use rdkafka::types::RDKafkaErrorCode;

/// A client: `tuning` (the guard's defaults, which `kafka.properties` override), then
/// `kafka.properties`, then `owned` (settings `kafka.properties` cannot name).
fn client(cfg: &Config, tuning: &[(&str, String)], owned: &[(&str, String)]) -> ClientConfig {
    let mut c = ClientConfig::new();
    for (k, v) in tuning {
        c.set(*k, v);
    }
    for (k, v) in cfg.kafka_properties() {
        c.set(k, v);
    }
    c.set("bootstrap.servers", &cfg.kafka.bootstrap_servers);
    for (k, v) in owned {
        c.set(*k, v);
    }
    c
}

fn s(v: &str) -> String {
    v.to_string()
}

/// The broker and `kafka.properties` only: admin clients and metadata probes.
pub fn base_config(cfg: &Config) -> ClientConfig {
    client(cfg, &[], &[])
}

/// The reader of the policy topic: no group (assigned its one partition, from the start),
/// committed records only.
pub fn policy_reader_config(cfg: &Config) -> ClientConfig {
    client(
        cfg,
        &[("fetch.wait.max.ms", s("200"))],
        &[
            ("group.id", format!("{}-policy-reader", cfg.kafka.group_id)),
            ("enable.auto.commit", s("false")),
            ("enable.auto.offset.store", s("false")),
            ("isolation.level", s("read_committed")),
        ],
    )
}

/// The group consumer of the events topic.
pub fn consumer_config(cfg: &Config) -> ClientConfig {
    client(
        cfg,
        &[
            ("session.timeout.ms", s("45000")),
            ("heartbeat.interval.ms", s("1000")),
            ("statistics.interval.ms", s("5000")),
            // A long poll: the broker answers as soon as an event arrives, so the wait
            // costs no latency; at 10 ms an idle guard's two stream threads made the broker
            // spend 0.13-0.39 cores on empty fetches (docs/benchmarks.md, "Judged-through
            // markers").
            ("fetch.wait.max.ms", s("500")),
            // librdkafka waits this long before fetching again once a partition's queue is
            // over `queued.min.messages`; its 1 s default starved the guard between batches
            // (it drained the queue in a fraction of that): 12,000 events/s, not 36,000.
            ("fetch.queue.backoff.ms", s("10")),
            (
                "queued.max.messages.kbytes",
                cfg.kafka.queue_max_kbytes.to_string(),
            ),
            (
                "queued.min.messages",
                cfg.kafka.queue_max_messages.to_string(),
            ),
        ],
        &[
            ("group.id", cfg.kafka.group_id.clone()),
            ("auto.offset.reset", s("earliest")),
            ("enable.auto.commit", s("false")),
            ("enable.auto.offset.store", s("false")),
            ("isolation.level", s("read_committed")),
            // The rebalance callbacks commit and restore partition by partition.
            ("partition.assignment.strategy", s("cooperative-sticky")),
        ],
    )
}

/// The producer of verdicts, state and dead letters.
pub fn producer_config(cfg: &Config, instance: &str) -> ClientConfig {
    let mut owned = vec![("enable.idempotence", s("true"))];
    let mut tuning = vec![
        ("linger.ms", s("1")),
        ("compression.type", s("lz4")),
        ("queue.buffering.max.messages", s("100000")),
        // The first AddPartitionsToTxn of a transaction begun right after a commit is
        // refused with CONCURRENT_TRANSACTIONS while the broker writes the previous one's
        // markers; librdkafka retries after this backoff (100 ms by default), which made
        // commits ~80 % of the guard's time (docs/benchmarks.md, "Commit cadence").
        ("retry.backoff.ms", s("10")),
    ];
    if cfg.kafka.delivery == Delivery::ExactlyOnce {
        owned.push((
            "transactional.id",
            format!("{}-{instance}", cfg.kafka.transactional_id_prefix),
        ));
        tuning.push(("transaction.timeout.ms", s("30000")));
    }
    client(cfg, &tuning, &owned)
}

/// A group-less reader of the state topic (read_committed, reports partition ends).
pub fn state_reader_config(cfg: &Config) -> ClientConfig {
    state_reader(cfg, "read_committed")
}

/// The state reader's probe for high watermarks: read_uncommitted, so it is told the end
/// of the log, not the last stable offset.
pub fn state_probe_config(cfg: &Config) -> ClientConfig {
    state_reader(cfg, "read_uncommitted")
}

fn state_reader(cfg: &Config, isolation: &str) -> ClientConfig {
    client(
        cfg,
        &[
            // A restore waits for each partition's end: the broker's default 500 ms wait
            // for more data was most of a restore's time.
            ("fetch.wait.max.ms", s("10")),
            ("fetch.error.backoff.ms", s("10")),
        ],
        &[
            ("group.id", format!("{}-state-reader", cfg.kafka.group_id)),
            ("enable.auto.commit", s("false")),
            ("isolation.level", s(isolation)),
            ("enable.partition.eof", s("true")),
            ("auto.offset.reset", s("earliest")),
        ],
    )
}

/// The broker refused this client's login: its credentials, its SASL mechanism, or TLS.
/// Each names what to check (the user, never the password; the certificate's reason);
/// exit code 4, unlike a broker that cannot be reached (3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("Kafka refused the credentials: SASL/{mechanism} authentication failed for user `{user}` at {broker} (check sasl.username / sasl.password): {reason}")]
    Credentials {
        mechanism: String,
        user: String,
        broker: String,
        reason: String,
    },
    #[error("Kafka refused the SASL mechanism {mechanism} at {broker} (set sasl.mechanism to one it accepts): {reason}")]
    Mechanism {
        mechanism: String,
        broker: String,
        reason: String,
    },
    #[error("TLS: the broker's certificate is not trusted ({reason}) — set ssl.ca.location to the CA that signed it (broker {broker})")]
    Untrusted { broker: String, reason: String },
    #[error("TLS: the handshake with the broker at {broker} failed ({reason}) — check security.protocol and the ssl.* settings")]
    Tls { broker: String, reason: String },
}

impl Refused {
    /// A refusal that cannot be a broker restarting: reported at once. A disconnect during
    /// the TLS handshake may be one, so it is reported only when nothing else answered.
    pub fn definite(&self) -> bool {
        !matches!(self, Refused::Tls { reason, .. } if reason.contains("PLAINTEXT broker listener"))
    }
}

/// Who logs in (for the messages): the SASL mechanism and user, and the password (only to
/// mask it in whatever librdkafka says).
#[derive(Debug, Clone, Default)]
pub struct Login {
    mechanism: String,
    user: String,
    password: String,
}

impl Login {
    pub fn of(client: &ClientConfig) -> Login {
        let get = |k: &str| client.get(k).map(str::to_string);
        Login {
            mechanism: get("sasl.mechanism")
                .or_else(|| get("sasl.mechanisms"))
                .unwrap_or_else(|| "GSSAPI".into()),
            user: get("sasl.username").unwrap_or_else(|| "(sasl.username not set)".into()),
            password: get("sasl.password").unwrap_or_default(),
        }
    }

    /// librdkafka's error (its code and reason) read as a refused login, when it is one.
    pub fn classify(&self, code: Option<RDKafkaErrorCode>, reason: &str) -> Option<Refused> {
        use RDKafkaErrorCode as C;
        let mut reason = reason.trim().to_string();
        if self.password.chars().count() >= 3 {
            reason = reason.replace(&self.password, crate::config::secrets::MASK);
        }
        // `[thrd:sasl_ssl://127.0.0.1:9093/bootstrap]: ` (a log line's thread), then
        // `sasl_ssl://127.0.0.1:9093/bootstrap: ...`: the broker, then what happened.
        if reason.starts_with("[thrd:") {
            if let Some((_, rest)) = reason.split_once("]: ") {
                reason = rest.to_string();
            }
        }
        let (broker, what) = match reason.split_once(": ") {
            Some((b, rest)) if b.contains("://") => (b.to_string(), rest.to_string()),
            _ => ("the broker".to_string(), reason.clone()),
        };
        // `(after 5ms in state AUTH_REQ, 1 identical error(s) suppressed)`: timing noise.
        let what = match what.rfind(" (after ") {
            Some(i) if what.ends_with(')') => what[..i].to_string(),
            _ => what,
        };
        let after = |marker: &str| what.find(marker).map(|i| what[i..].to_string());
        if let Some(mut r) = after("certificate verify failed") {
            // librdkafka's own hint: the message gives it, in the guard's words.
            if let Some(i) = r.find(", verify that ssl.ca.location") {
                r.truncate(i);
            }
            return Some(Refused::Untrusted { broker, reason: r });
        }
        if what.contains("mechanism handshake failed")
            || what.contains("Unsupported SASL mechanism")
            || code == Some(C::UnsupportedSASLMechanism)
        {
            return Some(Refused::Mechanism {
                mechanism: self.mechanism.clone(),
                broker,
                reason: what,
            });
        }
        if what.contains("SSL handshake failed") || code == Some(C::SSL) {
            return Some(Refused::Tls {
                broker,
                reason: what,
            });
        }
        if what.contains("SASL authentication error")
            || matches!(code, Some(C::Authentication | C::SaslAuthenticationFailed))
        {
            let reason = what
                .strip_prefix("SASL authentication error: ")
                .unwrap_or(&what)
                .to_string();
            return Some(Refused::Credentials {
                mechanism: self.mechanism.clone(),
                user: self.user.clone(),
                broker,
                reason,
            });
        }
        None
    }
}

/// A client context that keeps the last refused login librdkafka reported (its error
/// callback and its log lines), so a probe that only sees a timeout can say why.
pub struct LoginWatch {
    login: Login,
    refused: std::sync::Mutex<Option<Refused>>,
}

impl LoginWatch {
    pub fn new(client: &ClientConfig) -> LoginWatch {
        LoginWatch {
            login: Login::of(client),
            refused: std::sync::Mutex::new(None),
        }
    }

    /// The last refusal reported, if any.
    pub fn refused(&self) -> Option<Refused> {
        self.refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn note(&self, code: Option<RDKafkaErrorCode>, reason: &str) -> bool {
        match self.login.classify(code, reason) {
            Some(r) => {
                *self.refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                true
            }
            None => false,
        }
    }
}

impl rdkafka::ClientContext for LoginWatch {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        if !self.note(error.rdkafka_error_code(), reason) {
            tracing::debug!("librdkafka: {error}: {reason}");
        }
    }

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        use rdkafka::config::RDKafkaLogLevel as L;
        let serious = matches!(level, L::Emerg | L::Alert | L::Critical | L::Error);
        if !(serious && self.note(None, message)) {
            tracing::debug!("librdkafka {fac}: {message}");
        }
    }
}

impl rdkafka::consumer::ConsumerContext for LoginWatch {}

/// A name for this instance: stable across restarts of the same pod or host, so a
/// restarted instance fences its predecessor's transaction at once.
pub fn instance_id() -> String {
    std::env::var("LOOPGUARD_INSTANCE_ID")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("pid-{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GUARD_OWNED_PROPERTIES;

    fn cfg(properties: &str) -> Config {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loopguard.toml");
        std::fs::write(
            &path,
            format!(
                "[kafka]\nbootstrap_servers = \"127.0.0.1:9\"\n[kafka.properties]\n{properties}"
            ),
        )
        .unwrap();
        crate::config::load(Some(path.to_str().unwrap())).unwrap()
    }

    fn all(cfg: &Config) -> Vec<(&'static str, ClientConfig)> {
        vec![
            ("base", base_config(cfg)),
            ("policy reader", policy_reader_config(cfg)),
            ("consumer", consumer_config(cfg)),
            ("producer", producer_config(cfg, "i")),
            ("state reader", state_reader_config(cfg)),
            ("state probe", state_probe_config(cfg)),
        ]
    }

    /// librdkafka's words for a refused login, as its sources format them, each read as
    /// its own refusal naming what to check; the password never repeated.
    #[test]
    fn refused_logins_are_told_apart() {
        let mut c = ClientConfig::new();
        c.set("sasl.mechanism", "SCRAM-SHA-512")
            .set("sasl.username", "beta-runtime")
            .set("sasl.password", "hunter2");
        let login = Login::of(&c);
        let b = "sasl_ssl://127.0.0.1:9093/bootstrap";
        let r = login
            .classify(
                Some(RDKafkaErrorCode::Authentication),
                &format!("{b}: SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 12ms in state AUTH_REQ)"),
            )
            .unwrap();
        assert_eq!(
            r.to_string(),
            format!("Kafka refused the credentials: SASL/SCRAM-SHA-512 authentication failed for user `beta-runtime` at {b} (check sasl.username / sasl.password): Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512")
        );
        let r = login
            .classify(
                Some(RDKafkaErrorCode::Authentication),
                &format!("{b}: SASL SCRAM-SHA-512 mechanism handshake failed: Broker: Unsupported SASL mechanism: broker's supported mechanisms: PLAIN (after 3ms in state AUTH_HANDSHAKE)"),
            )
            .unwrap();
        assert!(matches!(r, Refused::Mechanism { .. }), "{r}");
        assert!(r.to_string().contains("supported mechanisms: PLAIN"), "{r}");
        let r = login
            .classify(
                Some(RDKafkaErrorCode::SSL),
                &format!("{b}: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified, verify that ssl.ca.location is correctly configured or root CA certificates are installed (install ca-certificates package) (after 4ms in state SSL_HANDSHAKE)"),
            )
            .unwrap();
        assert_eq!(
            r.to_string(),
            format!("TLS: the broker's certificate is not trusted (certificate verify failed: broker certificate could not be verified) — set ssl.ca.location to the CA that signed it (broker {b})")
        );
        let logged = format!("[thrd:{b}]: {b}: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed (after 4ms in state SSL_HANDSHAKE)");
        assert!(
            login
                .classify(None, &logged)
                .unwrap()
                .to_string()
                .ends_with(&format!("(broker {b})")),
            "{logged}"
        );
        let r = login
            .classify(None, &format!("{b}: SSL handshake failed: Disconnected: connecting to a PLAINTEXT broker listener? (after 1ms in state SSL_HANDSHAKE)"))
            .unwrap();
        assert!(!r.definite(), "{r}");
        let r = login
            .classify(
                Some(RDKafkaErrorCode::Authentication),
                &format!("{b}: SASL authentication error: hunter2 was wrong"),
            )
            .unwrap();
        assert!(!r.to_string().contains("hunter2"), "{r}");
        assert!(login
            .classify(
                Some(RDKafkaErrorCode::BrokerTransportFailure),
                &format!("{b}: Connect to ipv4#127.0.0.1:9093 failed: Connection refused")
            )
            .is_none());
    }

    /// `kafka.properties` win over every client's tuning, the same way for all of them.
    #[test]
    fn properties_win_over_the_tuning_of_every_client() {
        let tuned = [
            "fetch.wait.max.ms",
            "linger.ms",
            "retry.backoff.ms",
            "session.timeout.ms",
            "transaction.timeout.ms",
            "fetch.error.backoff.ms",
        ];
        let props: String = tuned
            .iter()
            .map(|k| format!("\"{k}\" = \"4242\"\n"))
            .collect();
        let c = cfg(&props);
        for (name, client) in all(&c) {
            for k in tuned {
                assert_eq!(client.get(k), Some("4242"), "{name}: {k}");
            }
        }
    }

    /// What the guarantees rest on is the guard's on every client, and the configuration
    /// naming one of them in `kafka.properties` is refused with the key named.
    #[test]
    fn the_guard_owned_settings_cannot_be_overridden() {
        let c = cfg("");
        let consumer = consumer_config(&c);
        assert_eq!(consumer.get("isolation.level"), Some("read_committed"));
        assert_eq!(consumer.get("enable.auto.commit"), Some("false"));
        assert_eq!(
            producer_config(&c, "i").get("enable.idempotence"),
            Some("true")
        );
        assert_eq!(
            state_probe_config(&c).get("isolation.level"),
            Some("read_uncommitted")
        );
        for (key, _) in GUARD_OWNED_PROPERTIES {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("loopguard.toml");
            std::fs::write(&path, format!("[kafka.properties]\n\"{key}\" = \"x\"\n")).unwrap();
            let err = crate::config::load(Some(path.to_str().unwrap())).unwrap_err();
            assert!(err.to_string().contains(key), "{key}: {err}");
        }
        // Every other key a client sets is tuning: a property of that name wins.
        for (name, client) in all(&c) {
            for k in client.config_map().keys() {
                if GUARD_OWNED_PROPERTIES.iter().any(|(o, _)| o == k) {
                    continue;
                }
                let tuned = cfg(&format!("\"{k}\" = \"7\"\n"));
                let (_, got) = all(&tuned).into_iter().find(|(n, _)| *n == name).unwrap();
                assert_eq!(got.get(k), Some("7"), "{name}: {k}");
            }
        }
    }
}
