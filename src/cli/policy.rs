//! `loopguard policy check | publish | show`: a policy file validated (every problem, each
//! naming its key), published to the policy topic (refused when invalid), and the version
//! each running instance applies, read from their admin endpoints. `diff` is in
//! `policy_diff.rs`.

use crate::config::Config;
use crate::engine::policy::PolicySet;
use crate::service::kafka::publish::{deliver_one, Undelivered};
use crate::service::policy_feed::{Published, POLICY_RECORD_KEY};
use crate::service::records::policy_change::{is_policy_key, PolicyChange};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum PolicyCliError {
    #[error("cannot read {path}: {why}")]
    Read { path: String, why: String },
    #[error("{path}: invalid policy:\n  - {}", .problems.join("\n  - "))]
    Invalid { path: String, problems: Vec<String> },
    #[error("kafka: {0}")]
    Kafka(String),
    /// The broker named with where its address was given; unreachable is exit code 3.
    #[error(transparent)]
    Setup(#[from] crate::service::kafka::topics::KafkaSetupError),
    #[error("admin endpoint {addr}: {why}")]
    Admin { addr: SocketAddr, why: String },
    /// An event the guard would dead-letter (`loopguard feedback`'s).
    #[error("invalid event: {0}")]
    InvalidEvent(String),
}

impl PolicyCliError {
    /// The exit code: 2 for a file that is not valid, 3 for a broker that cannot be reached,
    /// 4 for a broker that refuses the login (credentials, TLS), 1 for any other failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            PolicyCliError::Read { .. }
            | PolicyCliError::Invalid { .. }
            | PolicyCliError::InvalidEvent(_) => 2,
            PolicyCliError::Setup(e) => e.exit_code(),
            _ => 1,
        }
    }
}

/// The broker at `kafka.bootstrap_servers` takes connections and this configuration's
/// login (SASL, TLS), or the error naming why not.
pub fn reachable(cfg: &Config) -> Result<(), PolicyCliError> {
    use crate::service::kafka::topics;
    topics::reachable(&cfg.kafka.bootstrap_servers, SETTING)?;
    let client = crate::service::kafka::settings::base_config(cfg);
    Ok(topics::login(
        &client,
        &cfg.kafka.bootstrap_servers,
        SETTING,
    )?)
}

const SETTING: &str = "kafka.bootstrap_servers";

/// A policy file: the policy table (the shape of a configuration's `[policy]`), as TOML, or
/// as JSON when its name ends in `.json`. A configuration file gives its `[policy]` (none:
/// the defaults): `config::is_configuration` says which a file is.
pub fn read_file(path: &str) -> Result<Value, PolicyCliError> {
    let read = |why: String| PolicyCliError::Read {
        path: path.to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| read(e.to_string()))?;
    let value: Value = if path.ends_with(".json") {
        serde_json::from_str(&text).map_err(|e| read(e.to_string()))?
    } else {
        // Where, and the parser's words: never the line itself (a configuration's holds
        // secrets).
        let table: toml::Table = toml::from_str(&text)
            .map_err(|e| read(crate::config::secrets::describe_toml_error(&text, &e)))?;
        serde_json::to_value(table).map_err(|e| read(e.to_string()))?
    };
    Ok(match value {
        Value::Object(mut o) if crate::config::is_configuration(o.keys()) => {
            o.remove("policy").unwrap_or(Value::Null)
        }
        v => v,
    })
}

/// Reads and compiles a policy file: the raw table and the set, or every problem.
pub fn check(path: &str) -> Result<(Value, PolicySet), PolicyCliError> {
    let raw = read_file(path)?;
    let set = PolicySet::compile(&raw).map_err(|problems| PolicyCliError::Invalid {
        path: path.to_string(),
        problems,
    })?;
    Ok((raw, set))
}

/// Publishes a valid policy file to the policy topic; returns its version and offset.
pub fn publish(cfg: &Config, path: &str) -> Result<(String, i64), PolicyCliError> {
    let (raw, set) = check(path)?;
    if cfg.kafka.bootstrap_servers.is_empty() {
        return Err(PolicyCliError::Kafka(
            "no broker configured (kafka.bootstrap_servers)".into(),
        ));
    }
    reachable(cfg)?;
    let record = Published {
        version: Some(set.version().to_string()),
        policy: raw,
    };
    let payload = serde_json::to_vec(&record).unwrap_or_default();
    let (_, offset) = deliver_one(
        cfg,
        &cfg.kafka.policy_topic,
        POLICY_RECORD_KEY,
        &payload,
        Some(0),
    )
    .map_err(|e| match e {
        Undelivered::Kafka(e) => PolicyCliError::Kafka(e),
        Undelivered::Unanswered(why) => unanswered(cfg, "policy record", &why),
    })?;
    Ok((set.version().to_string(), offset))
}

/// The broker took the connection and never acknowledged `what`.
pub fn unanswered(cfg: &Config, what: &str, why: &str) -> PolicyCliError {
    PolicyCliError::Setup(
        crate::service::kafka::topics::KafkaSetupError::Unreachable {
            servers: cfg.kafka.bootstrap_servers.clone(),
            setting: SETTING,
            why: format!("the {what} was not acknowledged ({why})"),
        },
    )
}

/// The policy switches the guards recorded in the state topic (`policy_record`), of one
/// partition or all, in offset order: what `loopguard replay --policy-changes` reads.
pub fn history(
    cfg: &Config,
    only: Option<i32>,
) -> Result<Vec<(i32, PolicyChange)>, PolicyCliError> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    use rdkafka::{Offset, TopicPartitionList};
    let kafka = |e: rdkafka::error::KafkaError| PolicyCliError::Kafka(e.to_string());
    reachable(cfg)?;
    let consumer: BaseConsumer = crate::service::kafka::settings::state_reader_config(cfg)
        .create()
        .map_err(kafka)?;
    let topic = &cfg.kafka.state_topic;
    let partitions = crate::service::kafka::topics::partition_count(&consumer, topic)
        .map_err(|e| PolicyCliError::Setup(e.naming(&cfg.kafka.bootstrap_servers, SETTING)))?
        .ok_or_else(|| PolicyCliError::Kafka(format!("no topic {topic}")))?;
    let mut tpl = TopicPartitionList::new();
    let mut ends = std::collections::BTreeMap::new();
    for p in (0..partitions as i32).filter(|p| only.is_none_or(|o| o == *p)) {
        let (_, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .map_err(kafka)?;
        if high > 0 {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .map_err(kafka)?;
            ends.insert(p, high);
        }
    }
    consumer.assign(&tpl).map_err(kafka)?;
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let position = |p: i32| -> i64 {
        consumer
            .position()
            .ok()
            .and_then(|l| l.find_partition(topic, p).map(|e| e.offset()))
            .and_then(|o| {
                if let Offset::Offset(o) = o {
                    Some(o)
                } else {
                    None
                }
            })
            .unwrap_or(0)
    };
    while ends.iter().any(|(p, end)| position(*p) < *end) {
        if std::time::Instant::now() > deadline {
            return Err(PolicyCliError::Kafka(format!(
                "{topic} not read to its end in 120 s"
            )));
        }
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            if m.key().is_some_and(is_policy_key) {
                if let Some(change) = m.payload().and_then(|p| serde_json::from_slice(p).ok()) {
                    out.push((m.partition(), change));
                }
            }
        }
    }
    out.sort_by_key(|(p, c): &(i32, PolicyChange)| (*p, c.from_offset, c.seq));
    Ok(out)
}

/// `GET /v1/policy` of one instance's admin endpoint.
pub fn fetch_status(addr: SocketAddr) -> Result<Value, PolicyCliError> {
    let admin = |why: String| PolicyCliError::Admin { addr, why };
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| admin(e.to_string()))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| admin(e.to_string()))?;
    write!(
        stream,
        "GET /v1/policy HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| admin(e.to_string()))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| admin(e.to_string()))?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| admin("no HTTP response".into()))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(admin(head.lines().next().unwrap_or("").to_string()));
    }
    serde_json::from_str(body).map_err(|e| admin(format!("not the policy view: {e}")))
}

/// One instance's status as lines: the version each thread applies, per partition where
/// it took effect, the last refused publication.
pub fn render_status(addr: SocketAddr, status: &Value) -> String {
    let mut s = format!(
        "{addr} instance {}\n",
        status["instance"].as_str().unwrap_or("?")
    );
    if let Some(threads) = status["threads"].as_object() {
        for (name, t) in threads {
            s.push_str(&format!(
                "  thread {name:<12} {} (seq {})\n",
                t["version"].as_str().unwrap_or("?"),
                t["seq"]
            ));
        }
    }
    if let Some(parts) = status["partitions"].as_object() {
        for (p, v) in parts {
            s.push_str(&format!(
                "  partition {p:<4} {} from offset {} (seq {})\n",
                v["version"].as_str().unwrap_or("?"),
                v["from_offset"],
                v["seq"]
            ));
        }
    }
    if let Some(r) = status["last_refused"].as_object() {
        s.push_str(&format!(
            "  refused at policy offset {}: {}\n",
            r["offset"],
            r["problems"]
                .as_array()
                .map(|p| p
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("; "))
                .unwrap_or_default()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        (dir, path.to_str().unwrap().to_string())
    }

    #[test]
    fn a_toml_or_json_policy_file_or_a_whole_config_checks() {
        let (_d, toml) = file(
            "p.toml",
            "[[rules]]\nrule = \"tool.cycle\"\nmode = \"observe\"\n[[overrides]]\ntenant = \"acme\"\n[overrides.set]\nmode = \"observe\"\n",
        );
        let (_e, json) = file(
            "p.json",
            r#"{"rules": [{"rule": "tool.cycle", "mode": "observe"}], "overrides": [{"tenant": "acme", "set": {"mode": "observe"}}]}"#,
        );
        let (_f, config) = file(
            "c.toml",
            "[kafka]\ngroup_id = \"x\"\n[[policy.rules]]\nrule = \"tool.cycle\"\nmode = \"observe\"\n[[policy.overrides]]\ntenant = \"acme\"\n[policy.overrides.set]\nmode = \"observe\"\n",
        );
        let v = |p: &str| check(p).unwrap().1.version().to_string();
        assert_eq!(v(&toml), v(&json));
        assert_eq!(v(&toml), v(&config));
        assert_ne!(v(&toml), PolicySet::default().version());
    }

    #[test]
    fn an_invalid_file_names_the_key() {
        let (_d, path) = file(
            "p.toml",
            "[tool]\nwindow = \"six\"\n[[rules]]\nrule = \"tool.cycle\"\nmode = \"watch\"\n",
        );
        let err = check(&path).unwrap_err().to_string();
        assert!(
            err.contains("policy.rules[0].mode: unknown variant `watch`"),
            "{err}"
        );
        let (_g, path) = file("p.toml", "[tool]\nwindow = \"six\"\n");
        let err = check(&path).unwrap_err().to_string();
        assert!(err.contains("policy.tool.window: invalid type"), "{err}");
        let (_e, path) = file("p.toml", "[budget]\nmax_tool_rounds = 0\n");
        let err = check(&path).unwrap_err().to_string();
        assert!(err.contains("budget.max_tool_rounds must be >= 1"), "{err}");
        let err = check("/nonexistent/p.toml").unwrap_err().to_string();
        assert!(err.starts_with("cannot read /nonexistent/p.toml"), "{err}");
    }

    #[test]
    fn the_status_lines_name_threads_partitions_and_refusals() {
        let status = serde_json::json!({
            "instance": "guard-a",
            "threads": {"stream-0": {"seq": 4, "version": "sha256:aaaaaaaaaaaa"}},
            "partitions": {"3": {"seq": 4, "version": "sha256:aaaaaaaaaaaa", "from_offset": 120}},
            "last_refused": {"offset": 5, "problems": ["policy.tool.window: invalid type"]}
        });
        let text = render_status("127.0.0.1:9464".parse().unwrap(), &status);
        assert!(
            text.contains("thread stream-0     sha256:aaaaaaaaaaaa (seq 4)"),
            "{text}"
        );
        assert!(
            text.contains("partition 3    sha256:aaaaaaaaaaaa from offset 120"),
            "{text}"
        );
        assert!(
            text.contains("refused at policy offset 5: policy.tool.window"),
            "{text}"
        );
    }
}
