//! Writing judged-through markers: once the consumer has no event ready (a burst of events
//! shares one marker per partition), at the latest `kafka.judged_max_ms` after the first
//! event a marker owes, and always into the transaction of the verdicts it covers.

use super::Worker;
use crate::engine::event::format_ts;
use crate::service::judged::{self, Marker};
use crate::service::txn::send_record;
use rdkafka::error::KafkaError;
use std::time::{Duration, Instant};

impl Worker {
    /// Since when judged events of any partition wait for their marker.
    fn markers_owed_since(&self) -> Option<Instant> {
        self.parts
            .values()
            .filter_map(|p| p.judged.waiting_since())
            .min()
    }

    /// How long the next poll may wait: zero while markers are owed (the queue is only
    /// looked at), else until the open batch is due.
    pub fn poll_wait(&self) -> Duration {
        judged::poll_wait(self.markers_owed_since(), self.until_due())
    }

    /// True when owed markers must be written now, though events keep coming.
    pub fn markers_overdue(&self) -> bool {
        judged::overdue(
            self.markers_owed_since(),
            self.now,
            Duration::from_millis(self.cfg.kafka.judged_max_ms),
        )
    }

    /// Writes a marker to every partition whose judged events it owes, after their
    /// verdicts (same producer, same partition: the log keeps them in that order).
    pub fn write_markers(&mut self) -> Result<(), KafkaError> {
        if self.markers_owed_since().is_none() {
            return Ok(());
        }
        let emitted_at = format_ts(self.clock.ms_at(self.now));
        let m = &self.shared.metrics;
        for (&p, part) in self.parts.iter_mut() {
            let Some(through) = part.judged.take_due() else {
                continue;
            };
            self.producer.begin()?;
            let value = Marker::new(p, through, Some(emitted_at.clone())).to_json();
            send_record(
                self.producer.producer(),
                &self.cfg.kafka.verdicts_topic,
                p,
                None,
                Some(&value),
                Some(judged::headers()),
            )?;
            m.judged_markers.inc();
            m.judged_marker_bytes.inc_by(value.len() as u64);
        }
        Ok(())
    }
}
