//! The consumer side of the service: decode -> engine -> encode, one engine per owned
//! partition, and the batch commit that makes verdicts, state and offsets one transaction.
//! The rebalance callbacks that drive it are in `rebalance.rs`.

mod restore;
mod rewind;

pub use rewind::rewind_gives_up;

use super::admin::{PartitionStatus, Shared};
use super::dlq::{read_event, DeadLetter, Rejected, Source};
use super::partition::{CheckpointPolicy, Part};
use super::retry::Retries;
use super::state::StateReader;
use super::txn::{classify, send, send_dead_letter, Class, TxnProducer};
use crate::config::{Config, Delivery};
use crate::engine::event::format_ts;
use crate::engine::EngineStats;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything the consumer thread mutates; reached from the loop and from rebalance callbacks.
pub struct Worker {
    cfg: Arc<Config>,
    shared: Arc<Shared>,
    producer: TxnProducer,
    reader: StateReader,
    parts: BTreeMap<i32, Part>,
    batch_events: usize,
    /// When the last batch was committed or handed off: the commit interval runs from here.
    interval_started: Instant,
    /// The latest time read (after each event, or `tick` when the consumer had none): the
    /// batch's due time is judged on it rather than on a clock read of its own.
    now: Instant,
    clock: WallClock,
    /// The partitions of the batch whose commit is in flight, with the last offset of each.
    in_flight_batch: Vec<(i32, i64)>,
    in_flight_since: Instant,
    verdicts: Vec<crate::engine::verdict::Verdict>,
    /// A fatal error seen inside a callback, for the loop to act on.
    pub fatal: Option<String>,
    /// A batch failed: the engines are ahead of the last commit. Nothing commits until the
    /// loop has rewound them (`rewind`).
    pub needs_rewind: bool,
    /// Failed attempts per partition, records to process alone or to give up.
    retries: Retries,
    /// The largest dead letter written.
    dlq_limit: usize,
}

impl Worker {
    pub fn new(
        cfg: Arc<Config>,
        shared: Arc<Shared>,
        producer: TxnProducer,
        reader: StateReader,
    ) -> Self {
        Worker {
            shared,
            producer,
            reader,
            parts: BTreeMap::new(),
            batch_events: 0,
            interval_started: Instant::now(),
            now: Instant::now(),
            clock: WallClock::new(),
            in_flight_batch: Vec::new(),
            in_flight_since: Instant::now(),
            verdicts: Vec::new(),
            fatal: None,
            needs_rewind: false,
            retries: Retries::new(cfg.kafka.max_record_retries.get()),
            dlq_limit: cfg.dlq_limit(),
            cfg,
        }
    }

    fn eos(&self) -> bool {
        self.cfg.kafka.delivery == Delivery::ExactlyOnce
    }

    fn update_session_gauge(&self) {
        self.shared.refresh_session_gauge();
    }

    /// True when this thread owns `partition`.
    pub fn owns(&self, partition: i32) -> bool {
        self.parts.contains_key(&partition)
    }

    fn begin(&mut self) -> Result<(), KafkaError> {
        self.producer.begin()
    }

    /// Handles one consumed event: engine, then verdicts (or a dead letter) into the batch.
    /// A record that failed before is processed alone, in its own transaction, and one
    /// that failed `max_record_retries` times is given up (dead-lettered minimally).
    pub fn process<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        msg: &BorrowedMessage<'_>,
    ) -> Result<(), KafkaError> {
        let partition = msg.partition();
        if !self.parts.contains_key(&partition) {
            // A restore can wait for a crashed owner's transaction: never with ours open.
            self.commit(consumer)?;
            let committed = self.committed(consumer, &[partition])?;
            self.restore_all(&committed)?;
        }
        if self.retries.isolated(partition, msg.offset()) {
            // Commit what came before, so a failure from here on is this record's own.
            self.commit(consumer)?;
            self.retries.alone(partition, msg.offset());
            if let Err(e) = self.process_record(msg) {
                self.retries.failed(&e, []);
                return Err(e);
            }
            return self.commit(consumer);
        }
        if let Err(e) = self.process_record(msg) {
            let batch = self.batch_partitions();
            self.retries
                .failed(&e, batch.into_iter().chain([(partition, msg.offset())]));
            return Err(e);
        }
        Ok(())
    }

    /// Partitions with records in the open batch, each with the last offset it holds.
    fn batch_partitions(&self) -> Vec<(i32, i64)> {
        self.parts
            .iter()
            .filter_map(|(&p, part)| part.next_offset.map(|next| (p, next - 1)))
            .collect()
    }

    fn process_record(&mut self, msg: &BorrowedMessage<'_>) -> Result<(), KafkaError> {
        let partition = msg.partition();
        self.begin()?;
        let m = &self.shared.metrics;
        let given_up = self.retries.take_given_up(partition, msg.offset());
        let decoded = read_event(msg.key(), msg.payload());
        let judged = !given_up && decoded.is_ok();
        match decoded {
            _ if given_up => {
                m.dead_letter.with_label_values(&["retry_limit"]).inc();
                let rejected = Rejected {
                    reason: "retry_limit",
                    detail: format!(
                        "given up after {} failed retries; the record stays at its source offset",
                        self.cfg.kafka.max_record_retries
                    ),
                };
                tracing::error!(
                    partition,
                    offset = msg.offset(),
                    "record given up after repeated failures: dead-lettered minimally"
                );
                self.send_dead_letter(&DeadLetter::minimal(source(msg), &rejected))?;
                // Its sessions' state goes on as a restore's re-run will have it; its
                // verdicts, if any, are not written.
                if let (Ok(event), Some(part)) = (decoded, self.parts.get_mut(&partition)) {
                    self.verdicts.clear();
                    part.engine.handle_event(event, &mut self.verdicts);
                    self.verdicts.clear();
                }
            }
            Err(rejected) => {
                m.events_malformed
                    .with_label_values(&[rejected.reason])
                    .inc();
                m.dead_letter.with_label_values(&[rejected.reason]).inc();
                self.dead_letter(msg, &rejected)?;
            }
            Ok(event) => {
                m.on_consumed(event.body.kind());
                let event_ms = event.meta.ts_ms;
                let session = event.meta.session_id.clone();
                let part = self.parts.get_mut(&partition).expect("restored above");
                let started = Instant::now();
                self.verdicts.clear();
                part.engine.handle_event(event, &mut self.verdicts);
                self.now = Instant::now();
                m.event_processing
                    .observe(self.now.duration_since(started).as_secs_f64());
                let now_ms = self.clock.ms_at(self.now);
                if event_ms - now_ms > CLOCK_AHEAD_MS {
                    m.events_ahead_of_clock.inc();
                }
                let mut verdicts = std::mem::take(&mut self.verdicts);
                for mut v in verdicts.drain(..) {
                    v.emitted_at = Some(format_ts(now_ms));
                    let payload = serde_json::to_vec(&v).unwrap_or_default();
                    send(
                        self.producer.producer(),
                        &self.cfg.kafka.verdicts_topic,
                        partition,
                        session.as_bytes(),
                        Some(&payload),
                        None,
                    )?;
                    m.on_verdict(&v);
                    m.event_to_verdict
                        .observe(((now_ms - event_ms).max(0) as f64) / 1000.0);
                }
                self.verdicts = verdicts;
            }
        }
        if let Some(part) = self.parts.get_mut(&partition) {
            part.processed(msg.offset());
        }
        if !judged {
            // Dead letters and given-up records did not read the clock above.
            self.now = Instant::now();
        }
        self.batch_events += 1;
        Ok(())
    }

    /// Writes `msg`'s dead letter, bounded to fit the topic; when the producer refuses it
    /// anyway, a minimal one instead.
    fn dead_letter(
        &self,
        msg: &BorrowedMessage<'_>,
        rejected: &Rejected,
    ) -> Result<(), KafkaError> {
        let headers: Vec<(&str, Option<&[u8]>)> = msg
            .headers()
            .map(|h| h.iter().map(|h| (h.key, h.value)).collect())
            .unwrap_or_default();
        let letter = DeadLetter::new(
            source(msg),
            msg.key(),
            msg.payload(),
            &headers,
            rejected,
            self.dlq_limit,
        );
        if let Err(e) = self.send_dead_letter(&letter) {
            tracing::error!(
                error = %e,
                partition = msg.partition(),
                offset = msg.offset(),
                bytes = letter.size(),
                "dead letter refused: writing a minimal one"
            );
            self.send_dead_letter(&DeadLetter::minimal_marked(source(msg), rejected))?;
        }
        Ok(())
    }

    fn send_dead_letter(&self, letter: &DeadLetter<'_>) -> Result<(), KafkaError> {
        send_dead_letter(self.producer.producer(), &self.cfg.kafka.dlq_topic, letter)
    }

    /// True when the batch should be committed: `batch_max_events` events, or
    /// `batch_max_ms` since the last commit (an event after a quiet spell commits at once).
    pub fn due(&self) -> bool {
        self.batch_events > 0
            && (self.batch_events >= self.cfg.kafka.batch_max_events.get()
                || self.now.saturating_duration_since(self.interval_started)
                    >= Duration::from_millis(self.cfg.kafka.batch_max_ms))
    }

    /// Reads the clock: the consumer returned without an event.
    pub fn tick(&mut self) {
        self.now = Instant::now();
    }

    /// How long the consumer may wait for the next event: until the open batch is due, at
    /// most 100 ms (stop signals are checked between polls).
    pub fn until_due(&self) -> Duration {
        let most = Duration::from_millis(self.cfg.kafka.batch_max_ms.clamp(1, 100));
        if self.batch_events == 0 {
            return most;
        }
        let due = Duration::from_millis(self.cfg.kafka.batch_max_ms);
        due.saturating_sub(self.now.saturating_duration_since(self.interval_started))
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
            if let Err(e) = self.producer.abort() {
                self.note_fenced(&e);
            }
            self.batch_events = 0;
            self.needs_rewind = true;
        }
        result
    }

    /// Commits the batch's verdicts and offsets, with a checkpoint of the partitions where
    /// one is due, in one transaction. On failure nothing of the batch commits (the caller
    /// rewinds); a producer fenced by its successor is recorded in `fatal`.
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
        if self.needs_rewind {
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
            self.needs_rewind = true;
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
                    if let Some(mut status) = self.shared.partitions.get_mut(&p) {
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
        self.needs_rewind = true;
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
        self.begin()?;
        let commit_started = Instant::now();
        let batch_age = self.interval_started.elapsed();
        let (events, mut states, mut state_bytes) = (self.batch_events, 0usize, 0usize);
        let mut offsets = TopicPartitionList::new();
        let topic = self.cfg.kafka.events_topic.clone();
        let state_topic = self.cfg.kafka.state_topic.clone();
        for (&p, part) in self.parts.iter_mut() {
            let (touched, removed) = part.collect_changes();
            for id in touched {
                if let Some(summary) = part.engine.summary(&id) {
                    self.shared.sessions.insert(id, (p, summary));
                }
            }
            for id in removed {
                self.shared.sessions.remove(&id);
            }
        }
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
        let _ = self.settle_commit(true);
        if let Err(e) = self.producer.abort() {
            self.note_fenced(&e);
        }
    }

    fn note_fenced(&mut self, e: &KafkaError) {
        if classify(e) == Class::Fenced && self.fatal.is_none() {
            self.fatal = Some(format!(
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

/// An event stamped further ahead of the guard's clock than this is counted: its runtime's
/// clock is off, and it moves its partition's event time (docs/service.md).
const CLOCK_AHEAD_MS: i64 = 5 * 60 * 1000;

fn source<'a>(msg: &'a BorrowedMessage<'_>) -> Source<'a> {
    Source {
        topic: msg.topic(),
        partition: msg.partition(),
        offset: msg.offset(),
    }
}

/// The guard's own wall clock, for `emitted_at` and latency only (never for detection):
/// derived from the monotonic time already read for each event, read again at most once
/// a second (so a stepped or slewed system clock is followed within a second).
struct WallClock {
    anchor: Instant,
    anchor_ms: i64,
}

impl WallClock {
    const REREAD: Duration = Duration::from_secs(1);

    fn new() -> Self {
        WallClock {
            anchor: Instant::now(),
            anchor_ms: system_ms(),
        }
    }

    /// The wall clock in ms at `now`.
    fn ms_at(&mut self, now: Instant) -> i64 {
        let since = now.saturating_duration_since(self.anchor);
        if since >= Self::REREAD {
            *self = WallClock::new();
            return self.anchor_ms;
        }
        self.anchor_ms + since.as_millis() as i64
    }
}

fn system_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
