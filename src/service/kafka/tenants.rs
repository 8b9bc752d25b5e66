//! Tenants from the writer (`kafka.events_topic_template`): each tenant's own events topic
//! is a lane of the instance, found on the broker (a new one within
//! `kafka.tenant_discovery_ms`, no restart) and served by stream threads of its own, in a
//! consumer group of its own, checkpointing to a state topic of its own. A lane's threads
//! stamp every event with the lane's tenant, so nothing one tenant writes can reach
//! another tenant's sessions, verdicts or state.

use crate::config::Config;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The configuration a lane's threads run with: tenant `t`'s events topic, state topic and
/// consumer group (`group_id.T`, under the guard's prefixed group ACL), its thread count;
/// everything else as the instance's. `None` when `t` cannot name a topic.
pub fn lane_config(cfg: &Config, t: &str) -> Option<Config> {
    let events = cfg.kafka.events_topic_for(t)?;
    let mut c = cfg.clone();
    c.kafka.events_topic = events;
    c.kafka.state_topic = cfg.kafka.state_topic_for(Some(t));
    c.kafka.group_id = format!("{}.{t}", cfg.kafka.group_id);
    c.kafka.threads = cfg.kafka.tenant_threads.get();
    Some(c)
}

/// What the broker's topics say of the tenants: those whose three topics (events,
/// verdicts, state) all exist, and those with an events topic but a topic missing (named).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Found {
    pub ready: BTreeSet<String>,
    pub incomplete: BTreeMap<String, Vec<String>>,
}

/// Reads the tenants off a list of topic names (pure).
pub fn tenants_on<'a>(cfg: &Config, topics: impl IntoIterator<Item = &'a str>) -> Found {
    let k = &cfg.kafka;
    let topics: BTreeSet<&str> = topics.into_iter().collect();
    let mut found = Found::default();
    for topic in &topics {
        let Some(t) = k.tenant_of_events_topic(topic) else {
            continue;
        };
        let missing: Vec<String> = [
            k.verdicts_topic_for(Some(t)),
            Some(k.state_topic_for(Some(t))),
        ]
        .into_iter()
        .flatten()
        .filter(|name| !topics.contains(name.as_str()))
        .collect();
        match missing.is_empty() {
            true => found.ready.insert(t.to_string()),
            false => found.incomplete.insert(t.to_string(), missing).is_none(),
        };
    }
    found
}

/// Asks the broker for every topic this guard may describe and reads the tenants off them.
pub fn discover<C: rdkafka::consumer::ConsumerContext>(
    cfg: &Config,
    probe: &BaseConsumer<C>,
) -> Result<Found, rdkafka::error::KafkaError> {
    let md = probe.fetch_metadata(None, Duration::from_secs(10))?;
    let names: Vec<&str> = md
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| t.name())
        .collect();
    Ok(tenants_on(cfg, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        let env = [
            (
                "LOOPGUARD__KAFKA__EVENTS_TOPIC_TEMPLATE",
                "agent-events.{tenant}",
            ),
            (
                "LOOPGUARD__KAFKA__VERDICTS_TOPIC_TEMPLATE",
                "agent-verdicts.{tenant}",
            ),
            ("LOOPGUARD__KAFKA__TENANT_THREADS", "2"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        crate::config::load_with_env(None, env.into_iter()).unwrap()
    }

    #[test]
    fn a_tenant_is_served_once_its_three_topics_exist() {
        let c = cfg();
        let found = tenants_on(
            &c,
            [
                "agent-events",
                "agent-events-dlq",
                "agent-verdicts",
                "loopguard-state",
                "agent-events.acme",
                "agent-verdicts.acme",
                "loopguard-state.acme",
                "agent-events.beta",
                "agent-verdicts.beta",
                "agent-verdicts.gamma",
            ],
        );
        assert_eq!(found.ready, BTreeSet::from(["acme".to_string()]));
        assert_eq!(
            found.incomplete,
            BTreeMap::from([("beta".to_string(), vec!["loopguard-state.beta".to_string()])])
        );
    }

    #[test]
    fn a_lane_reads_its_tenant_s_topic_in_a_group_of_its_own() {
        let c = cfg();
        let lane = lane_config(&c, "acme").unwrap();
        assert_eq!(lane.kafka.events_topic, "agent-events.acme");
        assert_eq!(lane.kafka.state_topic, "loopguard-state.acme");
        assert_eq!(lane.kafka.group_id, "loopguard.acme");
        assert_eq!(lane.stream_threads(), 2);
        assert_eq!(
            lane.kafka.tenant_of_events_topic(&lane.kafka.events_topic),
            Some("acme")
        );
        assert_eq!(c.kafka.tenant_of_events_topic(&c.kafka.events_topic), None);
        assert!(lane_config(&c, "a b").is_none());
    }
}
