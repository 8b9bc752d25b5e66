//! A stream thread's producer (two taking turns under exactly-once) and its transaction
//! life cycle: begin, commit with the retries librdkafka allows, an abort that always
//! finishes (or replaces the producer), and the delivery reports that at-least-once mode
//! checks before it commits offsets; `send`, which every record of the guard goes through.
//!
//! librdkafka's error classes decide what happens to a failed call: *retriable* errors
//! (a timeout) repeat the same call, *abortable* ones abort the transaction, *fatal* ones
//! need a new producer. A producer fenced by a newer incarnation of this instance (same
//! transactional id) must stop: the service exits and its successor carries on.

use super::committer::{Committer, Handoff, InFlight, Settled};
use super::membership::Membership;
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
/// A batch's transaction is committed by the commit thread (`committer`) while the next
/// batch is written on the other producer; at most one commit is in flight, and the next
/// batch writes only after the last one's records are in the log, so records, state and
/// offsets keep their order. The commit thread begins the producer's next transaction
/// once its commit is done (`begun`): beginning is a round trip to librdkafka's main
/// thread, which took 5-6 ms on the stream thread when the machine was busy.
pub struct TxnProducer {
    inner: GuardProducer,
    /// The producer whose turn is next, with its transactional id's instance part and
    /// whether its next transaction is begun; None while its last transaction is being
    /// committed (`in_flight`).
    spare: Option<(GuardProducer, String, bool)>,
    /// The commit pipeline (exactly-once): the thread and the commit handed to it.
    committer: Option<Committer>,
    in_flight: Option<InFlight>,
    cfg: Arc<Config>,
    instance: String,
    /// A batch is being written (its records go into the open transaction).
    open: bool,
    /// `inner`'s next transaction is begun, nothing written in it yet.
    begun: bool,
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
        let (spare, committer) = if cfg.kafka.delivery == Delivery::ExactlyOnce {
            let alt = alternate_instance(instance);
            let committer = Committer::start(cfg.clone(), instance)
                .map_err(|e| tracing::warn!(error = %e, "no commit thread: commits inline"))
                .ok();
            (Some((create(&cfg, &alt)?, alt, false)), committer)
        } else {
            (None, None)
        };
        Ok(TxnProducer {
            inner,
            spare,
            committer,
            in_flight: None,
            cfg,
            instance: instance.to_string(),
            open: false,
            begun: false,
            failed_at_begin: 0,
        })
    }

    /// The transaction just ended: the other producer takes the next batch.
    fn take_turns(&mut self) {
        if let Some((spare, id, begun)) = self.spare.as_mut() {
            std::mem::swap(&mut self.inner, spare);
            std::mem::swap(&mut self.instance, id);
            std::mem::swap(&mut self.begun, begun);
        }
    }

    /// The producer of the open batch. While the last batch's commit is in flight, the
    /// first call waits until that batch's records are in the log (`committer`).
    pub fn producer(&self) -> &GuardProducer {
        if let Some(in_flight) = &self.in_flight {
            in_flight.flushed.wait();
        }
        &self.inner
    }

    /// Pipelined commits send their offsets under the membership `source` holds when they
    /// send them (`membership`); without a commit thread, commits take it inline anyway.
    pub fn read_membership_from(&self, source: Box<dyn Membership>) {
        if let Some(committer) = &self.committer {
            committer.read_membership_from(source);
        }
    }

    /// True while a handed-off commit has not been settled.
    pub fn committing(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Hands the open transaction to the commit thread with the consumed offsets and
    /// switches to the other producer for the next batch; `settle` tells how it went. The
    /// caller settles the previous one first. Without a commit thread or a free producer
    /// (at-least-once mode), commits here as `commit` does.
    pub fn hand_off(
        &mut self,
        offsets: TopicPartitionList,
        group: Option<ConsumerGroupMetadata>,
    ) -> Result<(), KafkaError> {
        if !self.open {
            return Ok(());
        }
        debug_assert!(self.in_flight.is_none(), "one commit in flight at most");
        if self.committer.is_none() {
            return self.commit(&offsets, group.as_ref());
        }
        let Some((next, next_instance, next_begun)) = self.spare.take() else {
            return self.commit(&offsets, group.as_ref());
        };
        let handoff = Handoff {
            producer: std::mem::replace(&mut self.inner, next),
            instance: std::mem::replace(&mut self.instance, next_instance),
            offsets,
            group,
        };
        self.open = false;
        self.begun = next_begun;
        let committer = self.committer.as_ref().expect("checked above");
        match committer.hand_off(handoff) {
            Ok(in_flight) => {
                self.in_flight = Some(in_flight);
                Ok(())
            }
            Err(settled) => self.take_back(*settled),
        }
    }

    /// The end of the commit in flight, if there is one (waiting for it when `wait`); None
    /// while it runs or when there is none. Its producer is the spare again.
    pub fn settle(&mut self, wait: bool) -> Option<Result<(), KafkaError>> {
        let in_flight = self.in_flight.as_ref()?;
        let settled = self.committer.as_ref()?.settle(in_flight, wait)?;
        self.in_flight = None;
        Some(self.take_back(settled))
    }

    fn take_back(&mut self, settled: Settled) -> Result<(), KafkaError> {
        if let Some(producer) = settled.producer {
            self.spare = Some((producer, settled.instance, settled.begun));
        }
        settled.result
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
        if self.eos() && !std::mem::take(&mut self.begun) {
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
            commit_transaction_of(&self.inner, offsets, group)
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

    fn flush_checked(&self) -> Result<(), KafkaError> {
        self.inner.flush(TXN_TIMEOUT)?;
        if self.failed() > self.failed_at_begin {
            return Err(KafkaError::MessageProduction(RDKafkaErrorCode::Fail));
        }
        Ok(())
    }

    /// Ends the open transaction without committing it; always finishes, replacing the
    /// producer when its abort cannot (`abort_transaction_of`). Only an instance fenced by
    /// its own successor gets an error back. A commit in flight is not touched: the caller
    /// settles it first.
    pub fn abort(&mut self) -> Result<(), KafkaError> {
        if !self.open {
            return Ok(());
        }
        if !self.eos() {
            // Nothing to undo: what was produced stays produced and is de-duplicated
            // downstream by verdict id; the consumer rewinds to the last commit.
            self.inner.purge(PurgeConfig::default().queue());
            let _ = self.inner.flush(TXN_TIMEOUT);
            self.open = false;
            return Ok(());
        }
        match abort_transaction_of(&self.inner) {
            Aborted::Clean => {
                self.open = false;
                self.take_turns();
                Ok(())
            }
            Aborted::Replace => self.replace(),
            Aborted::Fenced(e) => {
                self.open = false;
                Err(e)
            }
        }
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
        self.begun = false;
        let fresh = create(&self.cfg, &self.instance)?;
        // The old one is fenced by now; dropping it purges whatever it still held.
        self.inner = fresh;
        Ok(())
    }
}

/// Sends the consumed offsets into `producer`'s transaction and commits it, repeating what
/// librdkafka says may be repeated.
pub(super) fn commit_transaction_of(
    producer: &GuardProducer,
    offsets: &TopicPartitionList,
    group: Option<&ConsumerGroupMetadata>,
) -> Result<(), KafkaError> {
    if offsets.count() > 0 {
        let group = group.ok_or(KafkaError::Global(RDKafkaErrorCode::State))?;
        retrying("send_offsets_to_transaction", || {
            producer.send_offsets_to_transaction(offsets, group, TXN_TIMEOUT)
        })?;
    }
    retrying("commit_transaction", || {
        producer.commit_transaction(TXN_TIMEOUT)
    })
}

/// How an abort ended.
pub(super) enum Aborted {
    /// The producer may begin a new transaction.
    Clean,
    /// It needs replacing (the abort did not finish, or records were purged).
    Replace,
    /// A newer incarnation of this instance took over its transactional id.
    Fenced(KafkaError),
}

/// Aborts `producer`'s open transaction; always finishes. The abort waits until every
/// delivery report of the transaction is served, so they are served here first (a producer
/// that is not polled would time out instead). A timed-out abort is resumed, never followed
/// by another call; when it cannot finish, the producer must be replaced: its successor's
/// init fences it and aborts its transaction.
///
/// When records were still queued, the purge leaves a gap in the idempotent producer's
/// sequence numbers that librdkafka does not always reset with the abort: the next
/// transaction then failed with "skipped sequence numbers" (seen once the retry backoff
/// was 10 ms). Such an abort asks for a new producer (new epoch, sequences from zero).
pub(super) fn abort_transaction_of(producer: &GuardProducer) -> Aborted {
    let outstanding = producer.in_flight_count() > 0;
    producer.purge(PurgeConfig::default().queue());
    for attempt in 1..=ATTEMPTS {
        let _ = producer.flush(TXN_TIMEOUT);
        match producer.abort_transaction(TXN_TIMEOUT) {
            Ok(()) if outstanding => return Aborted::Replace,
            Ok(()) => return Aborted::Clean,
            Err(e) => match classify(&e) {
                Class::Fenced => return Aborted::Fenced(e),
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
    Aborted::Replace
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
    send_record(producer, topic, partition, Some(key), payload, headers)
}

/// As `send`, the key optional: a judged-through marker has none.
pub fn send_record(
    producer: &GuardProducer,
    topic: &str,
    partition: i32,
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
    headers: Option<OwnedHeaders>,
) -> Result<(), KafkaError> {
    let mut record = BaseRecord::<[u8], [u8]>::to(topic);
    if let Some(k) = key {
        record = record.key(k);
    }
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

pub(super) fn create(cfg: &Config, instance: &str) -> KafkaResult<GuardProducer> {
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
