//! The consumer side of the service: decode -> engine -> encode, one engine per owned
//! partition, and the batch commit that makes verdicts, state and offsets one transaction.
//! The rebalance callbacks that drive it are in `rebalance.rs`.

use super::admin::{PartitionStatus, Shared};
use super::partition::{CheckpointPolicy, Part};
use super::state::{replay_events, restore_partition, RestoredAt, StateReader};
use super::txn::{classify, send, Class, TxnProducer};
use crate::config::{Config, Delivery};
use crate::engine::event::{format_ts, Event, EVENT_TYPES};
use crate::engine::{Engine, EngineStats};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
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
    batch_started: Instant,
    verdicts: Vec<crate::engine::verdict::Verdict>,
    /// A fatal error seen inside a callback, for the loop to act on.
    pub fatal: Option<String>,
    /// A batch failed: the engines are ahead of the last commit. Nothing commits until the
    /// loop has rewound them (`rewind`).
    pub needs_rewind: bool,
}

impl Worker {
    pub fn new(
        cfg: Arc<Config>,
        shared: Arc<Shared>,
        producer: TxnProducer,
        reader: StateReader,
    ) -> Self {
        Worker {
            cfg,
            shared,
            producer,
            reader,
            parts: BTreeMap::new(),
            batch_events: 0,
            batch_started: Instant::now(),
            verdicts: Vec::new(),
            fatal: None,
            needs_rewind: false,
        }
    }

    fn eos(&self) -> bool {
        self.cfg.kafka.delivery == Delivery::ExactlyOnce
    }

    /// The group's committed offset of each partition (None: nothing committed yet).
    pub(super) fn committed<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        partitions: &[i32],
    ) -> Result<BTreeMap<i32, Option<i64>>, KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for p in partitions {
            tpl.add_partition(&self.cfg.kafka.events_topic, *p);
        }
        // While a crashed owner's transaction is undecided its offsets are "unstable": the
        // broker answers UNSTABLE_OFFSET_COMMIT per partition, and librdkafka gives up after
        // a few retries. Taking that as "nothing committed" would skip the re-run of the
        // events after the checkpoint, so ask again until every partition has an answer.
        let deadline = Instant::now() + COMMITTED_LIMIT;
        loop {
            let answer = consumer
                .committed_offsets(tpl.clone(), Duration::from_secs(10))
                .and_then(
                    |list| match list.elements().iter().find_map(|e| e.error().err()) {
                        Some(e) => Err(e),
                        None => Ok(list),
                    },
                );
            match answer {
                Ok(list) => {
                    return Ok(list
                        .elements()
                        .iter()
                        .map(|e| match e.offset() {
                            Offset::Offset(o) => (e.partition(), Some(o)),
                            _ => (e.partition(), None),
                        })
                        .collect())
                }
                Err(e) if Instant::now() < deadline => {
                    tracing::warn!(error = %e, "committed offsets not settled yet; asking again");
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub(super) fn restore_all(
        &mut self,
        committed: &BTreeMap<i32, Option<i64>>,
    ) -> Result<(), KafkaError> {
        for (&p, &offset) in committed {
            self.restore(p, offset)?;
        }
        Ok(())
    }

    /// Loads a gained partition's sessions before any of its events: the last checkpoint
    /// from the state topic, then the events from the checkpoint to the committed offset
    /// re-run through the engine (their verdicts were committed by the previous owner).
    fn restore(&mut self, partition: i32, committed: Option<i64>) -> Result<(), KafkaError> {
        let started = Instant::now();
        let engine = Engine::new(self.cfg.policy.clone(), self.cfg.engine.limits()).track_changes();
        let (mut engine, at) =
            restore_partition(&self.reader, &self.cfg.kafka.state_topic, partition, engine)?;
        engine.take_changes();
        if let (RestoredAt::Offset(c), Some(o), true) = (at, committed, self.eos()) {
            if c > o {
                // Exactly-once commits a checkpoint with its offset; this would be a bug.
                tracing::error!(
                    partition,
                    checkpoint = c,
                    committed = o,
                    "checkpoint ahead of the committed offset"
                );
            }
        }
        let from = match (at, committed) {
            (RestoredAt::Offset(c), Some(o)) if o > c => Some(Offset::Offset(c)),
            (RestoredAt::Fresh, Some(o)) if o > 0 => Some(Offset::Beginning),
            _ => None,
        };
        let replayed = match (from, committed) {
            (Some(from), Some(until)) => replay_events(
                &self.reader,
                &self.cfg.kafka.events_topic,
                partition,
                from,
                until,
                &mut engine,
            )?,
            _ => 0,
        };
        self.shared.metrics.replayed_events.inc_by(replayed);
        // Every session now held: restored from the checkpoint or created by the re-run.
        for id in engine.session_ids() {
            if let Some(summary) = engine.summary(&id) {
                self.shared.sessions.insert(id, (partition, summary));
            }
        }
        self.parts
            .insert(partition, Part::new(engine, committed, replayed as usize));
        let checkpoint = match at {
            RestoredAt::Offset(o) => o.to_string(),
            RestoredAt::Fresh => "none".into(),
            RestoredAt::Current => "current".into(),
        };
        self.shared
            .partitions
            .insert(partition, PartitionStatus::Active);
        // The lag series exists from the assignment on; statistics update it every 5 s.
        self.shared
            .metrics
            .consumer_lag
            .with_label_values(&[&partition.to_string()])
            .set(0);
        self.shared
            .metrics
            .state_restore
            .observe(started.elapsed().as_secs_f64());
        self.update_session_gauge();
        tracing::info!(
            partition,
            sessions = self.parts[&partition].engine.session_count(),
            checkpoint,
            committed = committed.unwrap_or(-1),
            replayed,
            ms = started.elapsed().as_millis() as u64,
            "partition restored"
        );
        Ok(())
    }

    pub(super) fn drop_partition(&mut self, partition: i32) {
        self.parts.remove(&partition);
        self.shared.partitions.remove(&partition);
        self.shared.sessions.retain(|_, (p, _)| *p != partition);
        self.update_session_gauge();
    }

    fn update_session_gauge(&self) {
        let n: usize = self.parts.values().map(|p| p.engine.session_count()).sum();
        self.shared.metrics.active_sessions.set(n as i64);
    }

    fn begin(&mut self) -> Result<(), KafkaError> {
        self.producer.begin()?;
        if self.batch_events == 0 {
            self.batch_started = Instant::now();
        }
        Ok(())
    }

    /// Handles one consumed event: engine, then verdicts (or a dead letter) into the batch.
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
        self.begin()?;
        let m = &self.shared.metrics;
        let decoded = match msg.payload() {
            None => Err((
                "empty_payload".to_string(),
                "event has no value".to_string(),
            )),
            Some(bytes) => Event::decode_keyed(bytes, msg.key())
                .map_err(|e| (e.reason().to_string(), e.to_string())),
        };
        match decoded {
            Err((reason, detail)) => {
                m.events_malformed.with_label_values(&[&reason]).inc();
                m.dead_letter.with_label_values(&[&reason]).inc();
                self.dead_letter(msg, &reason, &detail)?;
            }
            Ok(event) => {
                let kind = event.body.kind();
                let label = if EVENT_TYPES.contains(&kind) {
                    kind
                } else {
                    "unknown"
                };
                m.events_consumed.with_label_values(&[label]).inc();
                let event_ms = event.meta.ts_ms;
                let session = event.meta.session_id.clone();
                let part = self.parts.get_mut(&partition).expect("restored above");
                let started = Instant::now();
                self.verdicts.clear();
                part.engine.handle_event(event, &mut self.verdicts);
                m.event_processing.observe(started.elapsed().as_secs_f64());
                let now_ms = wall_clock_ms();
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
        self.batch_events += 1;
        Ok(())
    }

    fn dead_letter(
        &self,
        msg: &BorrowedMessage<'_>,
        reason: &str,
        detail: &str,
    ) -> Result<(), KafkaError> {
        let partition = msg.partition().to_string();
        let offset = msg.offset().to_string();
        let mut headers = OwnedHeaders::new();
        if let Some(original) = msg.headers() {
            for h in original.iter() {
                headers = headers.insert(Header {
                    key: h.key,
                    value: h.value,
                });
            }
        }
        let headers = headers
            .insert(Header {
                key: "loopguard-error-reason",
                value: Some(reason),
            })
            .insert(Header {
                key: "loopguard-error",
                value: Some(detail),
            })
            .insert(Header {
                key: "loopguard-source-topic",
                value: Some(msg.topic()),
            })
            .insert(Header {
                key: "loopguard-source-partition",
                value: Some(&partition),
            })
            .insert(Header {
                key: "loopguard-source-offset",
                value: Some(&offset),
            });
        let key = msg.key().unwrap_or_default();
        // A record near the broker's size limit cannot be copied whole with our headers:
        // keep its head and say so; the original stays at the source offset.
        let mut payload = msg.payload();
        let mut headers = headers;
        if let Some(p) = payload.filter(|p| p.len() > DLQ_MAX_PAYLOAD) {
            let original = p.len().to_string();
            headers = headers.insert(Header {
                key: "loopguard-payload-truncated",
                value: Some(&original),
            });
            payload = Some(&p[..DLQ_TRUNCATED_PAYLOAD]);
        }
        send(
            self.producer.producer(),
            &self.cfg.kafka.dlq_topic,
            -1,
            key,
            payload,
            Some(headers),
        )
    }

    /// True when the batch should be committed.
    pub fn due(&self) -> bool {
        self.batch_events > 0
            && (self.batch_events >= self.cfg.kafka.batch_max_events.get()
                || self.batch_started.elapsed()
                    >= Duration::from_millis(self.cfg.kafka.batch_max_ms))
    }

    /// Commits the batch's verdicts and offsets, with a checkpoint of the partitions where
    /// one is due, in one transaction. On failure nothing of the batch commits (the caller
    /// rewinds); a producer fenced by its successor is recorded in `fatal`.
    pub fn commit<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), KafkaError> {
        self.commit_with(consumer, false)
    }

    /// As `commit`, with a checkpoint of every partition that moved since its last one:
    /// before partitions leave and at shutdown, so their next owner re-runs nothing.
    pub fn commit_final<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), KafkaError> {
        self.commit_with(consumer, true)
    }

    fn commit_with<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        force_checkpoint: bool,
    ) -> Result<(), KafkaError> {
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
        let result = self.try_commit(consumer, force_checkpoint);
        let outcome = if result.is_ok() { "commit" } else { "abort" };
        self.shared
            .metrics
            .transactions
            .with_label_values(&[outcome])
            .inc();
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

    /// Gives up the open batch: aborted now, and the engines go back to the last commit
    /// (state and offsets) before anything else is processed or committed.
    pub fn fail_batch(&mut self) {
        self.abort();
        self.needs_rewind = true;
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
    ) -> Result<(), KafkaError> {
        self.begin()?;
        let commit_started = Instant::now();
        let batch_age = self.batch_started.elapsed();
        let (events, mut states, mut state_bytes) = (self.batch_events, 0usize, 0usize);
        let mut offsets = TopicPartitionList::new();
        let topic = self.cfg.kafka.events_topic.clone();
        let state_topic = self.cfg.kafka.state_topic.clone();
        let policy = self.checkpoint_policy();
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
            if part.checkpoint_due(policy, force_checkpoint) {
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
        self.producer.commit(&offsets, group.as_ref())?;
        if !self.eos() && offsets.count() > 0 {
            // Every record of the batch is acknowledged: the offsets may move on.
            consumer.commit(&offsets, rdkafka::consumer::CommitMode::Sync)?;
        }
        tracing::debug!(
            events,
            states,
            state_bytes,
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

    /// Ends the producer's open transaction, if any, without committing it.
    fn end_transaction(&mut self) {
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

    /// After a failed commit: reload every owned partition from the committed state and
    /// rewind the consumer to the committed offsets, so nothing is lost or doubled.
    pub fn rewind<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), KafkaError> {
        self.abort();
        let owned: Vec<i32> = self.parts.keys().copied().collect();
        let committed = self.committed(consumer, &owned)?;
        for p in &owned {
            self.parts.remove(p);
        }
        self.restore_all(&committed)?;
        let mut seek = TopicPartitionList::new();
        for (&p, offset) in &committed {
            let offset = offset.map_or(Offset::Beginning, Offset::Offset);
            seek.add_partition_offset(&self.cfg.kafka.events_topic, p, offset)?;
        }
        consumer.seek_partitions(seek, Duration::from_secs(10))?;
        Ok(())
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

/// How long a gained partition may wait for its committed offset to settle: a crashed
/// owner's open transaction is aborted after `transaction.timeout.ms` (30 s) plus the
/// broker's clean-up interval (10 s by default).
const COMMITTED_LIMIT: Duration = Duration::from_secs(120);

/// An event stamped further ahead of the guard's clock than this is counted: its runtime's
/// clock is off, and it moves its partition's event time (docs/service.md).
const CLOCK_AHEAD_MS: i64 = 5 * 60 * 1000;

/// Dead letters larger than this are cut to `DLQ_TRUNCATED_PAYLOAD` bytes.
const DLQ_MAX_PAYLOAD: usize = 900_000;
const DLQ_TRUNCATED_PAYLOAD: usize = 64 * 1024;

/// The guard's own clock, for `emitted_at` and latency only (never for detection).
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
