//! The bottom layer of the exactly-once producer: the librdkafka producer the guard writes
//! with, its delivery reports, and the transactional calls with the retries librdkafka
//! allows (commit, an abort that always finishes), and `send`, which every record of the
//! guard goes through.
//!
//! A failed call is read by `kafka::outcome`: *retriable* errors (a timeout) repeat the
//! same call, the others abort the transaction, and a fenced producer must stop.

use crate::config::{Config, Delivery};
use crate::service::kafka::outcome::Outcome;
use crate::service::kafka::settings::producer_config;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::DeliveryResult;
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext, PurgeConfig};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, TopicPartitionList};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long one transactional call may block.
pub const TXN_TIMEOUT: Duration = Duration::from_secs(30);
/// How many times a retriable transactional call is repeated before the batch is given up.
const ATTEMPTS: u32 = 3;

/// Counts records the broker refused for good, so a batch with a lost record never commits.
#[derive(Default)]
pub struct DeliveryContext {
    pub(super) failed: AtomicU64,
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

/// Sends the consumed offsets into `producer`'s transaction and commits it, repeating what
/// librdkafka says may be repeated.
pub fn commit_transaction_of(
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

/// A flush gives up once no record of the producer has been delivered for this long.
pub const FLUSH_STALL: Duration = Duration::from_secs(8);
/// How often a flush looks at whether its records still move.
const FLUSH_SLICE: Duration = Duration::from_millis(250);

/// Flushes `producer` for at most `TXN_TIMEOUT`, but gives up (`MessageTimedOut`: the
/// batch is aborted and replayed) once its records stop being delivered for `FLUSH_STALL`.
/// After OUT_OF_ORDER_SEQUENCE_NUMBER librdkafka holds a transaction's records until the
/// epoch is bumped, which only the abort does: a plain flush waited out all 30 s of it
/// (docs/benchmarks.md, "Three brokers under faults").
pub fn flush_while_moving(producer: &GuardProducer) -> KafkaResult<()> {
    let started = std::time::Instant::now();
    let mut last = (producer.in_flight_count(), started);
    loop {
        if producer.flush(FLUSH_SLICE).is_ok() {
            return Ok(());
        }
        let now = std::time::Instant::now();
        let left = producer.in_flight_count();
        if left < last.0 {
            last = (left, now);
        }
        if now.duration_since(last.1) >= FLUSH_STALL || now.duration_since(started) >= TXN_TIMEOUT {
            tracing::warn!(
                undelivered = left,
                "records not delivered for {}s: aborting the batch",
                now.duration_since(last.1).as_secs()
            );
            return Err(KafkaError::Flush(RDKafkaErrorCode::MessageTimedOut));
        }
    }
}

/// How an abort ended.
pub enum Aborted {
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
pub fn abort_transaction_of(producer: &GuardProducer) -> Aborted {
    let outstanding = producer.in_flight_count() > 0;
    producer.purge(PurgeConfig::default().queue());
    for attempt in 1..=ATTEMPTS {
        let _ = producer.flush(TXN_TIMEOUT);
        match producer.abort_transaction(TXN_TIMEOUT) {
            Ok(()) if outstanding => return Aborted::Replace,
            Ok(()) => return Aborted::Clean,
            Err(e) => match Outcome::of(&e) {
                Outcome::Fenced => return Aborted::Fenced(e),
                Outcome::Retry => {
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
    letter: &crate::service::records::dead_letter::DeadLetter<'_>,
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

pub fn create(cfg: &Config, instance: &str) -> KafkaResult<GuardProducer> {
    let producer: GuardProducer =
        producer_config(cfg, instance).create_with_context(DeliveryContext::default())?;
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
            Err(e) if attempt < ATTEMPTS && Outcome::of(&e) == Outcome::Retry => {
                tracing::warn!(error = %e, attempt, "{name}; calling it again");
                attempt += 1;
            }
            other => return other,
        }
    }
}
