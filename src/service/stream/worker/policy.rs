//! The live policy on a stream thread: the instance's latest version is picked up at every
//! loop turn; each owned partition switches to it before its next event, recording where
//! (`Part::switch_policy`), inside the open batch's transaction.

use super::Worker;
use rdkafka::error::KafkaError;

impl Worker {
    /// Takes the instance's latest policy version when it is newer than the thread's.
    pub fn poll_policy(&mut self) {
        let feed = &self.shared.policy;
        if feed.seq() <= self.live.seq {
            return;
        }
        if let Some(latest) = feed.latest().filter(|l| l.seq > self.live.seq) {
            tracing::info!(thread = %self.thread, version = %latest.version(), seq = latest.seq, "stream thread picked up a policy version");
            self.live = latest;
            self.note_policy();
        }
    }

    /// Shows the thread's version on the admin endpoint.
    fn note_policy(&self) {
        self.shared.policy.threads.insert(
            self.thread.clone(),
            (self.live.seq, self.live.version().to_string()),
        );
    }

    pub(super) fn with_policy_noted(self) -> Self {
        self.note_policy();
        self
    }

    /// Before `partition`'s record at `offset`: switches the partition to the thread's
    /// version when it is judged by an older one (or by one never recorded), or by another
    /// policy of the same seq: the configuration's own (`CONFIG_SEQ`) recorded by an
    /// instance that ran with another `--config`. So after a restart one rule holds on
    /// every partition: the latest published version, else this instance's configuration
    /// (docs/tuning.md, "Which policy is in force"; decisions (gt)).
    pub(super) fn apply_policy(&mut self, partition: i32, offset: i64) -> Result<(), KafkaError> {
        let Some(part) = self.parts.get_mut(&partition) else {
            return Ok(());
        };
        let same =
            part.policy_seq == self.live.seq && part.engine.policy_version() == self.live.version();
        if part.policy_seq > self.live.seq || same {
            return Ok(());
        }
        // The checkpoint of the switch is taken mid-batch: the sessions the open batch
        // changed so far must be in it as they are now, as a commit's checkpoint has them.
        let (touched, removed) = part.collect_changes();
        let key = crate::service::shared::PartKey::new(&self.tenant, partition);
        self.shared
            .refresh_summaries(&key, &part.engine, touched, removed);
        let change = part.switch_policy(
            self.producer.producer(),
            &self.cfg.kafka.state_topic,
            partition,
            offset,
            &self.live,
        )?;
        tracing::info!(
            partition,
            from_offset = change.from_offset,
            version = %change.version,
            seq = change.seq,
            "policy version in force on the partition"
        );
        self.shared
            .policy
            .partitions
            .insert(key, (change.seq, change.version, change.from_offset));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::service::kafka::embedded::EmbeddedKafka;
    use crate::service::kafka::settings::{state_probe_config, state_reader_config};
    use crate::service::metrics::Metrics;
    use crate::service::shared::Shared;
    use crate::service::state::partition::Part;
    use crate::service::state::restore::{QuietEof, StateReader};
    use crate::service::txn::TxnProducer;
    use std::sync::Arc;

    /// A worker owning partition 0 with live sessions, on the embedded broker (records
    /// written at-least-once: nothing here commits); `token` turns the debug view on.
    fn worker(token: &str) -> (Worker, Arc<Shared>, EmbeddedKafka, tokio::runtime::Runtime) {
        // The embedded broker's front door runs on a runtime of its own.
        let rt = tokio::runtime::Runtime::new().unwrap();
        let _in = rt.enter();
        let mut cfg = crate::config::load_with_env(None, std::iter::empty()).unwrap();
        cfg.kafka.embedded_listen = "127.0.0.1:0".parse().unwrap();
        cfg.kafka.delivery = crate::config::Delivery::AtLeastOnce;
        let broker = EmbeddedKafka::start(&cfg).unwrap();
        cfg.kafka.bootstrap_servers = broker.bootstrap_servers();
        let cfg = Arc::new(cfg);
        let metrics = Metrics::new(prometheus::Registry::new(), &cfg.metrics).unwrap();
        let shared = Shared::new(metrics, token);
        let producer = TxnProducer::new(cfg.clone(), "leak-test").unwrap();
        let reader = StateReader::new(
            state_reader_config(&cfg)
                .create_with_context(QuietEof)
                .unwrap(),
            state_probe_config(&cfg)
                .create_with_context(QuietEof)
                .unwrap(),
        );
        let mut w = Worker::new(cfg, shared.clone(), producer, reader);
        let engine = Engine::new(Default::default(), Default::default()).track_changes();
        w.parts.insert(0, Part::new(engine, Some(0), 0));
        (w, shared, broker, rt)
    }

    /// Sessions judged, then `versions` policy versions published and switched to, each
    /// after more events: what the debug view keeps, after each switch.
    fn kept_after_switches(token: &str, versions: i64) -> Vec<usize> {
        let (mut w, shared, _broker, _rt) = worker(token);
        let mut verdicts = Vec::new();
        let mut kept = Vec::new();
        for v in 0..versions {
            let events = crate::fleet::fleet(5, &format!("v{v}-"), v * 1_000_000, 20, v as u64);
            let part = w.parts.get_mut(&0).unwrap();
            for e in events {
                part.engine.handle_event(e, &mut verdicts);
            }
            let record = format!(r#"{{"policy": {{"tool": {{"window": {}}}}}}}"#, 8 + v);
            shared.policy.offer(v, Some(record.as_bytes())).unwrap();
            w.poll_policy();
            w.apply_policy(0, 100 * (v + 1)).unwrap();
            assert_eq!(w.parts[&0].policy_seq, v, "version {v} in force");
            kept.push(shared.sessions.len());
        }
        kept
    }

    /// A partition restored with the configuration's policy of an instance that ran with
    /// another `--config` (both at `CONFIG_SEQ`) takes this instance's configuration before
    /// its next event, recorded like any switch; one already judged by it records nothing.
    #[test]
    fn a_restart_with_another_config_puts_its_policy_in_force_on_every_partition() {
        use crate::service::policy_feed::CONFIG_SEQ;
        let (mut w, shared, _broker, _rt) = worker("");
        let old: serde_json::Value = serde_json::json!({"tool": {"repeat_threshold": 5}});
        let old = crate::engine::policy::PolicySet::compile(&old).unwrap();
        assert_ne!(old.version(), w.live.version());
        let part = w.parts.get_mut(&0).unwrap();
        part.engine.set_policies(old);
        part.policy_seq = CONFIG_SEQ;
        w.apply_policy(0, 10).unwrap();
        let part = &w.parts[&0];
        assert_eq!(part.engine.policy_version(), w.live.version());
        assert_eq!(part.policy_seq, CONFIG_SEQ);
        let recorded = shared
            .policy
            .partitions
            .iter()
            .map(|p| p.value().2)
            .collect::<Vec<_>>();
        assert_eq!(
            recorded,
            [0],
            "the switch is recorded where the partition stands"
        );
        shared.policy.partitions.clear();
        w.apply_policy(0, 11).unwrap();
        assert!(
            shared.policy.partitions.is_empty(),
            "nothing to switch: nothing recorded"
        );
    }

    /// Issue 30's leak: each switch published the partition's session summaries whether or
    /// not the debug view was on, and nothing removed them.
    #[test]
    fn policy_switches_keep_no_summaries_while_the_debug_view_is_off() {
        assert_eq!(kept_after_switches("", 4), vec![0; 4]);
        // The same switches with the view on keep them: the check above can see a leak.
        let on = kept_after_switches("token", 4);
        assert!(on.iter().all(|&n| n > 0), "{on:?}");
    }
}
