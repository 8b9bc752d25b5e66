//! State hand-over: reading a partition of the compacted state topic (read_committed) into
//! a fresh engine before the partition's first event is processed.

use crate::engine::Engine;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};

/// The group-less consumer used for restores.
pub struct StateReader {
    consumer: BaseConsumer<QuietEof>,
}

impl StateReader {
    pub fn new(consumer: BaseConsumer<QuietEof>) -> Self {
        StateReader { consumer }
    }
}

/// Client context that does not log the partition-end events restores wait for.
pub struct QuietEof;

impl rdkafka::ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(error, KafkaError::PartitionEOF(_)) {
            tracing::error!(error = %error, reason, "state reader");
        }
    }
}

impl rdkafka::consumer::ConsumerContext for QuietEof {}

/// Key of the engine-clock record in each state partition. Not valid UTF-8, so it can
/// never be a session id.
pub const CLOCK_KEY: &[u8] = b"\xffloopguard-clock";

/// Longest a restore may take before the instance gives up (and is restarted).
const RESTORE_LIMIT: Duration = Duration::from_secs(600);

/// Restores every session of `partition` into `engine`; returns it with the restored ids.
pub fn restore_partition(
    reader: &StateReader,
    topic: &str,
    partition: i32,
    mut engine: Engine,
) -> Result<(Engine, Vec<String>), KafkaError> {
    let c = &reader.consumer;
    let (low, high) = c.fetch_watermarks(topic, partition, Duration::from_secs(10))?;
    let mut restored = std::collections::BTreeSet::new();
    if high <= low {
        return Ok((engine, Vec::new()));
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Beginning)?;
    c.assign(&tpl)?;
    let started = Instant::now();
    let mut clock: Option<crate::engine::Clock> = None;
    // Read up to the high watermark taken above, not just to the first partition end: with
    // read_committed the end is the last stable offset, and a transaction that the previous
    // owner just committed may not have its markers written yet. Waiting for the position to
    // pass the high watermark means every transaction started before is decided.
    loop {
        if started.elapsed() > RESTORE_LIMIT {
            c.unassign()?;
            return Err(KafkaError::Global(
                rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
            ));
        }
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                if m.key() == Some(CLOCK_KEY) {
                    if let Some(c) = m.payload().and_then(|p| serde_json::from_slice(p).ok()) {
                        clock = Some(c);
                    }
                    if m.offset() + 1 >= high {
                        break;
                    }
                    continue;
                }
                let Some(key) = m.key().map(|k| String::from_utf8_lossy(k).into_owned()) else {
                    continue;
                };
                match m.payload() {
                    Some(bytes) => match engine.restore(&key, bytes) {
                        Ok(()) => {
                            restored.insert(key);
                        }
                        Err(e) => {
                            tracing::warn!(session = %key, error = %e, "unreadable state record skipped")
                        }
                    },
                    None => {
                        engine.forget(&key);
                        restored.remove(&key);
                    }
                }
                if m.offset() + 1 >= high {
                    break;
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {
                let position = c
                    .position()?
                    .elements()
                    .first()
                    .and_then(|e| match e.offset() {
                        Offset::Offset(o) => Some(o),
                        _ => None,
                    });
                if position.is_some_and(|p| p >= high) {
                    break;
                }
            }
            Some(Err(e)) => {
                c.unassign()?;
                return Err(e);
            }
        }
    }
    c.unassign()?;
    if let Some(clock) = clock {
        engine.restore_clock(clock);
    }
    Ok((engine, restored.into_iter().collect()))
}
