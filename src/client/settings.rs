//! What a `Guard` connects to: the broker, the two topics, the read path and any extra
//! librdkafka properties (SASL, TLS), taken from the guard's own configuration file.
//!
//! Either topic may be a template per tenant (`agent-events.{tenant}`,
//! `agent-verdicts.{tenant}`: the guard's `kafka.events_topic_template` and
//! `kafka.verdicts_topic_template`): `{tenant}` is replaced by `tenant`, which is then
//! required (`Guard::connect` refuses the settings without it, before connecting).

use crate::config::{Config, TENANT};
use std::time::Duration;

/// Kafka's longest topic name.
const MAX_TOPIC: usize = 249;

#[derive(Debug, Clone)]
pub struct GuardSettings {
    pub bootstrap_servers: String,
    /// The events topic written, or a template per tenant (`agent-events.{tenant}`).
    pub events_topic: String,
    /// The verdicts topic read, or a template per tenant (`agent-verdicts.{tenant}`).
    pub verdicts_topic: String,
    /// The tenant a topic template names (required by one).
    pub tenant: Option<String>,
    /// True: verdicts as soon as the guard writes them (each still delivered once). False:
    /// only those of committed transactions, seen when the guard's batch commits.
    pub read_uncommitted: bool,
    /// Extra librdkafka properties for the producer and the reader; they win over ours.
    pub properties: Vec<(String, String)>,
    /// How long `Guard::connect` may take to learn the topics.
    pub startup_timeout: Duration,
}

/// A setting that cannot work; `field` names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct SettingsError {
    pub field: &'static str,
    pub problem: String,
}

impl GuardSettings {
    pub fn new(bootstrap_servers: impl Into<String>) -> Self {
        GuardSettings {
            bootstrap_servers: bootstrap_servers.into(),
            events_topic: "agent-events".into(),
            verdicts_topic: "agent-verdicts".into(),
            tenant: None,
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

    /// As `from_config`, for the runtimes of `tenant`: the configuration's topic templates
    /// where it has them (`kafka.events_topic_template`, `kafka.verdicts_topic_template`),
    /// else its topics.
    pub fn from_config_for_tenant(cfg: &Config, tenant: Option<&str>) -> Self {
        let mut s = GuardSettings::from_config(cfg);
        if !cfg.kafka.events_topic_template.is_empty() {
            s.events_topic.clone_from(&cfg.kafka.events_topic_template);
        }
        if !cfg.kafka.verdicts_topic_template.is_empty() {
            s.verdicts_topic
                .clone_from(&cfg.kafka.verdicts_topic_template);
        }
        s.tenant = tenant.map(str::to_string);
        s
    }

    /// The events topic written: `events_topic` with `{tenant}` replaced by the tenant.
    pub fn events_topic_for_tenant(&self) -> Result<String, SettingsError> {
        topic_for(
            "events_topic",
            "events",
            &self.events_topic,
            self.tenant.as_deref(),
        )
    }

    /// The verdicts topic read: `verdicts_topic` with `{tenant}` replaced by the tenant.
    pub fn verdicts_topic_for_tenant(&self) -> Result<String, SettingsError> {
        topic_for(
            "verdicts_topic",
            "verdicts",
            &self.verdicts_topic,
            self.tenant.as_deref(),
        )
    }

    /// These settings with both topics substituted (what `Guard::connect` uses).
    pub fn resolved(&self) -> Result<GuardSettings, SettingsError> {
        Ok(GuardSettings {
            events_topic: self.events_topic_for_tenant()?,
            verdicts_topic: self.verdicts_topic_for_tenant()?,
            ..self.clone()
        })
    }
}

/// `template` itself, or with `{tenant}` replaced by `tenant` (required then, and must make
/// a valid topic name); `setting` and `role` name it in the error.
pub fn topic_for(
    setting: &'static str,
    role: &str,
    template: &str,
    tenant: Option<&str>,
) -> Result<String, SettingsError> {
    if !template.contains(TENANT) {
        return Ok(template.to_string());
    }
    if template.matches(TENANT).count() != 1 || template.starts_with(TENANT) {
        // The guard's rule for its templates (a prefix makes prefixed ACLs).
        return Err(SettingsError {
            field: setting,
            problem: format!(
                "`{template}` must hold {TENANT} once, after a prefix (e.g. \"agent-{role}.{TENANT}\"), as the guard's kafka.{role}_topic_template does"
            ),
        });
    }
    let Some(tenant) = tenant.filter(|t| !t.is_empty()) else {
        return Err(SettingsError {
            field: "tenant",
            problem: format!(
                "{setting} `{template}` is per tenant ({TENANT}) but no tenant is configured: give the tenant whose {role} topic this is"
            ),
        });
    };
    let topic = template.replace(TENANT, tenant);
    let nameable = tenant
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    if !nameable || topic.len() > MAX_TOPIC {
        return Err(SettingsError {
            field: "tenant",
            problem: format!(
                "tenant `{tenant}` makes {role} topic `{topic}`, not a valid Kafka topic name (ASCII letters, digits, '.', '_' and '-' only, at most {MAX_TOPIC} characters)"
            ),
        });
    }
    Ok(topic)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(events: &str, verdicts: &str, tenant: Option<&str>) -> GuardSettings {
        GuardSettings {
            events_topic: events.into(),
            verdicts_topic: verdicts.into(),
            tenant: tenant.map(str::to_string),
            ..GuardSettings::new("127.0.0.1:9092")
        }
    }

    #[test]
    fn plain_topics_are_used_as_they_are() {
        let s = with("agent-events", "agent-verdicts", None)
            .resolved()
            .unwrap();
        assert_eq!(
            (s.events_topic.as_str(), s.verdicts_topic.as_str()),
            ("agent-events", "agent-verdicts")
        );
        let s = with("agent-events", "agent-verdicts", Some("acme"))
            .resolved()
            .unwrap();
        assert_eq!(s.events_topic, "agent-events");
    }

    #[test]
    fn templates_take_the_tenant() {
        let s = with(
            "agent-events.{tenant}",
            "agent-verdicts.{tenant}",
            Some("acme"),
        )
        .resolved()
        .unwrap();
        assert_eq!(s.events_topic, "agent-events.acme");
        assert_eq!(s.verdicts_topic, "agent-verdicts.acme");
        assert_eq!(s.tenant.as_deref(), Some("acme"));
        let s = with("events-{tenant}-v2", "agent-verdicts", Some("beta_2"))
            .resolved()
            .unwrap();
        assert_eq!(
            (s.events_topic.as_str(), s.verdicts_topic.as_str()),
            ("events-beta_2-v2", "agent-verdicts")
        );
    }

    #[test]
    fn a_template_without_a_tenant_is_refused() {
        for tenant in [None, Some("")] {
            let e = with("agent-events.{tenant}", "agent-verdicts", tenant)
                .resolved()
                .unwrap_err();
            assert_eq!(e.field, "tenant");
            assert!(e.problem.contains("no tenant is configured"), "{e}");
            assert!(e.problem.contains("agent-events.{tenant}"), "{e}");
        }
        let e = with("agent-events", "agent-verdicts.{tenant}", None)
            .resolved()
            .unwrap_err();
        assert!(e.to_string().starts_with("tenant: verdicts_topic"), "{e}");
    }

    #[test]
    fn a_template_is_shaped_as_the_guards_and_a_tenant_must_name_a_topic() {
        for template in ["{tenant}-events", "e.{tenant}.{tenant}"] {
            let e = with(template, "agent-verdicts", Some("acme"))
                .resolved()
                .unwrap_err();
            assert_eq!(e.field, "events_topic");
            assert!(e.problem.contains("once, after a prefix"), "{e}");
        }
        for tenant in ["a b", "acme/prod", "é", &"x".repeat(240)] {
            let e = with("agent-events.{tenant}", "agent-verdicts", Some(tenant))
                .resolved()
                .unwrap_err();
            assert!(e.problem.contains("not a valid Kafka topic name"), "{e}");
        }
    }

    #[test]
    fn a_guard_without_the_tenant_of_its_template_is_refused_before_connecting() {
        // Nothing listens on port 9 of loopback; the refusal comes first.
        let s = GuardSettings {
            bootstrap_servers: "127.0.0.1:9".into(),
            ..with("agent-events.{tenant}", "agent-verdicts", None)
        };
        let at = std::time::Instant::now();
        match crate::client::Guard::connect(s) {
            Err(crate::client::ClientError::Settings(e)) => assert_eq!(e.field, "tenant"),
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("connected without a tenant"),
        }
        assert!(at.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_configuration_gives_its_templates_for_a_tenant() {
        let mut cfg = crate::config::load(None).unwrap();
        cfg.kafka.events_topic_template = "agent-events.{tenant}".into();
        cfg.kafka.verdicts_topic_template = "agent-verdicts.{tenant}".into();
        let s = GuardSettings::from_config_for_tenant(&cfg, Some("acme"))
            .resolved()
            .unwrap();
        assert_eq!(s.events_topic, "agent-events.acme");
        assert_eq!(s.verdicts_topic, "agent-verdicts.acme");
        assert!(GuardSettings::from_config_for_tenant(&cfg, None)
            .resolved()
            .is_err());
        // Without templates: the configuration's topics, whatever the tenant.
        let defaults = crate::config::load(None).unwrap();
        let plain = GuardSettings::from_config_for_tenant(&defaults, Some("acme"))
            .resolved()
            .unwrap();
        assert_eq!(plain.events_topic, defaults.kafka.events_topic);
    }
}
