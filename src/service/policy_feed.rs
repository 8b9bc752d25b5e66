//! The live policy of one instance: a reader thread follows the policy topic (one
//! partition, from its start) and offers each published version; a valid one becomes the
//! instance's latest, which every stream thread picks up at its next loop turn and each of
//! its partitions applies before its next event (recorded: `policy_record`). An invalid one
//! is refused whole: the one in force stays, the log names the key, a metric counts it.

use super::kafka::settings::policy_reader_config;
use super::metrics::Metrics;
use crate::config::Config;
use crate::engine::policy::PolicySet;
use dashmap::DashMap;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// The key every published policy is written under (the topic is compacted on it).
pub const POLICY_RECORD_KEY: &[u8] = b"policy";

/// A published policy record's value.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Published {
    /// The version `loopguard policy publish` computed (informational: each instance
    /// computes its own from `policy`).
    #[serde(default)]
    pub version: Option<String>,
    pub policy: Value,
}

/// A policy version an instance can put in force.
#[derive(Debug, Clone)]
pub struct LivePolicy {
    /// Its policy topic offset; -1 for the instance's configuration (`[policy]`).
    pub seq: i64,
    pub raw: Value,
    pub set: PolicySet,
}

impl LivePolicy {
    pub fn from_config(cfg: &Config) -> LivePolicy {
        LivePolicy {
            seq: CONFIG_SEQ,
            raw: cfg.policy_raw.clone(),
            set: cfg.policy.clone(),
        }
    }

    pub fn version(&self) -> &str {
        self.set.version()
    }
}

/// The seq of the configuration's own policy: below every published one.
pub const CONFIG_SEQ: i64 = -1;

/// The instance's view of the live policy, shared by the reader, the stream threads and
/// the admin endpoint.
#[derive(Default)]
pub struct PolicyFeed {
    latest: RwLock<Option<Arc<LivePolicy>>>,
    /// `latest`'s seq, read by the stream threads at every loop turn (i64::MIN: none yet).
    seq: AtomicI64Min,
    caught_up: AtomicBool,
    /// Per stream thread: the seq and version it has picked up.
    pub threads: DashMap<String, (i64, String)>,
    /// Per owned partition: (seq, version, events offset it took effect at).
    pub partitions: DashMap<crate::service::part_key::PartKey, (i64, String, i64)>,
    /// The last refused publication: its offset and problems.
    pub last_refused: RwLock<Option<(i64, Vec<String>)>>,
}

/// An `AtomicI64` that starts at `i64::MIN`.
struct AtomicI64Min(AtomicI64);

impl Default for AtomicI64Min {
    fn default() -> Self {
        AtomicI64Min(AtomicI64::new(i64::MIN))
    }
}

impl PolicyFeed {
    /// The latest valid published version, if any.
    pub fn latest(&self) -> Option<Arc<LivePolicy>> {
        self.latest.read().ok().and_then(|l| l.clone())
    }

    pub fn seq(&self) -> i64 {
        self.seq.0.load(Ordering::Acquire)
    }

    /// Offers the record at `offset`: a valid policy becomes the latest; an invalid one is
    /// refused with every problem (each naming its key), the latest unchanged.
    pub fn offer(
        &self,
        offset: i64,
        payload: Option<&[u8]>,
    ) -> Result<Arc<LivePolicy>, Vec<String>> {
        let published: Published = match payload {
            None => return Err(vec!["policy record: no value".into()]),
            Some(bytes) => {
                serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(bytes))
                    .map_err(|e| vec![format!("policy record: {}: {}", e.path(), e.inner())])?
            }
        };
        let set = PolicySet::compile(&published.policy)?;
        let live = Arc::new(LivePolicy {
            seq: offset,
            raw: published.policy,
            set,
        });
        if let Ok(mut l) = self.latest.write() {
            *l = Some(live.clone());
        }
        self.seq.0.store(offset, Ordering::Release);
        Ok(live)
    }

    pub fn is_caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
    }

    fn mark_caught_up(&self) {
        self.caught_up.store(true, Ordering::Release);
    }

    /// Waits until the reader has read the topic to the end it had at its start (so the
    /// first event is judged by the latest published version), at most `limit`.
    pub fn wait_caught_up(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while !self.is_caught_up() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.is_caught_up()
    }
}

/// The reader: follows the policy topic until `stop`; offers every record in order.
pub fn run_policy_reader(
    cfg: &Config,
    feed: &PolicyFeed,
    metrics: &Metrics,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let consumer: BaseConsumer = policy_reader_config(cfg).create()?;
    let topic = &cfg.kafka.policy_topic;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)?;
    consumer.assign(&tpl)?;
    let mut end = None;
    let started = Instant::now();
    while !stop.load(Ordering::Acquire) {
        if end.is_none() {
            match consumer.fetch_watermarks(topic, 0, Duration::from_secs(2)) {
                Ok((_, high)) => end = Some(high),
                Err(e) if started.elapsed() > Duration::from_secs(30) => {
                    anyhow::bail!("cannot read the policy topic {topic}: {e}")
                }
                Err(e) => {
                    tracing::warn!(topic = %topic, error = %e, "policy topic not readable yet")
                }
            }
        }
        let msg = consumer.poll(Duration::from_millis(200));
        if let Some(Ok(m)) = &msg {
            handle(feed, metrics, m.offset(), m.payload());
            if end.is_some_and(|e| m.offset() + 1 >= e) {
                feed.mark_caught_up();
            }
        }
        if end == Some(0)
            || (msg.is_none() && end.is_some() && position_at_end(&consumer, topic, end))
        {
            feed.mark_caught_up();
        }
    }
    Ok(())
}

fn position_at_end(consumer: &BaseConsumer, topic: &str, end: Option<i64>) -> bool {
    let Some(end) = end else { return false };
    consumer
        .position()
        .ok()
        .and_then(|p| p.find_partition(topic, 0).map(|e| e.offset()))
        .is_some_and(|o| matches!(o, Offset::Offset(o) if o >= end))
}

/// One record: applied or refused, logged and counted once.
fn handle(feed: &PolicyFeed, m: &Metrics, offset: i64, payload: Option<&[u8]>) {
    match feed.offer(offset, payload) {
        Ok(live) => {
            m.on_policy_applied(live.version());
            tracing::info!(offset, version = %live.version(), "policy version published: applying it");
        }
        Err(problems) => {
            m.policy_updates.with_label_values(&["refused"]).inc();
            tracing::error!(
                offset,
                problems = %problems.join("; "),
                "policy refused whole: the version in force stays"
            );
            if let Ok(mut r) = feed.last_refused.write() {
                *r = Some((offset, problems));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_version_becomes_the_latest_and_an_invalid_one_changes_nothing() {
        let feed = PolicyFeed::default();
        assert_eq!(feed.seq(), i64::MIN);
        assert!(feed.latest().is_none());
        let live = feed
            .offer(3, Some(br#"{"policy": {"tool": {"window": 8}}}"#))
            .unwrap();
        assert_eq!((live.seq, feed.seq()), (3, 3));
        let errs = feed
            .offer(4, Some(br#"{"policy": {"tool": {"window": "eight"}}}"#))
            .unwrap_err();
        assert!(errs[0].starts_with("policy.tool.window:"), "{errs:?}");
        let errs = feed.offer(5, Some(br#"{"policcy": {}}"#)).unwrap_err();
        assert!(errs[0].contains("policcy"), "{errs:?}");
        assert!(feed.offer(6, None).is_err());
        assert_eq!(feed.seq(), 3);
        assert_eq!(feed.latest().unwrap().set.global().tool.window, 8);
    }
}
