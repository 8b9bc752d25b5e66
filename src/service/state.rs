//! State hand-over: reading a partition's last checkpoint from the compacted state topic
//! (read_committed) into a fresh engine, then re-running the events between the checkpoint
//! and the committed offset, before the partition's first new event is processed.

use crate::engine::event::Event;
use crate::engine::{Clock, Engine};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
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

/// Key of the checkpoint record in each state partition. Not valid UTF-8, so it can
/// never be a session id.
pub const CLOCK_KEY: &[u8] = b"\xffloopguard-clock";

/// The record under `CLOCK_KEY`, written with every checkpoint: the engine's clock and the
/// events offset the sessions' records are current to (the next event to process).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    #[serde(flatten)]
    pub clock: Clock,
    /// Absent in records of versions that wrote state with every batch: nothing to re-run.
    #[serde(default)]
    pub offset: Option<i64>,
}

/// Where the restored state stands: `Some(offset)` at a checkpoint, `Fresh` when the state
/// partition holds no checkpoint (events from the start of the partition are re-run),
/// `Current` for a record that needs nothing re-run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoredAt {
    Fresh,
    Offset(i64),
    Current,
}

/// Longest a restore may take before the instance gives up (and is restarted).
const RESTORE_LIMIT: Duration = Duration::from_secs(600);

/// Reads `partition` of `topic` from `from` until the position reaches `until` (exclusive),
/// handing each record to `each`. With read_committed, waiting for the position (not for
/// the first partition end, which is the last stable offset) means every transaction
/// started before `until` was taken is decided, committed or aborted.
fn read_range(
    reader: &StateReader,
    topic: &str,
    partition: i32,
    from: Offset,
    until: i64,
    mut each: impl FnMut(&BorrowedMessage<'_>),
) -> Result<(), KafkaError> {
    let c = &reader.consumer;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, from)?;
    c.assign(&tpl)?;
    let started = Instant::now();
    let result = loop {
        if started.elapsed() > RESTORE_LIMIT {
            break Err(KafkaError::Global(
                rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
            ));
        }
        match c.poll(Duration::from_millis(200)) {
            // A record fetched for an earlier assignment of this reader is not ours.
            Some(Ok(m)) if m.topic() != topic || m.partition() != partition => {}
            Some(Ok(m)) if m.offset() >= until => break Ok(()),
            Some(Ok(m)) => {
                each(&m);
                if m.offset() + 1 >= until {
                    break Ok(());
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
                if position.is_some_and(|p| p >= until) {
                    break Ok(());
                }
            }
            Some(Err(e)) => break Err(e),
        }
    };
    c.unassign()?;
    result
}

/// Restores every session of `partition`'s last checkpoint into `engine`; returns it with
/// where the checkpoint stands.
pub fn restore_partition(
    reader: &StateReader,
    topic: &str,
    partition: i32,
    mut engine: Engine,
) -> Result<(Engine, RestoredAt), KafkaError> {
    let (low, high) =
        reader
            .consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(10))?;
    if high <= low {
        return Ok((engine, RestoredAt::Fresh));
    }
    let mut checkpoint: Option<Checkpoint> = None;
    // Up to the high watermark taken now: the previous owner's last transaction may be
    // committed without its markers written yet.
    read_range(reader, topic, partition, Offset::Beginning, high, |m| {
        if m.key() == Some(CLOCK_KEY) {
            if let Some(c) = m.payload().and_then(|p| serde_json::from_slice(p).ok()) {
                checkpoint = Some(c);
            }
            return;
        }
        let Some(key) = m.key().map(|k| String::from_utf8_lossy(k).into_owned()) else {
            return;
        };
        match m.payload() {
            Some(bytes) => {
                if let Err(e) = engine.restore(&key, bytes) {
                    tracing::warn!(session = %key, error = %e, "unreadable state record skipped")
                }
            }
            None => engine.forget(&key),
        }
    })?;
    let at = match checkpoint {
        None => RestoredAt::Fresh,
        Some(Checkpoint { clock, offset }) => {
            engine.restore_clock(clock);
            offset.map_or(RestoredAt::Current, RestoredAt::Offset)
        }
    };
    Ok((engine, at))
}

/// Re-runs the events of `partition` from `from` up to `until` (exclusive) through
/// `engine` and drops the verdicts: they were committed with those offsets. The engine is
/// deterministic, so this rebuilds exactly the state its predecessor had at `until`.
/// Undecodable events are skipped as the predecessor skipped them (to the dead letters).
/// Returns how many events were re-run.
pub fn replay_events(
    reader: &StateReader,
    topic: &str,
    partition: i32,
    from: Offset,
    until: i64,
    engine: &mut Engine,
) -> Result<u64, KafkaError> {
    let mut replayed = 0u64;
    let mut scratch = Vec::new();
    read_range(reader, topic, partition, from, until, |m| {
        if let Some(Ok(event)) = m.payload().map(|p| Event::decode_keyed(p, m.key())) {
            engine.handle_event(event, &mut scratch);
            scratch.clear();
            replayed += 1;
        }
    })?;
    Ok(replayed)
}
