//! Rewinding after a failed batch: every owned partition reloaded from the committed state
//! and the consumer sought back to the committed offsets, so nothing is lost or doubled; a
//! record that keeps failing is given up after `kafka.max_record_retries`.

use super::Worker;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

impl Worker {
    /// After a failed commit: reload every owned partition from the committed state and
    /// rewind the consumer to the committed offsets, so nothing is lost or doubled.
    pub fn rewind<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), KafkaError> {
        self.abort();
        if self.retries.pending_strike() {
            if let Err(e) = self.producer.renew() {
                self.note_fenced(&e);
                return Err(e);
            }
        }
        let owned: Vec<i32> = self.parts.keys().copied().collect();
        let committed = self.committed(consumer, &owned)?;
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
                    "rewinding partition"
                );
            }
            self.parts.remove(&p);
        }
        self.restore_all(&committed)?;
        self.shared.refresh_ready();
        let mut seek = TopicPartitionList::new();
        for (&p, offset) in &committed {
            let offset = offset.map_or(Offset::Beginning, Offset::Offset);
            seek.add_partition_offset(&self.cfg.kafka.events_topic, p, offset)?;
        }
        seek_with_retries(consumer, seek)
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
