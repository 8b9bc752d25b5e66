//! A stream thread's producer (two taking turns under exactly-once) and its transaction
//! life cycle: begin, commit with the retries librdkafka allows, an abort that always
//! finishes (or replaces the producer), and the delivery reports that at-least-once mode
//! checks before it commits offsets; `send`, which every record of the guard goes through.
//!
//! librdkafka's error classes decide what happens to a failed call: *retriable* errors
//! (a timeout) repeat the same call, *abortable* ones abort the transaction, *fatal* ones
//! need a new producer. A producer fenced by a newer incarnation of this instance (same
//! transactional id) must stop: the service exits and its successor carries on.

use crate::config::{Config, Delivery};
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::DeliveryResult;
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext, PurgeConfig};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, TopicPartitionList};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long one transactional call may block.
pub const TXN_TIMEOUT: Duration = Duration::from_secs(30);
/// How many times a retriable transactional call is repeated before the batch is given up.
const ATTEMPTS: u32 = 3;

/// Counts records the broker refused for good, so a batch with a lost record never commits.
#[derive(Default)]
pub struct DeliveryContext {
    failed: AtomicU64,
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            // Records purged by our own abort are not lost: their batch is replayed.
            let purged = matches!(
                e.rdkafka_error_code(),
                Some(RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight)
            );
            if !purged {
                self.failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "a record was not delivered");
            }
        }
    }
}

pub type GuardProducer = BaseProducer<DeliveryContext>;

/// What to do about a failed call, by librdkafka's classification.
#[derive(Debug, PartialEq, Eq)]
pub enum Class {
    /// Call the same function again.
    Retry,
    /// Abort the transaction; the batch is replayed from the last commit.
    Abort,
    /// The producer is unusable: replace it.
    Fatal,
    /// A newer incarnation of this instance took over the transactional id: exit.
    Fenced,
}

pub fn classify(e: &KafkaError) -> Class {
    let fenced = matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::Fenced | RDKafkaErrorCode::ProducerFenced)
    );
    match e {
        _ if fenced => Class::Fenced,
        KafkaError::Transaction(r) if r.is_fatal() => Class::Fatal,
        KafkaError::Transaction(r) if r.txn_requires_abort() => Class::Abort,
        KafkaError::Transaction(r) if r.is_retriable() => Class::Retry,
        _ => Class::Abort,
    }
}

/// The producer of a stream thread: verdicts, state records and dead letters.
///
/// In exactly-once mode it is two transactional producers that take turns, one batch
/// each. Kafka refuses to add partitions to a producer's next transaction with
/// CONCURRENT_TRANSACTIONS until the broker has written the markers of its previous one,
/// and librdkafka (no transactions v2, KIP-890) retries until then: the first verdicts of
/// every batch waited for the last batch's markers, the read_uncommitted p99 of 20-30 ms
/// (docs/benchmarks.md). The other producer's last transaction ended a whole batch ago.
/// Only one transaction is ever open: the next begins after the last one's commit (or
/// abort) returned, so records, state and offsets keep their order.
pub struct TxnProducer {
    inner: GuardProducer,
    /// The producer whose turn is next, with its transactional id's instance part.
    spare: Option<(GuardProducer, String)>,
    cfg: Arc<Config>,
    instance: String,
    open: bool,
    failed_at_begin: u64,
}

/// The instance part of the transactional id of a stream thread's second producer.
fn alternate_instance(instance: &str) -> String {
    format!("{instance}-alt")
}

impl TxnProducer {
    /// Creates the producer(s); in exactly-once mode, fences any predecessor with these ids.
    pub fn new(cfg: Arc<Config>, instance: &str) -> KafkaResult<Self> {
        let inner = create(&cfg, instance)?;
        let spare = if cfg.kafka.delivery == Delivery::ExactlyOnce {
            let alt = alternate_instance(instance);
            Some((create(&cfg, &alt)?, alt))
        } else {
            None
        };
        Ok(TxnProducer {
            inner,
            spare,
            cfg,
            instance: instance.to_string(),
            open: false,
            failed_at_begin: 0,
        })
    }

    /// The transaction just ended: the other producer takes the next batch.
    fn take_turns(&mut self) {
        if let Some((spare, id)) = self.spare.as_mut() {
            std::mem::swap(&mut self.inner, spare);
            std::mem::swap(&mut self.instance, id);
        }
    }

    pub fn producer(&self) -> &GuardProducer {
        &self.inner
    }

    /// True while a batch is being written (a transaction is open in exactly-once mode).
    pub fn is_open(&self) -> bool {
        self.open
    }

    fn eos(&self) -> bool {
        self.cfg.kafka.delivery == Delivery::ExactlyOnce
    }

    fn failed(&self) -> u64 {
        self.inner.context().failed.load(Ordering::Relaxed)
    }

    /// Opens a transaction unless one is open (exactly-once), and serves delivery reports.
    pub fn begin(&mut self) -> Result<(), KafkaError> {
        self.inner.poll(Duration::ZERO);
        if self.open {
            return Ok(());
        }
        if self.eos() {
            if let Err(e) = self.inner.begin_transaction() {
                // A previous call may have left the producer unusable: start afresh once.
                if classify(&e) == Class::Fenced {
                    return Err(e);
                }
                tracing::warn!(error = %e, "begin_transaction failed; replacing the producer");
                self.replace()?;
                self.inner.begin_transaction()?;
            }
        }
        self.failed_at_begin = self.failed();
        self.open = true;
        Ok(())
    }

    /// Commits the open transaction with the consumed offsets (exactly-once), or waits for
    /// every record to be acknowledged (at-least-once; the caller then commits offsets).
    /// On failure nothing of the batch is committed and the transaction is over.
    pub fn commit(
        &mut self,
        offsets: &TopicPartitionList,
        group: Option<&ConsumerGroupMetadata>,
    ) -> Result<(), KafkaError> {
        if !self.open {
            return Ok(());
        }
        let result = if self.eos() {
            self.commit_transaction(offsets, group)
        } else {
            self.flush_checked()
        };
        match result {
            Ok(()) => {
                self.open = false;
                self.take_turns();
                Ok(())
            }
            Err(e) => {
                if classify(&e) == Class::Fenced {
                    self.open = false;
                    return Err(e);
                }
                self.abort()?;
                Err(e)
            }
        }
    }

    fn commit_transaction(
        &self,
        offsets: &TopicPartitionList,
        group: Option<&ConsumerGroupMetadata>,
    ) -> Result<(), KafkaError> {
        if offsets.count() > 0 {
            let group = group.ok_or(KafkaError::Global(RDKafkaErrorCode::State))?;
            retrying("send_offsets_to_transaction", || {
                self.inner
                    .send_offsets_to_transaction(offsets, group, TXN_TIMEOUT)
            })?;
        }
        retrying("commit_transaction", || {
            self.inner.commit_transaction(TXN_TIMEOUT)
        })
    }

    fn flush_checked(&self) -> Result<(), KafkaError> {
        self.inner.flush(TXN_TIMEOUT)?;
        if self.failed() > self.failed_at_begin {
            return Err(KafkaError::MessageProduction(RDKafkaErrorCode::Fail));
        }
        Ok(())
    }

    /// Ends the open transaction without committing it; always finishes. The abort waits
    /// until every delivery report of the transaction is served, so they are served here
    /// first (a producer that is not polled would time out instead). A timed-out abort is
    /// resumed, never followed by another call; when it cannot finish, the producer is
    /// replaced: its successor's init fences it and aborts its transaction. Only an
    /// instance fenced by its own successor gets an error back.
    ///
    /// When records were still queued, the purge leaves a gap in the idempotent producer's
    /// sequence numbers that librdkafka does not always reset with the abort: the next
    /// transaction then failed with "skipped sequence numbers" (seen once the retry backoff
    /// was 10 ms). Such an abort is followed by a new producer (new epoch, sequences from
    /// zero).
    pub fn abort(&mut self) -> Result<(), KafkaError> {
        if !self.open {
            return Ok(());
        }
        let outstanding = self.inner.in_flight_count() > 0;
        self.inner.purge(PurgeConfig::default().queue());
        if !self.eos() {
            // Nothing to undo: what was produced stays produced and is de-duplicated
            // downstream by verdict id; the consumer rewinds to the last commit.
            let _ = self.inner.flush(TXN_TIMEOUT);
            self.open = false;
            return Ok(());
        }
        for attempt in 1..=ATTEMPTS {
            let _ = self.inner.flush(TXN_TIMEOUT);
            match self.inner.abort_transaction(TXN_TIMEOUT) {
                Ok(()) if outstanding => return self.replace(),
                Ok(()) => {
                    self.open = false;
                    self.take_turns();
                    return Ok(());
                }
                Err(e) => match classify(&e) {
                    Class::Fenced => {
                        self.open = false;
                        return Err(e);
                    }
                    Class::Retry => {
                        tracing::warn!(error = %e, attempt, "abort_transaction; resuming it")
                    }
                    _ => {
                        tracing::warn!(error = %e, "abort_transaction failed");
                        break;
                    }
                },
            }
        }
        self.replace()
    }

    /// Ends the open transaction and starts afresh with a new producer (same transactional
    /// id, new epoch, sequence numbers from zero).
    pub fn renew(&mut self) -> Result<(), KafkaError> {
        self.abort()?;
        self.replace()
    }

    /// Swaps in a new producer with the same transactional id.
    fn replace(&mut self) -> Result<(), KafkaError> {
        tracing::warn!(instance = %self.instance, "replacing the producer");
        self.open = false;
        let fresh = create(&self.cfg, &self.instance)?;
        // The old one is fenced by now; dropping it purges whatever it still held.
        self.inner = fresh;
        Ok(())
    }
}

/// Sends one record, waiting for queue space rather than dropping it.
pub fn send(
    producer: &GuardProducer,
    topic: &str,
    partition: i32,
    key: &[u8],
    payload: Option<&[u8]>,
    headers: Option<OwnedHeaders>,
) -> Result<(), KafkaError> {
    let mut record = BaseRecord::<[u8], [u8]>::to(topic).key(key);
    if partition >= 0 {
        record = record.partition(partition);
    }
    if let Some(p) = payload {
        record = record.payload(p);
    }
    if let Some(h) = headers {
        record = record.headers(h);
    }
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((
                KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                r,
            )) => {
                producer.poll(Duration::from_millis(50));
                record = r;
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// Sends one dead letter (headers as built by `dlq`; the partition chosen by its key).
pub fn send_dead_letter(
    producer: &GuardProducer,
    topic: &str,
    letter: &super::dlq::DeadLetter<'_>,
) -> Result<(), KafkaError> {
    let mut headers = OwnedHeaders::new_with_capacity(letter.headers.len());
    for (key, value) in &letter.headers {
        headers = headers.insert(rdkafka::message::Header {
            key,
            value: Some(value),
        });
    }
    send(
        producer,
        topic,
        -1,
        letter.key.unwrap_or_default(),
        letter.payload,
        Some(headers),
    )
}

fn create(cfg: &Config, instance: &str) -> KafkaResult<GuardProducer> {
    let producer: GuardProducer = super::kafka::producer_config(cfg, instance)
        .create_with_context(DeliveryContext::default())?;
    if cfg.kafka.delivery == Delivery::ExactlyOnce {
        producer.init_transactions(TXN_TIMEOUT)?;
    }
    warm_up(&producer, cfg);
    Ok(producer)
}

/// Fetches the metadata of every topic the guard writes before its first batch: a topic
/// first produced to is otherwise unknown until librdkafka's next metadata refresh, and the
/// first verdict after a start waited for it (~1 s; docs/benchmarks.md). Failures only cost
/// that wait again, so they are logged, not returned.
fn warm_up(producer: &GuardProducer, cfg: &Config) {
    let k = &cfg.kafka;
    for topic in [&k.verdicts_topic, &k.dlq_topic, &k.state_topic] {
        if let Err(e) = producer
            .client()
            .fetch_metadata(Some(topic), Duration::from_secs(5))
        {
            tracing::warn!(topic = %topic, error = %e, "topic metadata not fetched ahead");
        }
    }
}

/// Repeats a transactional call while librdkafka says the same call may be repeated.
fn retrying(name: &str, call: impl Fn() -> KafkaResult<()>) -> KafkaResult<()> {
    let mut attempt = 1;
    loop {
        match call() {
            Err(e) if attempt < ATTEMPTS && classify(&e) == Class::Retry => {
                tracing::warn!(error = %e, attempt, "{name}; calling it again");
                attempt += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_transactional_errors_abort_the_batch() {
        let e = KafkaError::Flush(RDKafkaErrorCode::MessageTimedOut);
        assert_eq!(classify(&e), Class::Abort);
    }

    #[test]
    fn a_fenced_producer_stops() {
        let e = KafkaError::Global(RDKafkaErrorCode::Fenced);
        assert_eq!(classify(&e), Class::Fenced);
        let e = KafkaError::MessageProduction(RDKafkaErrorCode::ProducerFenced);
        assert_eq!(classify(&e), Class::Fenced);
    }
}
