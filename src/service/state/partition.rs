//! One owned events partition: its engine, the offsets it has reached, and the sessions
//! changed since its last checkpoint. A checkpoint writes those sessions' state (or
//! tombstones) and the checkpoint record to the state topic, inside the batch transaction
//! that commits the same offset, so state and offsets always agree. Sessions are
//! serialized ahead, at the commits where few changed, so that a checkpoint mostly sends
//! what is ready rather than stalling its thread on serializing everything at once; each
//! at most once between two checkpoints (then at the checkpoint if it changed again).

use crate::engine::{Engine, EngineStats};
use crate::service::records::checkpoint::{Checkpoint, CLOCK_KEY};
use crate::service::records::marker::Judged;
use crate::service::records::policy_change::PolicyChange;
use crate::service::txn::producer::GuardProducer;
use rdkafka::error::KafkaError;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

pub struct Part {
    pub engine: Engine,
    /// Offset to commit with the open batch (the next event after the batch's last).
    pub next_offset: Option<i64>,
    /// The next event to process, as far as the engine's state goes.
    position: Option<i64>,
    pub last_stats: EngineStats,
    /// Sessions changed since the last checkpoint (by events, sweeps, evictions, re-runs).
    pending: BTreeSet<String>,
    /// State of pending sessions serialized ahead, each as it was at the end of the batch
    /// that last changed it; `None` once a later batch changed it again: it is serialized
    /// at the checkpoint, not ahead again (a session streaming through every batch was
    /// serialized at every commit, the guard's largest cost beyond its engine at moderate
    /// rates: docs/benchmarks.md, issue 19).
    ready: HashMap<String, Option<Vec<u8>>>,
    ready_bytes: usize,
    events_since_checkpoint: usize,
    last_checkpoint: Instant,
    /// How far this partition's events are judged and marked (judged-through markers).
    pub judged: Judged,
    /// The seq of the policy judging it (`policy_feed`); `i64::MIN`: none recorded yet.
    pub policy_seq: i64,
}

/// When checkpoints are due: whichever limit is reached first; `max_ms == 0` means at
/// every batch.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointPolicy {
    pub max_ms: u64,
    pub max_events: usize,
}

/// What one checkpoint wrote.
#[derive(Debug, Default, Clone, Copy)]
pub struct Written {
    pub records: usize,
    pub bytes: usize,
    /// Sessions whose state was too large for a record: written as tombstones instead.
    pub too_large: usize,
}

/// Serializing ahead happens at a commit whose batch changed at most this many sessions of
/// the partition (a busy partition serializes at its checkpoint only, once per session),
/// up to `AHEAD_BYTES_PER_COMMIT` of state per commit and `AHEAD_BYTES` held at a time.
const AHEAD_SESSIONS: usize = 256;
const AHEAD_BYTES_PER_COMMIT: usize = 512 * 1024;
const AHEAD_BYTES: usize = 16 * 1024 * 1024;

/// Largest state record written; under Kafka's default 1 MB record limit with room for
/// the key and headers. The engine's bounds keep sessions far below it; a session over
/// it would otherwise make every checkpoint of its partition fail, forever.
pub const MAX_STATE_RECORD_BYTES: usize = 900_000;

impl Part {
    /// A partition restored to `position`, `replayed` events past its last checkpoint.
    pub fn new(mut engine: Engine, position: Option<i64>, replayed: usize) -> Self {
        let changes = engine.take_changes();
        let pending = changes.touched.into_iter().chain(changes.removed).collect();
        Part {
            last_stats: engine.stats(),
            engine,
            next_offset: None,
            position,
            pending,
            ready: HashMap::new(),
            ready_bytes: 0,
            events_since_checkpoint: replayed,
            last_checkpoint: Instant::now(),
            judged: Judged::default(),
            policy_seq: i64::MIN,
        }
    }

    /// Puts `change.policy` in force from the next event on (whose offset is `offset`),
    /// writing into the open batch a checkpoint at that point and the record of the switch
    /// (`policy_record`): a restore starts from the checkpoint with this policy, so the
    /// events before and after are judged as they were. The caller has collected the
    /// batch's changes first (`collect_changes`). Returns the record written.
    pub fn switch_policy(
        &mut self,
        producer: &GuardProducer,
        state_topic: &str,
        partition: i32,
        offset: i64,
        live: &crate::service::policy_feed::LivePolicy,
    ) -> Result<PolicyChange, KafkaError> {
        let from_offset = *self.position.get_or_insert(offset);
        self.write_checkpoint(producer, state_topic, partition)?;
        let change = PolicyChange {
            from_offset,
            seq: live.seq,
            version: live.version().to_string(),
            policy: live.raw.clone(),
        };
        crate::service::txn::send(
            producer,
            state_topic,
            partition,
            &change.key(),
            Some(&change.to_json()),
            None,
        )?;
        self.engine.set_policies(live.set.clone());
        self.policy_seq = live.seq;
        Ok(change)
    }

    /// Notes one processed event at `offset`.
    pub fn processed(&mut self, offset: i64) {
        self.next_offset = Some(offset + 1);
        self.position = Some(offset + 1);
        self.events_since_checkpoint += 1;
    }

    /// Collects the sessions changed since the last call; returns them for the admin view.
    pub fn collect_changes(&mut self) -> (Vec<String>, Vec<String>) {
        let changes = self.engine.take_changes();
        self.pending.extend(changes.touched.iter().cloned());
        self.pending.extend(changes.removed.iter().cloned());
        for id in changes.touched.iter().chain(&changes.removed) {
            if let Some(stale) = self.ready.get_mut(id).and_then(Option::take) {
                self.ready_bytes -= stale.len();
            }
        }
        if changes.touched.len() <= AHEAD_SESSIONS {
            let budget = self.ready_bytes + AHEAD_BYTES_PER_COMMIT;
            for id in &changes.touched {
                if self.ready_bytes >= budget.min(AHEAD_BYTES) {
                    break;
                }
                if self.ready.contains_key(id) {
                    continue;
                }
                if let Some(state) = self.engine.snapshot(id) {
                    self.ready_bytes += state.len();
                    self.ready.insert(id.clone(), Some(state));
                }
            }
        }
        (
            changes.touched.into_iter().collect(),
            changes.removed.into_iter().collect(),
        )
    }

    /// When this partition's last checkpoint was written (or it was restored).
    pub fn last_checkpoint(&self) -> Instant {
        self.last_checkpoint
    }

    pub fn checkpoint_due(&self, policy: CheckpointPolicy, force: bool) -> bool {
        let anything = self.events_since_checkpoint > 0 || !self.pending.is_empty();
        anything
            && self.position.is_some()
            && (force
                || policy.max_ms == 0
                || self.events_since_checkpoint >= policy.max_events
                || self.last_checkpoint.elapsed() >= Duration::from_millis(policy.max_ms))
    }

    /// Writes the pending sessions and the checkpoint record into the open batch.
    pub fn write_checkpoint(
        &mut self,
        producer: &GuardProducer,
        state_topic: &str,
        partition: i32,
    ) -> Result<Written, KafkaError> {
        let mut written = Written::default();
        for id in &self.pending {
            let mut snapshot = match self.ready.remove(id) {
                Some(Some(state)) => Some(state),
                _ => self.engine.snapshot(id),
            };
            if snapshot
                .as_ref()
                .is_some_and(|s| s.len() > MAX_STATE_RECORD_BYTES)
            {
                tracing::error!(
                    session = %id,
                    bytes = snapshot.as_ref().map_or(0, Vec::len),
                    "session state too large for a record: its next owner starts it afresh"
                );
                written.too_large += 1;
                snapshot = None;
            }
            written.records += 1;
            written.bytes += snapshot.as_ref().map_or(0, Vec::len);
            crate::service::txn::send(
                producer,
                state_topic,
                partition,
                id.as_bytes(),
                snapshot.as_deref(),
                None,
            )?;
        }
        let record = Checkpoint {
            clock: self.engine.clock(),
            offset: self.position,
        };
        let bytes = serde_json::to_vec(&record).unwrap_or_default();
        crate::service::txn::send(
            producer,
            state_topic,
            partition,
            CLOCK_KEY,
            Some(&bytes),
            None,
        )?;
        self.pending.clear();
        self.ready.clear();
        self.ready_bytes = 0;
        self.events_since_checkpoint = 0;
        self.last_checkpoint = Instant::now();
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::policy::PolicySet;
    use crate::engine::Limits;

    /// What a checkpoint sends for a session serialized ahead is what serializing it at the
    /// checkpoint would give: each ready state is the session's current one, batch after
    /// batch (sessions coming back, ending and expiring), and every pending session is
    /// either ready or serialized then; none is serialized ahead twice between checkpoints.
    #[test]
    fn states_serialized_ahead_are_the_current_ones() {
        let limits = Limits {
            session_ttl_ms: 60_000,
            ..Limits::default()
        };
        let engine = Engine::new(PolicySet::default(), limits).track_changes();
        let mut part = Part::new(engine, None, 0);
        let events = crate::fleet::fleet(40, "ahead-", 0, 700, 7);
        let mut verdicts = Vec::new();
        let (mut checked, mut stale) = (0, 0);
        let mut ahead_since_checkpoint = BTreeSet::new();
        for (n, batch) in events.chunks(37).enumerate() {
            for e in batch {
                part.engine.handle_event(e.clone(), &mut verdicts);
            }
            let before: BTreeSet<String> = part.ready.keys().cloned().collect();
            part.collect_changes();
            for (id, state) in &part.ready {
                assert!(part.pending.contains(id), "{id} ready but not pending");
                match state {
                    Some(state) => {
                        assert_eq!(Some(state), part.engine.snapshot(id).as_ref(), "{id}");
                        checked += 1;
                        if !before.contains(id) {
                            assert!(ahead_since_checkpoint.insert(id.clone()), "{id} twice");
                        }
                    }
                    None => stale += 1,
                }
            }
            assert_eq!(
                part.ready_bytes,
                part.ready.values().flatten().map(Vec::len).sum::<usize>()
            );
            if n % 5 == 4 {
                ahead_since_checkpoint.clear();
                // What write_checkpoint takes, without a producer.
                part.ready.clear();
                part.ready_bytes = 0;
                part.pending.clear();
            }
        }
        assert!(checked > 100, "only {checked} ready states checked");
        assert!(
            stale > 20,
            "only {stale} sessions changed after being serialized ahead"
        );
    }
}
