//! State hand-over: reading a partition's last checkpoint from the compacted state topic
//! (read_committed) into a fresh engine, then re-running the events between the checkpoint
//! and the committed offset, before the partition's first new event is processed.

use crate::engine::Engine;
use crate::service::kafka::outcome::Outcome;
use crate::service::records::checkpoint::{Checkpoint, CLOCK_KEY};
use crate::service::records::policy_change::{is_policy_key, keep_latest, PolicyChange};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The group-less consumers used for restores: `consumer` reads (read_committed), `probe`
/// asks for high watermarks (read_uncommitted: a read_committed client is told the last
/// stable offset instead, which stops short of a transaction whose markers are not written
/// yet, the previous owner's last one included).
pub struct StateReader {
    consumer: BaseConsumer<QuietEof>,
    probe: BaseConsumer<QuietEof>,
}

impl StateReader {
    pub fn new(consumer: BaseConsumer<QuietEof>, probe: BaseConsumer<QuietEof>) -> Self {
        StateReader { consumer, probe }
    }
}

/// Client context that does not log the partition-end events restores wait for.
pub struct QuietEof;

impl rdkafka::ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        let eof = matches!(error, KafkaError::PartitionEOF(_))
            || error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF);
        if !eof {
            tracing::error!(error = %error, reason, "state reader");
        }
    }
}

impl rdkafka::consumer::ConsumerContext for QuietEof {}

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

/// Reads each listed partition of `topic` from its `from` until its position reaches its
/// `until` (exclusive), all partitions in one pass, handing each record to `each`. With
/// read_committed, waiting for the position (not for the first partition end, which is the
/// last stable offset) means every transaction started before `until` was taken is
/// decided, committed or aborted.
fn read_ranges(
    reader: &StateReader,
    topic: &str,
    ranges: &BTreeMap<i32, (Offset, i64)>,
    mut each: impl FnMut(&BorrowedMessage<'_>),
) -> Result<(), KafkaError> {
    let mut open: BTreeMap<i32, i64> = ranges.iter().map(|(&p, &(_, until))| (p, until)).collect();
    if open.is_empty() {
        return Ok(());
    }
    let c = &reader.consumer;
    // The topic's leaders in the reader's own metadata cache before the assignment: a
    // partition with no known leader waits for librdkafka's next metadata refresh.
    c.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let mut tpl = TopicPartitionList::new();
    for (&p, &(from, _)) in ranges {
        tpl.add_partition_offset(topic, p, from)?;
    }
    c.assign(&tpl)?;
    let started = Instant::now();
    let mut trouble_since: Option<Instant> = None;
    let result = loop {
        if open.is_empty() {
            break Ok(());
        }
        if started.elapsed() > RESTORE_LIMIT {
            break Err(KafkaError::Global(
                rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
            ));
        }
        // Short polls: partition ends reach the client context, not this loop, so the
        // positions are looked at whenever a poll comes back empty.
        match c.poll(Duration::from_millis(10)) {
            Some(Ok(m)) if m.topic() != topic => {}
            Some(Ok(m)) => {
                trouble_since = None;
                // A record of a partition already done (or of an earlier assignment of
                // this reader) is not ours.
                let Some(&until) = open.get(&m.partition()) else {
                    continue;
                };
                if m.offset() < until {
                    each(&m);
                }
                if m.offset() + 1 >= until {
                    open.remove(&m.partition());
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {
                // Transaction markers take offsets no record is delivered for.
                for e in c.position()?.elements() {
                    if let (Offset::Offset(o), Some(&until)) =
                        (e.offset(), open.get(&e.partition()))
                    {
                        if e.topic() == topic && o >= until {
                            open.remove(&e.partition());
                        }
                    }
                }
            }
            // librdkafka reconnects by itself: a lost connection (often one reported late,
            // from an outage that is over) only costs time, up to `TROUBLE_LIMIT` without
            // a record in between (then the restore fails and is tried again by the
            // stream thread, which polls its consumer meanwhile).
            Some(Err(e)) if Outcome::of(&e) == Outcome::WaitForBroker => {
                let since = *trouble_since.get_or_insert_with(Instant::now);
                if since.elapsed() > TROUBLE_LIMIT {
                    break Err(e);
                }
                tracing::debug!(error = %e, "state reader: connection trouble, reading on")
            }
            Some(Err(e)) => break Err(e),
        }
    };
    c.unassign()?;
    result
}

/// How long the state reader reads on through connection errors with no record between.
const TROUBLE_LIMIT: Duration = Duration::from_secs(30);

/// A partition's engine at its last checkpoint, where that stands, and the policy recorded
/// as in force from it.
pub type RestoredCheckpoint = (Engine, RestoredAt, Option<PolicyChange>);

/// Restores the last checkpoint of each partition of `engines` from the state topic, all
/// in one read; returns the engines with where each checkpoint stands.
pub fn restore_partitions(
    reader: &StateReader,
    topic: &str,
    engines: BTreeMap<i32, Engine>,
) -> Result<BTreeMap<i32, RestoredCheckpoint>, KafkaError> {
    let mut ranges = BTreeMap::new();
    for &p in engines.keys() {
        let (low, high) = reader
            .probe
            .fetch_watermarks(topic, p, Duration::from_secs(10))?;
        // Up to the high watermark taken now: the previous owner's last transaction may be
        // committed without its markers written yet.
        if high > low {
            // From the low watermark as known: no offset lookup before the first fetch.
            ranges.insert(p, (Offset::Offset(low), high));
        }
    }
    let mut engines = engines;
    let mut checkpoints: BTreeMap<i32, Checkpoint> = BTreeMap::new();
    let mut policies: BTreeMap<i32, Option<PolicyChange>> = BTreeMap::new();
    read_ranges(reader, topic, &ranges, |m| {
        let p = m.partition();
        let Some(engine) = engines.get_mut(&p) else {
            return;
        };
        if m.key().is_some_and(is_policy_key) {
            keep_latest(policies.entry(p).or_default(), m.payload());
            return;
        }
        if m.key() == Some(CLOCK_KEY) {
            if let Some(c) = m.payload().and_then(|p| serde_json::from_slice(p).ok()) {
                checkpoints.insert(p, c);
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
    Ok(engines
        .into_iter()
        .map(|(p, mut engine)| {
            let at = match checkpoints.get(&p) {
                None => RestoredAt::Fresh,
                Some(&Checkpoint { clock, offset }) => {
                    engine.restore_clock(clock);
                    offset.map_or(RestoredAt::Current, RestoredAt::Offset)
                }
            };
            let policy = policies.remove(&p).flatten();
            let policy = apply_recorded(p, &mut engine, policy);
            (p, (engine, at, policy))
        })
        .collect())
}

/// Puts the partition's last recorded policy in force on its restored engine (before the
/// re-run after the checkpoint, which that policy judged); `None` when none is recorded or
/// this build cannot compile it (logged: the partition then records its switch to the
/// instance's version before its next event).
fn apply_recorded(
    partition: i32,
    engine: &mut Engine,
    change: Option<PolicyChange>,
) -> Option<PolicyChange> {
    let change = change?;
    match change.compile() {
        Ok(set) => {
            engine.set_policies(set);
            Some(change)
        }
        Err(problems) => {
            tracing::error!(partition, from_offset = change.from_offset, problems = %problems.join("; "), "recorded policy unreadable by this build");
            None
        }
    }
}

/// One partition of an assignment, restored: its engine, the group's committed offset,
/// where its checkpoint stood and how many events were re-run after it.
pub struct Restored {
    pub engine: Engine,
    pub committed: Option<i64>,
    pub at: RestoredAt,
    pub replayed: u64,
    /// The policy recorded as in force from the checkpoint on (`policy_record`).
    pub policy: Option<PolicyChange>,
}

/// Restores the partitions of one assignment together: their last checkpoints from the
/// state topic in one read, then the events from each checkpoint to the committed offset
/// re-run through the engine in one read (their verdicts were committed by the previous
/// owner). `engine` makes a fresh engine; `eos` says checkpoints and offsets commit together.
pub fn restore_assignment(
    reader: &StateReader,
    state_topic: &str,
    events_topic: &str,
    tenant: Option<&str>,
    committed: &BTreeMap<i32, Option<i64>>,
    engine: impl Fn() -> Engine,
    eos: bool,
) -> Result<BTreeMap<i32, Restored>, KafkaError> {
    let fresh = committed.keys().map(|&p| (p, engine())).collect();
    let restored = restore_partitions(reader, state_topic, fresh)?;
    let (mut engines, mut ranges, mut checkpoints) =
        (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    let mut policies = BTreeMap::new();
    for (p, (mut engine, at, policy)) in restored {
        policies.insert(p, policy);
        engine.take_changes();
        let committed = committed.get(&p).copied().flatten();
        if let (RestoredAt::Offset(c), Some(o), true) = (at, committed, eos) {
            if c > o {
                // Exactly-once commits a checkpoint with its offset; this would be a bug.
                tracing::error!(
                    partition = p,
                    checkpoint = c,
                    committed = o,
                    "checkpoint ahead of the committed offset"
                );
            }
        }
        let from = match (at, committed) {
            (RestoredAt::Offset(c), Some(o)) if o > c => Some(Offset::Offset(c)),
            (RestoredAt::Fresh, Some(o)) if o > 0 => Some(Offset::Beginning),
            _ => None,
        };
        if let (Some(from), Some(until)) = (from, committed) {
            ranges.insert(p, (from, until));
        }
        checkpoints.insert(p, at);
        engines.insert(p, engine);
    }
    let replayed = replay_events(reader, events_topic, tenant, &ranges, &mut engines)?;
    Ok(engines
        .into_iter()
        .map(|(p, engine)| {
            let restored = Restored {
                engine,
                committed: committed.get(&p).copied().flatten(),
                at: checkpoints[&p],
                replayed: replayed.get(&p).copied().unwrap_or(0),
                policy: policies.remove(&p).flatten(),
            };
            (p, restored)
        })
        .collect())
}

/// Re-runs the events of each partition of `ranges` from its `from` up to its `until`
/// (exclusive) through its engine, all partitions in one read, and drops the verdicts:
/// they were committed with those offsets. The engine is deterministic, so this rebuilds
/// exactly the state its predecessor had at `until`. Records the service does not judge
/// (`dlq::read_event_of`, with the tenant whose own events topic it is) are skipped as the
/// predecessor skipped them (to the dead letters). Returns how many events each partition
/// re-ran.
pub fn replay_events(
    reader: &StateReader,
    topic: &str,
    tenant: Option<&str>,
    ranges: &BTreeMap<i32, (Offset, i64)>,
    engines: &mut BTreeMap<i32, Engine>,
) -> Result<BTreeMap<i32, u64>, KafkaError> {
    let mut replayed: BTreeMap<i32, u64> = ranges.keys().map(|&p| (p, 0)).collect();
    let mut scratch = Vec::new();
    read_ranges(reader, topic, ranges, |m| {
        let Some(engine) = engines.get_mut(&m.partition()) else {
            return;
        };
        let read =
            crate::service::records::dead_letter::read_event_of(tenant, m.key(), m.payload());
        if let Ok(event) = read {
            engine.handle_event(event, &mut scratch);
            scratch.clear();
            // Counted by the instance that judged it first.
            engine.take_spending();
            *replayed.entry(m.partition()).or_default() += 1;
        }
    })?;
    Ok(replayed)
}
