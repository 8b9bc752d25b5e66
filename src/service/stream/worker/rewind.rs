//! Rewinding after a failed batch: every assigned partition reloaded from the committed
//! state and the consumer sought back to the committed offsets, so nothing is lost or
//! doubled; a record that keeps failing is given up after `kafka.max_record_retries`.

use super::Worker;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;

impl Worker {
    /// After a failed commit: reload every assigned partition from the committed state and
    /// rewind the consumer to the committed offsets, so nothing is lost or doubled. The
    /// assignment, not the partitions held: one whose restore failed (the broker went away
    /// mid-restore) is assigned without being held, and its consumer position is past
    /// records no engine has seen. A failed rewind leaves nothing half done that the next
    /// one does not redo.
    /// A failed rewind stays owed (`take_next` asks for it again).
    pub fn rewind<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), KafkaError> {
        let result = self.rewind_once(consumer);
        if result.is_err() {
            self.rewind_owed = true;
        }
        result
    }

    fn rewind_once<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), KafkaError> {
        self.abort();
        // A commit in flight that failed just now is covered by this rewind.
        self.rewind_owed = false;
        if self.retries.pending_strike() {
            if let Err(e) = self.producer.renew() {
                self.note_fenced(&e);
                return Err(e);
            }
        }
        let owned = self.assigned(consumer);
        // Unserved until restored: `/readyz` says so while the broker keeps this failing.
        self.mark_restoring(&owned);
        // An assignment lost or revoked meanwhile: nothing to reload, nothing to seek.
        let committed = if owned.is_empty() {
            BTreeMap::new()
        } else {
            self.committed(consumer, &owned)?
        };
        for (p, offset) in self.retries.rewound(&committed) {
            self.shared.metrics.records_given_up.inc();
            tracing::error!(
                partition = p,
                offset,
                retries = self.cfg.kafka.max_record_retries,
                "record failed every attempt: giving it up (minimal dead letter)"
            );
        }
        for &p in &owned {
            if self.retries.rewinds(p) > 0 {
                tracing::warn!(
                    partition = p,
                    offset = committed.get(&p).copied().flatten().unwrap_or(-1),
                    rewinds = self.retries.rewinds(p),
                    strikes = self.retries.strikes(p),
                    "rewinding partition"
                );
            }
            self.parts.remove(&p);
        }
        self.restore_all(&committed)?;
        self.shared.refresh_ready();
        if committed.is_empty() {
            return Ok(()); // librdkafka refuses an empty seek (_INVALID_ARG)
        }
        let mut seek = TopicPartitionList::new();
        for (&p, offset) in &committed {
            let offset = offset.map_or(Offset::Beginning, Offset::Offset);
            seek.add_partition_offset(&self.cfg.kafka.events_topic, p, offset)?;
        }
        seek_with_retries(consumer, seek)
    }

    /// The partitions of the events topic assigned to `consumer` (those held, when
    /// librdkafka cannot say).
    fn assigned<C: ConsumerContext>(&self, consumer: &BaseConsumer<C>) -> Vec<i32> {
        match consumer.assignment() {
            Ok(tpl) => tpl
                .elements()
                .iter()
                .filter(|e| e.topic() == self.cfg.kafka.events_topic)
                .map(|e| e.partition())
                .collect(),
            Err(_) => self.parts.keys().copied().collect(),
        }
    }
}

/// Seeks the consumer back, retrying while librdkafka refuses (`_INVALID_ARG` while a
/// partition's fetcher restarts, e.g. after a broker restart): the rewind must happen, and
/// giving up would stop the guard. Gives up after about 10 s.
fn seek_with_retries<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    seek: TopicPartitionList,
) -> Result<(), KafkaError> {
    let mut attempt = 0;
    loop {
        let result = consumer
            .seek_partitions(seek.clone(), Duration::from_secs(10))
            .and_then(|done| {
                // A partition's own error counts as a refusal of the whole seek.
                match done.elements().iter().find_map(|e| e.error().err()) {
                    Some(e) => Err(e),
                    None => Ok(()),
                }
            });
        match result {
            Ok(()) => return Ok(()),
            Err(e) if attempt < 20 => {
                attempt += 1;
                tracing::warn!(error = %e, attempt, "seek refused, retrying");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(e),
        }
    }
}
