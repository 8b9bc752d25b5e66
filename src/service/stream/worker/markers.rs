//! Writing judged-through markers, always into the transaction of the verdicts they cover.
//! A burst of events a runtime may be waiting on (a tool call or result, a dead letter, or
//! any event with a verdict) gets its markers once the consumer has no event ready (one
//! marker per partition per burst), at the latest `kafka.judged_max_ms` after its first
//! such event; the other events (reasoning and content chunks, turn ends, ...) are covered
//! by the markers every commit writes, within `kafka.batch_max_ms` (docs/decisions.md (go)).
//!
//! A burst's verdicts are held until its markers are written and go to the producer with
//! them: under a backlog the producer then sends one request per `judged_max_ms` instead
//! of one per `linger.ms` (docs/benchmarks.md, "The guard's own cost"); when the consumer
//! has nothing more ready, at once, as before.

use super::Worker;
use crate::engine::event::format_ts;
use crate::service::records::marker::{self as judged, Marker};
use crate::service::txn::send_record;
use rdkafka::error::KafkaError;
use std::time::Duration;

impl Worker {
    /// How long the next poll may wait: zero while markers are owed (the queue is only
    /// looked at: an empty one means the burst is over), else until the open batch is due.
    pub fn poll_wait(&self) -> Duration {
        if self.markers_owed_since.is_some() {
            Duration::ZERO
        } else {
            self.until_due()
        }
    }

    /// True when owed markers must be written now, though events keep coming: after
    /// `judged_max_ms`, or the backlog's share of its wait (`pace.rs`).
    pub fn markers_overdue(&self) -> bool {
        let max = self.pace.markers(&self.cfg.kafka);
        self.markers_owed_since
            .is_some_and(|t| self.now.saturating_duration_since(t) >= max)
    }

    /// When a burst holds an awaited event: its held verdicts and the markers
    /// (`write_all_markers`); else nothing until the commit.
    pub fn write_markers(&mut self) -> Result<(), KafkaError> {
        if self.markers_owed_since.is_none() {
            return self.write_held();
        }
        self.write_all_markers()
    }

    /// Writes a marker to every partition with judged events no marker covers yet, after
    /// their verdicts (same producer, same partition: the log keeps them in that order).
    /// Every commit does, so every event is covered in its own transaction.
    pub fn write_all_markers(&mut self) -> Result<(), KafkaError> {
        self.write_held()?;
        self.markers_owed_since = None;
        let emitted_at = format_ts(self.clock.ms_at(self.now));
        let m = &self.shared.metrics;
        for (&p, part) in self.parts.iter_mut() {
            let Some((through, topics)) = part.judged.take_due() else {
                continue;
            };
            self.producer.begin()?;
            let value = Marker::new(p, through, Some(emitted_at.clone())).to_json();
            // To each verdicts topic whose events it covers (one, without tenant topics).
            for topic in &topics {
                send_record(
                    self.producer.producer(),
                    topic,
                    p,
                    None,
                    Some(&value),
                    Some(judged::headers()),
                )?;
                m.judged_markers.inc();
                m.judged_marker_bytes.inc_by(value.len() as u64);
            }
        }
        Ok(())
    }

    /// Gives the held verdicts to the producer, in the order they were judged.
    fn write_held(&mut self) -> Result<(), KafkaError> {
        if self.held.is_empty() {
            return Ok(());
        }
        self.producer.begin()?;
        for h in self.held.drain(..) {
            send_record(
                self.producer.producer(),
                &h.topic,
                h.partition,
                Some(h.key.as_bytes()),
                Some(&h.payload),
                None,
            )?;
        }
        Ok(())
    }

    /// The batch is given up: its held verdicts go with it.
    pub(super) fn drop_held(&mut self) {
        self.held.clear();
    }
}
