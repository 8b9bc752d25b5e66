//! A batch's life cycle after its events: when it is due, its commit (handed to the commit
//! thread, or inline), taking in a handed-off commit's end, and aborts. Verdicts, state and
//! offsets of a batch commit in one transaction or not at all.

use super::Worker;
use crate::engine::EngineStats;
use crate::service::kafka::outcome::Outcome;
use crate::service::shared::{PartitionStatus, Shared};
use crate::service::state::partition::CheckpointPolicy;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};

impl Worker {
    /// True when the batch should be committed: `batch_max_events` events, or
    /// `batch_max_ms` since the last commit (an event after a quiet spell commits at once);
    /// both stretched alike under a backlog (`pace.rs`).
    pub fn due(&self) -> bool {
        self.batch_events > 0
            && (self.batch_events >= self.pace.batch_events(&self.cfg.kafka)
                || self.now.saturating_duration_since(self.interval_started)
                    >= self.pace.commits(&self.cfg.kafka))
    }

    /// Reads the clock: the consumer returned without an event (so any backlog is read).
    pub fn tick(&mut self) {
        self.now = Instant::now();
        self.pace.caught_up();
    }

    /// How long the consumer may wait for the next event: until the open batch is due, at
    /// most 100 ms (stop signals are checked between polls).
    pub fn until_due(&self) -> Duration {
        let most = Duration::from_millis(self.cfg.kafka.batch_max_ms.clamp(1, 100));
        if self.batch_events == 0 {
            return most;
        }
        self.pace
            .commits(&self.cfg.kafka)
            .saturating_sub(self.now.saturating_duration_since(self.interval_started))
            .clamp(Duration::from_millis(1), most)
    }

    /// Hands the batch to the commit thread and goes on (`committer`): the stream loop's
    /// commit when a batch is due. Exactly-once only; at-least-once commits here.
    pub fn commit_pipelined<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), KafkaError> {
        self.commit_with(consumer, false, true)
    }

    /// Takes in the end of the commit in flight if it has come: its partitions progress,
    /// or, when it failed, the open batch is aborted too and a rewind is pending.
    pub fn poll_commit(&mut self) -> Result<(), KafkaError> {
        self.settle_commit(false)
    }

    /// As `poll_commit`, waiting for the commit in flight when `wait`.
    fn settle_commit(&mut self, wait: bool) -> Result<(), KafkaError> {
        let Some(result) = self.producer.settle(wait) else {
            return Ok(());
        };
        let batch = std::mem::take(&mut self.in_flight_batch);
        tracing::debug!(
            ms = self.in_flight_since.elapsed().as_millis() as u64,
            ok = result.is_ok(),
            "commit settled"
        );
        self.after_commit(&result, batch);
        if let Err(e) = &result {
            // Nothing after the failed batch may commit: the open one goes too.
            self.note_fenced(e);
            self.drop_held();
            if let Err(e) = self.producer.abort() {
                self.note_fenced(&e);
            }
            self.batch_events = 0;
            self.must_rewind();
        }
        result
    }

    /// Commits the batch's verdicts and offsets, with a checkpoint of the partitions where
    /// one is due, in one transaction. On failure nothing of the batch commits (the caller
    /// rewinds); a producer fenced by its successor stops the thread (`Next::Stop`).
    pub fn commit<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), KafkaError> {
        self.commit_with(consumer, false, false)
    }

    /// As `commit`, with a checkpoint of every partition that moved since its last one:
    /// before partitions leave and at shutdown, so their next owner re-runs nothing.
    pub fn commit_final<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), KafkaError> {
        self.commit_with(consumer, true, false)
    }

    /// Commits the batch (`pipelined`: hands it off) once the commit in flight, if any,
    /// has succeeded; when that one failed, nothing commits and a rewind is pending.
    fn commit_with<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        force_checkpoint: bool,
        pipelined: bool,
    ) -> Result<(), KafkaError> {
        self.settle_commit(true)?;
        if self.rewind_owed {
            // The engines are ahead of the last commit until the rewind: committing now
            // would pair their state (a checkpoint) with offsets it does not belong to.
            return Ok(());
        }
        let policy = self.checkpoint_policy();
        let checkpoints =
            force_checkpoint && self.parts.values().any(|p| p.checkpoint_due(policy, true));
        if self.batch_events == 0 && !self.producer.is_open() && !checkpoints {
            return Ok(());
        }
        let batch = self.batch_partitions();
        let result = self.try_commit(consumer, force_checkpoint, pipelined);
        self.interval_started = Instant::now();
        self.now = self.interval_started;
        if result.is_ok() && self.producer.committing() {
            // Settled later (`poll_commit`, or before anything else commits).
            self.in_flight_batch = batch;
        } else {
            self.after_commit(&result, batch);
        }
        self.batch_events = 0;
        if let Err(e) = &result {
            self.note_fenced(e);
            // Whatever failed, nothing of this batch may commit later, and nothing at all
            // until the engines are back at the last commit.
            self.end_transaction();
            self.must_rewind();
        }
        result
    }

    /// A batch's commit ended: its partitions progress (a stuck one is active again), or
    /// its failure is counted against them.
    fn after_commit(&mut self, result: &Result<(), KafkaError>, batch: Vec<(i32, i64)>) {
        let outcome = if result.is_ok() { "commit" } else { "abort" };
        match result {
            Ok(()) => {
                for (p, last) in batch {
                    self.retries.progressed(p, last + 1);
                    if let Some(mut status) = self.shared.partitions.get_mut(&self.key(p)) {
                        if *status == PartitionStatus::Stuck && !self.retries.stuck(p) {
                            *status = PartitionStatus::Active;
                            drop(status);
                            self.shared.refresh_ready();
                        }
                    }
                }
            }
            Err(e) => self.retries.failed(e, batch),
        }
        self.shared
            .metrics
            .transactions
            .with_label_values(&[outcome])
            .inc();
    }

    /// Gives up the open batch: aborted now, and the engines go back to the last commit
    /// (state and offsets) before anything else is processed or committed.
    pub fn fail_batch(&mut self) {
        self.abort();
        self.must_rewind();
    }

    /// As `fail_batch`, for a failure of the batch's writes (its held verdicts, its
    /// markers): counted against the records it held, so one whose verdict the producer
    /// keeps refusing is processed alone and, in the end, given up.
    pub fn fail_writes(&mut self, e: &KafkaError) {
        let batch = self.batch_partitions();
        self.retries.failed(e, batch);
        self.fail_batch();
    }

    /// The partitions whose checkpoint this commit writes: every due one when forced (or
    /// with `checkpoint_max_ms = 0`), else the one due longest. A checkpoint stalls the
    /// stream thread while it serializes its sessions (1-3 MB, 15-40 ms at 1,000 events/s
    /// on the bench machine); partitions of one thread fall due together, so one per
    /// commit keeps each stall to one partition's (docs/service.md, "Commit cadence").
    fn checkpointed_now(&self, force: bool) -> Vec<i32> {
        let policy = self.checkpoint_policy();
        let due = self
            .parts
            .iter()
            .filter(|(_, part)| part.checkpoint_due(policy, force));
        if force || policy.max_ms == 0 {
            return due.map(|(&p, _)| p).collect();
        }
        due.min_by_key(|(_, part)| part.last_checkpoint())
            .map(|(&p, _)| p)
            .into_iter()
            .collect()
    }

    fn checkpoint_policy(&self) -> CheckpointPolicy {
        CheckpointPolicy {
            max_ms: self.cfg.kafka.checkpoint_max_ms,
            max_events: self.cfg.kafka.checkpoint_max_events.get(),
        }
    }

    fn try_commit<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        force_checkpoint: bool,
        pipelined: bool,
    ) -> Result<(), KafkaError> {
        self.producer.begin()?;
        let commit_started = Instant::now();
        let batch_age = self.interval_started.elapsed();
        let (events, mut states, mut state_bytes) = (self.batch_events, 0usize, 0usize);
        let mut offsets = TopicPartitionList::new();
        let topic = self.cfg.kafka.events_topic.clone();
        let state_topic = self.cfg.kafka.state_topic.clone();
        let tenant = self.tenant.clone();
        for (&p, part) in self.parts.iter_mut() {
            let (touched, removed) = part.collect_changes();
            let key = crate::service::shared::PartKey::new(&tenant, p);
            self.shared
                .session_counts
                .insert(key.clone(), part.engine.session_count());
            self.shared
                .refresh_summaries(&key, &part.engine, touched, removed);
        }
        // Every event of the batch is covered by a marker in its own transaction.
        self.write_all_markers()?;
        let checkpointed = self.checkpointed_now(force_checkpoint);
        for (&p, part) in self.parts.iter_mut() {
            if checkpointed.contains(&p) {
                let written = part.write_checkpoint(self.producer.producer(), &state_topic, p)?;
                states += written.records;
                state_bytes += written.bytes;
                self.shared
                    .metrics
                    .state_too_large
                    .inc_by(written.too_large as u64);
            }
            let stats = part.engine.stats();
            record_stat_deltas(&self.shared, &part.last_stats, &stats);
            part.last_stats = stats;
            if let Some(next) = part.next_offset.take() {
                offsets.add_partition_offset(&topic, p, Offset::Offset(next))?;
            }
        }
        self.update_session_gauge();
        let snapshots = commit_started.elapsed();
        let group = if self.eos() {
            consumer.group_metadata()
        } else {
            None
        };
        // Handed off: the commit thread commits it; its end is taken in by `settle_commit`.
        let handed_off = pipelined && self.eos();
        if handed_off {
            self.in_flight_since = Instant::now();
            self.producer.hand_off(offsets, group)?;
        } else {
            self.producer.commit(&offsets, group.as_ref())?;
            if !self.eos() && offsets.count() > 0 {
                // Every record of the batch is acknowledged: the offsets may move on.
                consumer.commit(&offsets, rdkafka::consumer::CommitMode::Sync)?;
            }
        }
        tracing::debug!(
            events,
            states,
            state_bytes,
            handed_off,
            batch_ms = batch_age.as_millis() as u64,
            snapshot_ms = snapshots.as_millis() as u64,
            commit_ms = (commit_started.elapsed() - snapshots).as_millis() as u64,
            "batch committed"
        );
        Ok(())
    }

    /// Drops uncommitted work (the partitions are gone or the transaction failed).
    pub fn abort(&mut self) {
        if self.producer.is_open() {
            self.shared
                .metrics
                .transactions
                .with_label_values(&["abort"])
                .inc();
        }
        self.end_transaction();
        self.batch_events = 0;
    }

    /// Ends the producer's open transaction, if any, without committing it (after the
    /// commit in flight, if any, has ended).
    fn end_transaction(&mut self) {
        self.drop_held();
        let _ = self.settle_commit(true);
        if let Err(e) = self.producer.abort() {
            self.note_fenced(&e);
        }
    }

    pub(super) fn note_fenced(&mut self, e: &KafkaError) {
        if Outcome::of(e) == Outcome::Fenced {
            self.must_stop(format!(
                "fenced by a newer instance with the same transactional id: {e}"
            ));
        }
    }
}

fn record_stat_deltas(shared: &Shared, before: &EngineStats, after: &EngineStats) {
    let m = &shared.metrics;
    let d = |a: u64, b: u64| b.saturating_sub(a);
    m.session_evictions
        .with_label_values(&["ttl"])
        .inc_by(d(before.evicted_ttl, after.evicted_ttl));
    m.session_evictions
        .with_label_values(&["capacity"])
        .inc_by(d(before.evicted_capacity, after.evicted_capacity));
    m.session_evictions
        .with_label_values(&["session_end"])
        .inc_by(d(before.sessions_ended, after.sessions_ended));
    m.escalations_given_up
        .inc_by(d(before.escalations_given_up, after.escalations_given_up));
}
