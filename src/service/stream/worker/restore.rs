//! Taking partitions into service and out of it: the group's committed offsets (waiting
//! out a crashed owner's undecided transaction), the restore of a whole assignment, and
//! dropping a revoked partition.

use super::Worker;
use crate::engine::Engine;
use crate::service::shared::PartitionStatus;
use crate::service::state::partition::Part;
use crate::service::state::restore::{restore_assignment, Restored, RestoredAt};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

impl Worker {
    /// The group's committed offset of each partition (None: nothing committed yet).
    pub(in crate::service) fn committed<C: ConsumerContext>(
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
        // A destroyed broker handle is asked again for a shorter while: seen after a broker
        // restart, the consumer kept failing so for minutes, holding its partitions without
        // serving them; an exit lets a fresh process take over.
        let started = Instant::now();
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
                Err(e) if started.elapsed() < committed_limit(&e) => {
                    tracing::warn!(error = %e, "committed offsets not settled yet; asking again");
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Loads gained partitions' sessions before any of their events, all partitions of the
    /// assignment together (`state::restore_assignment`), and takes them into service.
    pub(in crate::service) fn restore_all(
        &mut self,
        committed: &BTreeMap<i32, Option<i64>>,
    ) -> Result<(), KafkaError> {
        if committed.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        let (cfg, eos) = (&self.cfg, self.eos());
        let restored = restore_assignment(
            &self.reader,
            &cfg.kafka.state_topic,
            &cfg.kafka.events_topic,
            self.tenant.as_deref(),
            committed,
            || {
                Engine::new(cfg.policy.clone(), cfg.engine.limits())
                    .track_changes()
                    .track_spending()
            },
            eos,
        )?;
        let ms = started.elapsed().as_millis() as u64;
        let replayed: u64 = restored.values().map(|r| r.replayed).sum();
        for (p, r) in restored {
            self.finish_restore(p, r, ms);
        }
        let took = started.elapsed().as_secs_f64();
        self.shared.metrics.state_restore.observe(took);
        self.update_session_gauge();
        tracing::info!(
            partitions = committed.len(),
            replayed,
            ms = started.elapsed().as_millis() as u64,
            "assignment restored"
        );
        Ok(())
    }

    /// Takes one restored partition into service.
    fn finish_restore(&mut self, partition: i32, restored: Restored, ms: u64) {
        let Restored {
            engine,
            committed,
            at,
            replayed,
            policy,
        } = restored;
        self.shared.metrics.replayed_events.inc_by(replayed);
        // Every session now held: restored from the checkpoint or created by the re-run.
        let key = self.key(partition);
        if self.shared.keeps_summaries() {
            self.shared
                .refresh_summaries(&key, &engine, engine.session_ids(), Vec::new());
        }
        let sessions = engine.session_count();
        self.shared.session_counts.insert(key.clone(), sessions);
        let mut part = Part::new(engine, committed, replayed as usize);
        if let Some(change) = policy {
            part.policy_seq = change.seq;
            self.shared.policy.partitions.insert(
                key.clone(),
                (change.seq, change.version, change.from_offset),
            );
        }
        self.parts.insert(partition, part);
        let checkpoint = match at {
            RestoredAt::Offset(o) => o.to_string(),
            RestoredAt::Fresh => "none".into(),
            RestoredAt::Current => "current".into(),
        };
        let status = if self.retries.stuck(partition) {
            PartitionStatus::Stuck
        } else {
            PartitionStatus::Active
        };
        self.shared.partitions.insert(key.clone(), status);
        // The lag series exists from the assignment on; statistics update it every 5 s.
        self.shared
            .metrics
            .consumer_lag
            .with_label_values(&[&key.to_string()])
            .set(0);
        tracing::info!(
            partition = %key,
            sessions,
            checkpoint,
            committed = committed.unwrap_or(-1),
            replayed,
            ms,
            "partition restored"
        );
    }

    /// `partitions` are assigned and not yet served: `/readyz` says so until each restore.
    pub(in crate::service) fn mark_restoring(&self, partitions: &[i32]) {
        for &p in partitions {
            self.shared
                .partitions
                .insert(self.key(p), PartitionStatus::Restoring);
        }
        self.shared.refresh_ready();
    }

    pub(in crate::service) fn drop_partition(&mut self, partition: i32) {
        let key = self.key(partition);
        self.parts.remove(&partition);
        self.shared.policy.partitions.remove(&key);
        self.retries.forget(partition);
        self.shared.partitions.remove(&key);
        self.shared.sessions.retain(|_, (p, _)| *p != key);
        self.shared.session_counts.remove(&key);
        self.update_session_gauge();
    }
}

/// How long a gained partition may wait for its committed offset to settle: a crashed
/// owner's open transaction is aborted after `transaction.timeout.ms` (30 s) plus the
/// broker's clean-up interval (10 s by default); librdkafka reports that wait as unstable
/// offsets or as timeouts. A destroyed broker handle is not such a wait: 20 s.
fn committed_limit(e: &KafkaError) -> Duration {
    use rdkafka::types::RDKafkaErrorCode::BrokerDestroy;
    match e.rdkafka_error_code() {
        Some(BrokerDestroy) => Duration::from_secs(20),
        _ => Duration::from_secs(120),
    }
}
