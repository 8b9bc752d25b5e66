//! State shared between an instance's stream threads, its policy reader and its admin
//! HTTP side: partitions and their status, readiness, the live policy, session summaries
//! for the debug view, and the metrics.

use super::metrics::Metrics;
pub use super::part_key::PartKey;
use super::policy_feed::PolicyFeed;
use crate::engine::rules::SessionSummary;
use dashmap::DashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// What a partition is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PartitionStatus {
    Restoring,
    Active,
    /// Rewound repeatedly to the same offset (a failing batch); unready until it commits.
    Stuck,
}

/// State shared between the consumer thread and the admin side.
pub struct Shared {
    pub metrics: Metrics,
    /// Owned partitions and their status.
    pub partitions: DashMap<PartKey, PartitionStatus>,
    /// Summaries of owned sessions, refreshed at each commit; kept only while the debug
    /// view that shows them is on (`debug_token`): a summary per session touched per
    /// commit was a few percent of the guard's work (docs/benchmarks.md, issue 19).
    pub sessions: DashMap<String, (PartKey, SessionSummary)>,
    /// Sessions held per owned partition, refreshed at each commit.
    pub session_counts: DashMap<PartKey, usize>,
    /// Set once every stream thread's consumer has joined the group.
    pub joined: AtomicBool,
    /// Stream threads that have not joined the group yet.
    pending_joins: AtomicUsize,
    pub debug_token: Option<String>,
    /// The live policy: the latest version, and what each thread and partition applies.
    pub policy: PolicyFeed,
    /// What the broker refuses this guard, while it does (`access`): unready until granted.
    pub access_denied: std::sync::Mutex<Option<String>>,
    /// Judgements of verdicts, and the demotions they ask for (`demotion`).
    pub demotions: super::demotion::Demotions,
}

impl Shared {
    pub fn new(metrics: Metrics, debug_token: &str) -> Arc<Shared> {
        Arc::new(Shared {
            metrics,
            partitions: DashMap::new(),
            sessions: DashMap::new(),
            session_counts: DashMap::new(),
            joined: AtomicBool::new(false),
            pending_joins: AtomicUsize::new(1),
            debug_token: (!debug_token.is_empty()).then(|| debug_token.to_string()),
            policy: Default::default(),
            access_denied: Default::default(),
            demotions: Default::default(),
        })
    }

    pub fn is_ready(&self) -> bool {
        self.joined.load(Ordering::Acquire)
            && self
                .partitions
                .iter()
                .all(|p| *p.value() == PartitionStatus::Active)
    }

    /// How many stream threads must join before the instance can be ready.
    pub fn expect_joins(&self, threads: usize) {
        self.pending_joins.store(threads.max(1), Ordering::Release);
    }

    /// A stream thread's consumer joined the group (its first assignment, empty or not).
    pub fn thread_joined(&self) {
        let before = self
            .pending_joins
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if before.is_ok_and(|n| n <= 1) {
            self.joined.store(true, Ordering::Release);
        }
    }

    /// Sessions held by all stream threads (the counts refreshed at each commit).
    pub fn refresh_session_gauge(&self) {
        let held: usize = self.session_counts.iter().map(|c| *c.value()).sum();
        self.metrics.active_sessions.set(held as i64);
    }

    /// True when the debug view of sessions is on, so their summaries are kept.
    pub fn keeps_summaries(&self) -> bool {
        self.debug_token.is_some()
    }

    /// The one way summaries reach the debug view: `partition`'s sessions `touched` (as
    /// `engine` has them now) and `removed`; nothing at all while the view is off (every
    /// caller once kept its own copy of this, and the policy switch's did not check).
    pub fn refresh_summaries(
        &self,
        partition: &PartKey,
        engine: &crate::engine::Engine,
        touched: Vec<String>,
        removed: Vec<String>,
    ) {
        if !self.keeps_summaries() {
            return;
        }
        for id in touched {
            if let Some(summary) = engine.summary(&id) {
                self.sessions
                    .insert(partition.session_name(&id), (partition.clone(), summary));
            }
        }
        for id in removed {
            self.sessions.remove(&partition.session_name(&id));
        }
    }

    pub fn refresh_ready(&self) {
        self.metrics.ready.set(i64::from(self.is_ready()));
        self.metrics
            .assigned_partitions
            .set(self.partitions.len() as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(token: &str) -> Arc<Shared> {
        let cfg = crate::config::load_with_env(None, std::iter::empty()).unwrap();
        Shared::new(
            Metrics::new(prometheus::Registry::new(), &cfg.metrics).unwrap(),
            token,
        )
    }

    #[test]
    fn summaries_are_kept_only_while_the_debug_view_is_on() {
        use crate::engine::event::Event;
        let mut engine = crate::engine::Engine::new(Default::default(), Default::default());
        let e = Event::decode(
            br#"{"v":1,"event_id":"e1","session_id":"s1","ts":1,"type":"user_message","text":"hi"}"#,
        )
        .unwrap();
        engine.handle_event(e, &mut Vec::new());
        let off = shared("");
        for _ in 0..3 {
            off.refresh_summaries(&PartKey::new(&None, 0), &engine, vec!["s1".into()], vec![]);
        }
        assert!(
            off.sessions.is_empty(),
            "the debug view is off: nothing kept"
        );
        let on = shared("t");
        let two = PartKey::new(&None, 2);
        on.refresh_summaries(&two, &engine, vec!["s1".into()], vec![]);
        assert_eq!(on.sessions.get("s1").map(|s| s.0.partition), Some(2));
        let acme = PartKey::new(&Some("acme".into()), 2);
        on.refresh_summaries(&acme, &engine, vec!["s1".into()], vec![]);
        assert_eq!(
            on.sessions.get("acme/s1").map(|s| s.0.to_string()),
            Some("acme/2".into())
        );
        on.refresh_summaries(&two, &engine, vec![], vec!["s1".into()]);
        on.refresh_summaries(&acme, &engine, vec![], vec!["s1".into()]);
        assert!(on.sessions.is_empty());
    }
}
