//! Rewinding after a failed batch: every assigned partition reloaded from the committed
//! state and the consumer sought back to the committed offsets, so nothing is lost or
//! doubled; a record that keeps failing is given up after `kafka.max_record_retries`.

use super::Worker;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

impl Worker {
    /// After a failed commit: reload every assigned partition from the committed state and
    /// rewind the consumer to the committed offsets, so nothing is lost or doubled. The
    /// assignment, not the partitions held: one whose restore failed (the broker went away
    /// mid-restore) is assigned without being held, and its consumer position is past
    /// records no engine has seen. A failed rewind leaves nothing half done that the next
    /// one does not redo.
    pub fn rewind<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), KafkaError> {
        self.abort();
        // A commit in flight that failed just now is covered by this rewind.
        self.needs_rewind = false;
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

/// How a failed rewind is retried: without bound while the broker is away or busy (it will
/// answer again), for `REWIND_GIVE_UP` when the error says something else (authorization,
/// a missing topic, a refused seek), never when waiting cannot mend it (a destroyed broker
/// handle, which `committed` already asked for 20 s: an exit lets a fresh process or
/// another instance take over).
#[derive(Debug, PartialEq, Eq)]
pub enum RewindRetry {
    Unbounded,
    Bounded,
    Never,
}

/// How long a rewind failing with an error other than the broker's absence is retried.
pub const REWIND_GIVE_UP: Duration = Duration::from_secs(120);

pub fn rewind_retry(e: &KafkaError) -> RewindRetry {
    use rdkafka::types::RDKafkaErrorCode as C;
    match e.rdkafka_error_code() {
        Some(C::BrokerDestroy) => RewindRetry::Never,
        Some(C::UnstableOffsetCommit | C::RebalanceInProgress) => RewindRetry::Unbounded,
        _ if crate::service::retry::broker_away(e) => RewindRetry::Unbounded,
        _ => RewindRetry::Bounded,
    }
}

/// Whether a failed rewind ends the stream thread (the reason when it does), by
/// `rewind_retry`; `failing_since` is when the bounded kind of failure began.
pub fn rewind_gives_up(e: &KafkaError, failing_since: &mut Option<Instant>) -> Option<String> {
    match rewind_retry(e) {
        RewindRetry::Never => Some(format!("rewinding to the last commit: {e}")),
        RewindRetry::Unbounded => None,
        RewindRetry::Bounded => {
            let since = *failing_since.get_or_insert_with(Instant::now);
            (since.elapsed() > REWIND_GIVE_UP).then(|| {
                format!(
                    "rewinding to the last commit failed for {} s: {e}",
                    REWIND_GIVE_UP.as_secs()
                )
            })
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

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::types::RDKafkaErrorCode as C;

    /// The broker's absence is waited out, a destroyed handle never, anything else a while.
    #[test]
    fn rewind_errors_are_retried_by_what_they_say() {
        let consume = |c| KafkaError::MessageConsumption(c);
        assert_eq!(
            rewind_retry(&consume(C::AllBrokersDown)),
            RewindRetry::Unbounded
        );
        assert_eq!(
            rewind_retry(&KafkaError::MetadataFetch(C::OperationTimedOut)),
            RewindRetry::Unbounded
        );
        assert_eq!(
            rewind_retry(&KafkaError::MetadataFetch(C::BrokerDestroy)),
            RewindRetry::Never
        );
        assert_eq!(
            rewind_retry(&consume(C::TopicAuthorizationFailed)),
            RewindRetry::Bounded
        );
        assert_eq!(
            rewind_retry(&KafkaError::Seek("_INVALID_ARG".into())),
            RewindRetry::Bounded
        );
    }

    /// A destroyed handle ends the thread at once; another error only once it has lasted.
    #[test]
    fn a_bounded_failure_gives_up_only_after_its_time() {
        let mut since = None;
        let denied = KafkaError::MessageConsumption(C::TopicAuthorizationFailed);
        assert_eq!(rewind_gives_up(&denied, &mut since), None);
        assert!(since.is_some());
        since = Instant::now().checked_sub(REWIND_GIVE_UP + Duration::from_secs(1));
        assert!(rewind_gives_up(&denied, &mut since).is_some());
        let away = KafkaError::MessageConsumption(C::AllBrokersDown);
        assert_eq!(rewind_gives_up(&away, &mut since), None);
        let destroyed = KafkaError::MetadataFetch(C::BrokerDestroy);
        assert!(rewind_gives_up(&destroyed, &mut None).is_some());
    }
}
