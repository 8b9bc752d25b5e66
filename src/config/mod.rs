//! Service configuration: embedded defaults, then a file, then `LOOPGUARD__SECTION__KEY`
//! environment variables; unknown keys are errors and every problem is reported at once.

use crate::engine::policy::{every_problem, PolicySet};
use crate::engine::Limits;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use thiserror::Error;

mod env;
mod kafka_limits;
pub mod secrets;

use env::{apply_env, env_path};
pub use kafka_limits::{
    dlq_limit, GUARD_OWNED_PROPERTIES, MIN_DLQ_LIMIT, PRODUCER_DEFAULT_MAX_BYTES,
};
pub use secrets::{insecure_settings, is_secret_key, SecretSource};

const DEFAULTS: &str = include_str!("default.toml");

/// More stream threads than this is a typo, not a plan: each is a consumer and a producer.
const MAX_THREADS: usize = 256;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read configuration: {0}")]
    Load(String),
    #[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    ExactlyOnce,
    AtLeastOnce,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    pub bootstrap_servers: String,
    pub group_id: String,
    pub events_topic: String,
    pub verdicts_topic: String,
    /// Tenant isolation (off when empty): the verdicts and markers of an event with tenant
    /// `T` go to this topic with `{tenant}` replaced by `T` (`agent-verdicts.{tenant}`),
    /// so each tenant's runtimes are granted Read on their own topic only; events without
    /// tenant keep `verdicts_topic` (docs/operations.md, "Tenant isolation").
    pub verdicts_topic_template: String,
    /// Tenants from the writer (off when empty): every topic this template names with a
    /// tenant `T` (`agent-events.{tenant}`) is `T`'s own events topic; the guard takes the
    /// tenant from the topic, never from the event (docs/operations.md, "Tenants").
    pub events_topic_template: String,
    /// Stream threads per tenant events topic.
    pub tenant_threads: NonZeroUsize,
    /// How often the broker is asked for new tenant events topics (ms).
    pub tenant_discovery_ms: u64,
    pub dlq_topic: String,
    pub state_topic: String,
    /// The live policy (one partition, compacted): `loopguard policy publish` writes it,
    /// every instance reads it and applies each valid version without a restart.
    pub policy_topic: String,
    pub delivery: Delivery,
    pub transactional_id_prefix: String,
    pub batch_max_events: NonZeroUsize,
    pub batch_max_ms: u64,
    pub checkpoint_max_ms: u64,
    pub checkpoint_max_events: NonZeroUsize,
    pub queue_max_messages: NonZeroUsize,
    pub queue_max_kbytes: NonZeroUsize,
    pub embedded_partitions: NonZeroUsize,
    /// Where the embedded broker listens (its front door; `service::kafka::embedded`).
    pub embedded_listen: SocketAddr,
    /// Stream threads, each its own consumer in the group and its own transactional
    /// producer; 0: the cores available to the process (`Config::stream_threads`).
    pub threads: usize,
    /// Largest dead letter written (the dead-letter topic's `max.message.bytes`); never
    /// more than the producer's `message.max.bytes`.
    pub dlq_max_bytes: usize,
    /// Times the guard rewinds to one record and retries it before giving it up
    /// (dead-lettered minimally and passed).
    pub max_record_retries: NonZeroU32,
    /// Judged-through markers (docs/contract.md): written once the consumer has no event
    /// ready, and at the latest this many ms after the first event they cover.
    pub judged_max_ms: u64,
    /// Under a backlog, markers and commits may be spaced up to this share (percent) of
    /// how long the events waited in the topic (`service::stream::worker::pace`); 0: never.
    pub backlog_pace_percent: u64,
    #[serde(default)]
    pub properties: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    pub debug_token: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    pub tenant_label: bool,
    pub model_label: bool,
    pub tenant_allow_list: Vec<String>,
    pub model_allow_list: Vec<String>,
    /// An agent label on the loop-cost families only (spent in loops, by agent).
    #[serde(default)]
    pub agent_label: bool,
    #[serde(default)]
    pub agent_allow_list: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    pub session_ttl_secs: u64,
    pub max_sessions_per_partition: NonZeroUsize,
    pub max_text_bytes: NonZeroUsize,
    pub dedup_ids: NonZeroUsize,
    pub hot_text_sessions: NonZeroUsize,
    pub freeze_idle_secs: u64,
}

impl EngineConfig {
    pub fn limits(&self) -> Limits {
        Limits {
            session_ttl_ms: (self.session_ttl_secs as i64).saturating_mul(1000),
            max_sessions: self.max_sessions_per_partition.get(),
            max_text_bytes: self.max_text_bytes.get(),
            dedup_ids: self.dedup_ids.get(),
            hot_text_sessions: self.hot_text_sessions.get(),
            freeze_idle_ms: i64::try_from(self.freeze_idle_secs)
                .unwrap_or(i64::MAX)
                .saturating_mul(1000),
        }
    }
}

/// The whole configuration, validated.
#[derive(Debug, Clone)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub admin: AdminConfig,
    pub metrics: MetricsConfig,
    pub engine: EngineConfig,
    pub policy: PolicySet,
    /// The policy table as given (for `loopguard rules`).
    pub policy_raw: Value,
}

/// What `kafka.verdicts_topic_template` replaces with an event's tenant.
pub const TENANT: &str = "{tenant}";

/// Longest Kafka topic name.
const MAX_TOPIC: usize = 249;

impl KafkaConfig {
    /// The topic that takes the verdicts and markers of events of `tenant`: its own with a
    /// template, else `verdicts_topic`. `None` when the tenant cannot be part of a topic
    /// name (Kafka allows ASCII letters, digits, `.`, `_` and `-`, 249 at most).
    pub fn verdicts_topic_for(&self, tenant: Option<&str>) -> Option<String> {
        match tenant {
            Some(t) if !self.verdicts_topic_template.is_empty() => {
                let ok = tenant_name_ok(t);
                let topic = self.verdicts_topic_template.replace(TENANT, t);
                (ok && topic.len() <= MAX_TOPIC).then_some(topic)
            }
            _ => Some(self.verdicts_topic.clone()),
        }
    }

    /// Tenant `t`'s own events topic under `events_topic_template` (`None` without one, or
    /// when `t` cannot be part of a topic name).
    pub fn events_topic_for(&self, t: &str) -> Option<String> {
        let topic = self.events_topic_template.replace(TENANT, t);
        (!self.events_topic_template.is_empty() && tenant_name_ok(t) && topic.len() <= MAX_TOPIC)
            .then_some(topic)
    }

    /// The tenant whose own events topic `topic` is, under `events_topic_template`.
    pub fn tenant_of_events_topic<'a>(&self, topic: &'a str) -> Option<&'a str> {
        let (prefix, suffix) = self.events_topic_template.split_once(TENANT)?;
        let t = topic.strip_prefix(prefix)?.strip_suffix(suffix)?;
        tenant_name_ok(t).then_some(t)
    }

    /// The compacted topic that holds the sessions' state of tenant `t`'s events topic
    /// (`state_topic` + "." + `t`); `None` for the shared events topic's (`state_topic`).
    pub fn state_topic_for(&self, tenant: Option<&str>) -> String {
        match tenant {
            Some(t) => format!("{}.{t}", self.state_topic),
            None => self.state_topic.clone(),
        }
    }

    /// What every tenant's own events topic starts with (for prefixed ACLs), with
    /// `events_topic_template`.
    pub fn tenant_events_prefix(&self) -> Option<String> {
        template_prefix(&self.events_topic_template)
    }

    /// True when tenants are taken from the topic they write to.
    pub fn tenants_from_topics(&self) -> bool {
        !self.events_topic_template.is_empty()
    }

    /// What every tenant's verdicts topic starts with (for prefixed ACLs), with a template.
    pub fn tenant_topic_prefix(&self) -> Option<String> {
        template_prefix(&self.verdicts_topic_template)
    }
}

/// What every topic a `{tenant}` template names starts with (for prefixed ACLs).
fn template_prefix(template: &str) -> Option<String> {
    template
        .split_once(TENANT)
        .map(|(prefix, _)| prefix.to_string())
}

/// A tenant can be part of a topic name: ASCII letters, digits, `.`, `_` and `-`.
pub fn tenant_name_ok(t: &str) -> bool {
    !t.is_empty()
        && t.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

impl Config {
    /// How many stream threads `serve` runs: `kafka.threads`, or the cores available to
    /// the process (its CPU quota included) when that is 0.
    pub fn stream_threads(&self) -> usize {
        match self.kafka.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    /// The librdkafka properties to pass through, as strings.
    pub fn kafka_properties(&self) -> Vec<(String, String)> {
        self.kafka
            .properties
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string()),
                )
            })
            .collect()
    }

    /// The largest record the guard writes to the dead-letter topic: the configured
    /// `dlq_max_bytes`, and never more than what the producer accepts (`message.max.bytes`).
    pub fn dlq_limit(&self) -> usize {
        let producer = self
            .kafka_properties()
            .into_iter()
            .find(|(k, _)| k == "message.max.bytes")
            .and_then(|(_, v)| v.trim().parse().ok());
        dlq_limit(self.kafka.dlq_max_bytes, producer)
    }
}

/// The sections of a configuration file.
pub const SECTIONS: [&str; 5] = ["kafka", "admin", "metrics", "engine", "policy"];

/// The one rule for what a file is, wherever one is given (`--config`, `policy check`,
/// `diff`, `publish`): a **configuration** when its top level has any of `SECTIONS`, its
/// policy then under `[policy]` (none: the built-in defaults); otherwise a **policy file**,
/// the keys of `[policy]` at the top (`[[rules]]`, `[tool]`, `[[overrides]]`, ...).
pub fn is_configuration<'a>(top_keys: impl IntoIterator<Item = &'a String>) -> bool {
    top_keys.into_iter().any(|k| SECTIONS.contains(&k.as_str()))
}

/// Loads defaults, then `file`, then the environment (`LOOPGUARD__SECTION__KEY`).
pub fn load(file: Option<&str>) -> Result<Config, ConfigError> {
    load_with_env(file, std::env::vars())
}

/// As `load`, with the environment given explicitly (tests).
pub fn load_with_env(
    file: Option<&str>,
    env: impl Iterator<Item = (String, String)>,
) -> Result<Config, ConfigError> {
    load_explained(file, env).map(|(c, _)| c)
}

/// As `load_with_env`, with where each setting holding a secret came from (`check-config`
/// prints it). No error quotes a line of the file or shows a secret-looking value
/// (`secrets`); `{ file = "PATH" }` and `{ env = "VAR" }` values are read here.
pub fn load_explained(
    file: Option<&str>,
    env: impl Iterator<Item = (String, String)>,
) -> Result<(Config, Vec<SecretSource>), ConfigError> {
    let environment: Vec<(String, String)> = env.collect();
    let mut builder = config::Config::builder()
        .add_source(config::File::from_str(DEFAULTS, config::FileFormat::Toml));
    let mut file_text = String::new();
    let mut file_table = None;
    let mut file_secrets = Vec::new();
    if let Some(path) = file {
        let text =
            std::fs::read_to_string(path).map_err(|e| ConfigError::Load(format!("{path}: {e}")))?;
        let table: toml::Table = toml::from_str(&text).map_err(|e| {
            ConfigError::Load(format!(
                "{path}: {}",
                secrets::describe_toml_error(&text, &e)
            ))
        })?;
        // A policy file (the keys of `[policy]` at the top) is that configuration's policy.
        let (table, source) = match is_configuration(table.keys()) {
            true => (table, text.clone()),
            false => {
                let table =
                    toml::Table::from_iter([("policy".to_string(), toml::Value::Table(table))]);
                let source = toml::to_string(&table)
                    .map_err(|e| ConfigError::Load(format!("{path}: {e}")))?;
                (table, source)
            }
        };
        builder = builder.add_source(config::File::from_str(&source, config::FileFormat::Toml));
        file_secrets = serde_json::to_value(&table)
            .map(|t| secrets::secret_values(&t))
            .unwrap_or_default();
        file_text = text;
        file_table = Some(table);
    }
    let scrubbed = |e: config::ConfigError| {
        ConfigError::Load(secrets::scrub_foreign(
            &e.to_string(),
            &file_text,
            &file_secrets,
        ))
    };
    let raw = builder.build().map_err(scrubbed)?;
    let mut tree: Value = raw.try_deserialize().map_err(scrubbed)?;
    let mut env: Vec<(String, String)> = environment
        .iter()
        .filter(|(k, _)| k.starts_with("LOOPGUARD__"))
        .cloned()
        .collect();
    env.sort();
    let mut env_problems: Vec<String> = env
        .iter()
        .filter_map(|(key, value)| apply_env(&mut tree, key, value))
        .collect();
    let env_paths: Vec<(Vec<String>, String)> = env
        .iter()
        .filter_map(|(k, _)| env_path(k).map(|p| (p, k.clone())))
        .collect();
    let lookup = |var: &str| {
        environment
            .iter()
            .find(|(k, _)| k == var)
            .map(|(_, v)| v.clone())
    };
    let layers = secrets::Layers {
        file: file.zip(file_table.as_ref()),
        env: &env_paths,
        lookup: &lookup,
    };
    let (sources, mut hidden, reference_problems) = secrets::resolve(&mut tree, &layers);
    env_problems.extend(reference_problems);
    hidden.extend(file_secrets);
    hidden.extend(
        env.iter()
            .filter(|(k, _)| is_secret_key(k))
            .map(|(_, v)| v.clone()),
    );
    let result = match (from_tree(tree), env_problems.is_empty()) {
        (result, true) => result,
        (Ok(_), false) => Err(ConfigError::Invalid(env_problems)),
        (Err(ConfigError::Invalid(more)), false) => Err(ConfigError::Invalid(
            env_problems.into_iter().chain(more).collect(),
        )),
        (Err(e), false) => Err(e),
    };
    // Whatever a message repeats of a secret value, wherever it came from, is masked.
    result.map(|c| (c, sources)).map_err(|e| match e {
        ConfigError::Invalid(p) => {
            ConfigError::Invalid(p.iter().map(|p| secrets::redact(p, &hidden)).collect())
        }
        ConfigError::Load(m) => ConfigError::Load(secrets::redact(&m, &hidden)),
    })
}

/// A section's problem, naming the key when serde got as far as one:
/// `kafka.batch_max_ms: invalid type: string "fast", expected u64`; `[kafka]: ...` for
/// what concerns the section as a whole (an unknown key, a missing one).
fn problem(section: &str, p: &every_problem::Problem) -> String {
    // The value serde quotes (`invalid type: string "..."`) is hidden for a secret.
    let message = match is_secret_key(&p.path) {
        true => secrets::mask_quoted(&p.message),
        false => p.message.clone(),
    };
    match p.path.as_str() {
        "." => format!("[{section}]: {message}"),
        key => format!("{section}.{key}: {message}"),
    }
}

/// The built-in defaults as a tree (`default.toml`).
fn defaults_tree() -> Value {
    let table: toml::Table = toml::from_str(DEFAULTS).expect("the built-in defaults parse");
    serde_json::to_value(table).expect("TOML is JSON")
}

/// Validates a configuration tree, collecting every problem.
fn from_tree(mut tree: Value) -> Result<Config, ConfigError> {
    let mut problems = Vec::new();
    let root = tree
        .as_object_mut()
        .ok_or_else(|| ConfigError::Invalid(vec!["configuration must be a table".into()]))?;
    for key in root.keys() {
        if !SECTIONS.contains(&key.as_str()) {
            problems.push(format!("unknown section `{key}`"));
        }
    }
    fn section<T: serde::de::DeserializeOwned>(
        root: &serde_json::Map<String, Value>,
        name: &str,
        problems: &mut Vec<String>,
    ) -> Option<T> {
        let v = root
            .get(name)
            .cloned()
            .unwrap_or(Value::Object(Default::default()));
        // Every bad key of the section, not only the first (every_problem.rs); a bad value
        // is read as its built-in default meanwhile, so the others are still checked.
        let defaults = defaults_tree();
        let (value, found) =
            every_problem::deserialize_over(v, defaults.get(name).unwrap_or(&Value::Null));
        problems.extend(found.iter().map(|p| problem(name, p)));
        value
    }
    let kafka: Option<KafkaConfig> = section(root, "kafka", &mut problems);
    let admin: Option<AdminConfig> = section(root, "admin", &mut problems);
    let metrics: Option<MetricsConfig> = section(root, "metrics", &mut problems);
    let engine: Option<EngineConfig> = section(root, "engine", &mut problems);
    let policy_raw = root.get("policy").cloned().unwrap_or(Value::Null);
    let policy = PolicySet::compile(&policy_raw)
        .map_err(|p| problems.extend(p))
        .ok();
    if let Some(k) = &kafka {
        for (name, topic) in [
            ("events_topic", &k.events_topic),
            ("verdicts_topic", &k.verdicts_topic),
            ("dlq_topic", &k.dlq_topic),
            ("state_topic", &k.state_topic),
            ("policy_topic", &k.policy_topic),
        ] {
            if topic.is_empty() {
                problems.push(format!("[kafka]: {name} must not be empty"));
            }
        }
        if k.group_id.is_empty() {
            problems.push("[kafka]: group_id must not be empty".into());
        }
        let t = &k.verdicts_topic_template;
        if !t.is_empty() && (t.matches(TENANT).count() != 1 || t.starts_with(TENANT)) {
            problems.push(format!(
                "[kafka]: verdicts_topic_template `{t}` must hold `{TENANT}` once, after a prefix (e.g. \"agent-verdicts.{TENANT}\")"
            ));
        }
        let t = &k.events_topic_template;
        if !t.is_empty() {
            if t.matches(TENANT).count() != 1 || t.starts_with(TENANT) {
                problems.push(format!(
                    "[kafka]: events_topic_template `{t}` must hold `{TENANT}` once, after a prefix (e.g. \"agent-events.{TENANT}\")"
                ));
            } else if k.verdicts_topic_template.is_empty() {
                problems.push(
                    "[kafka]: events_topic_template needs verdicts_topic_template (each tenant reads its own verdicts, e.g. \"agent-verdicts.{tenant}\")".into(),
                );
            }
            for (name, topic) in [
                ("verdicts_topic", &k.verdicts_topic),
                ("dlq_topic", &k.dlq_topic),
                ("state_topic", &k.state_topic),
                ("policy_topic", &k.policy_topic),
            ] {
                if k.tenant_of_events_topic(topic).is_some() {
                    problems.push(format!(
                        "[kafka]: {name} `{topic}` would be read as a tenant's events topic under events_topic_template `{t}`"
                    ));
                }
            }
        }
        if k.tenant_discovery_ms < 100 {
            problems.push("[kafka]: tenant_discovery_ms must be >= 100".into());
        }
        for key in k.properties.keys() {
            if let Some((_, why)) = GUARD_OWNED_PROPERTIES.iter().find(|(o, _)| o == key) {
                problems.push(format!(
                    "[kafka.properties]: `{key}` cannot be set here ({why})"
                ));
            }
        }
        let min = MIN_DLQ_LIMIT;
        if k.dlq_max_bytes < min {
            problems.push(format!("[kafka]: dlq_max_bytes must be >= {min}"));
        }
        if k.threads > MAX_THREADS {
            problems.push(format!(
                "[kafka]: threads must be at most {MAX_THREADS} (0: the cores available)"
            ));
        }
    }
    if let Some(e) = &engine {
        if e.session_ttl_secs == 0 {
            problems.push("[engine]: session_ttl_secs must be > 0".into());
        }
    }
    match (kafka, admin, metrics, engine, policy) {
        (Some(kafka), Some(admin), Some(metrics), Some(engine), Some(policy))
            if problems.is_empty() =>
        {
            Ok(Config {
                kafka,
                admin,
                metrics,
                engine,
                policy,
                policy_raw,
            })
        }
        _ => Err(ConfigError::Invalid(problems)),
    }
}

#[cfg(test)]
mod tests;
