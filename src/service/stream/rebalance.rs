//! The consumer's context: rebalance callbacks commit before partitions leave and restore
//! gained ones before their first event; statistics feed the lag gauge.

use super::worker::Worker;
use crate::service::shared::Shared;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::statistics::Statistics;
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The consumer's context: rebalance callbacks and statistics reach the worker through it.
pub struct GuardContext {
    pub worker: Mutex<Worker>,
    shared: Arc<Shared>,
    events_topic: String,
    /// This thread's consumer has had its first assignment.
    joined: AtomicBool,
    /// The thread has left its loop: callbacks served while the consumer closes only let
    /// partitions go (a restore now would ask a handle being destroyed, for 20 s).
    closing: AtomicBool,
}

impl GuardContext {
    pub fn new(worker: Worker, shared: Arc<Shared>, events_topic: String) -> Self {
        GuardContext {
            worker: Mutex::new(worker),
            shared,
            events_topic,
            joined: AtomicBool::new(false),
            closing: AtomicBool::new(false),
        }
    }

    /// The thread is done with its consumer: from now on callbacks only let partitions go.
    pub fn close(&self) {
        self.closing.store(true, Ordering::Release);
    }

    fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Worker> {
        self.worker.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ClientContext for GuardContext {
    fn stats(&self, stats: Statistics) {
        if let Some(topic) = stats.topics.get(&self.events_topic) {
            // Never wait for the worker here: statistics are served from `poll`, and a
            // callback that blocked on a lock its own thread holds would hang the thread.
            // A busy worker only skips one update (they come every 5 s).
            let Ok(w) = self.worker.try_lock() else {
                return;
            };
            for (p, s) in &topic.partitions {
                // Only this thread's partitions: the other threads report their own.
                if *p >= 0 && w.owns(*p) {
                    self.shared
                        .metrics
                        .consumer_lag
                        .with_label_values(&[&w.key(*p).to_string()])
                        .set(lag(s));
                }
            }
        }
    }
}

/// How far this thread is behind a partition's end: its last stable offset (all a
/// read_committed consumer may read) less the next offset handed to the guard. librdkafka's
/// own `consumer_lag` counts from the consumer's committed offset, which the transactional
/// commits (sent by the producer) never update: after a restart it grew on a healthy guard
/// and `LoopguardConsumerLagGrowing` fired. Before the guard has read anything of the
/// partition, librdkafka's figure (from the offset committed when it was assigned).
fn lag(s: &rdkafka::statistics::Partition) -> i64 {
    let end = if s.ls_offset >= 0 {
        s.ls_offset
    } else {
        s.hi_offset
    };
    if s.app_offset >= 0 && end >= 0 {
        (end - s.app_offset).max(0)
    } else {
        s.consumer_lag.max(0)
    }
}

impl ConsumerContext for GuardContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let mut w = self.lock();
            self.shared
                .metrics
                .rebalances
                .with_label_values(&["revoke"])
                .inc();
            if self.is_closing() {
                w.abort();
            } else if consumer.assignment_lost() {
                tracing::warn!("assignment lost: dropping uncommitted work");
                w.fail_batch();
            } else if let Err(e) = w.commit_final(consumer) {
                // The batch is aborted: the kept partitions go back to their last commit.
                tracing::error!(error = %e, "commit before revocation failed; rewinding");
            }
            for elem in tpl.elements() {
                w.drop_partition(elem.partition());
                self.shared
                    .metrics
                    .consumer_lag
                    .remove_label_values(&[&w.key(elem.partition()).to_string()])
                    .ok();
            }
            self.shared.refresh_ready();
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if self.is_closing() {
            return;
        }
        if let Rebalance::Assign(tpl) = rebalance {
            self.shared
                .metrics
                .rebalances
                .with_label_values(&["assign"])
                .inc();
            let mut w = self.lock();
            // Commit the open batch first: a restore can wait for a crashed owner's
            // transaction to time out, and ours must not time out meanwhile.
            if let Err(e) = w.commit(consumer) {
                tracing::error!(error = %e, "commit before restore failed; rewinding");
            }
            let parts: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
            w.mark_restoring(&parts);
            let restored = w
                .committed(consumer, &parts)
                .and_then(|committed| w.restore_all(&committed));
            if let Err(e) = restored {
                // Most often the broker went away mid-restore. The partitions stay assigned
                // but not held; the loop's rewind restores every assigned partition and
                // seeks it back, again until the broker answers. A fenced producer or a
                // destroyed broker handle ends the thread there (`rewind_bound::rewind_retry`).
                tracing::warn!(partitions = ?parts, error = %e, "restore failed; the loop retries it");
                w.must_rewind();
            }
        }
        if !self.joined.swap(true, Ordering::AcqRel) {
            self.shared.thread_joined();
        }
        self.shared.refresh_ready();
    }
}

#[cfg(test)]
mod tests {
    use super::lag;
    use rdkafka::statistics::Partition;

    #[test]
    fn lag_counts_from_what_the_guard_read_not_from_the_consumers_own_commit() {
        // Offsets committed by the transactional producer leave librdkafka's
        // `committed_offset` where the assignment found it, and its `consumer_lag` grows.
        let p = Partition {
            ls_offset: 5_000,
            hi_offset: 5_010,
            app_offset: 4_990,
            committed_offset: 100,
            consumer_lag: 4_900,
            ..Partition::default()
        };
        assert_eq!(
            lag(&p),
            10,
            "to the last stable offset, from the next one read"
        );
        let unread = Partition {
            ls_offset: 5_000,
            app_offset: -1001,
            consumer_lag: 30,
            ..Partition::default()
        };
        assert_eq!(lag(&unread), 30, "nothing read yet: librdkafka's figure");
    }
}
