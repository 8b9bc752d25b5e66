//! The consumer side of the service: decode -> engine -> encode, one engine per owned
//! partition. The batch commit that makes verdicts, state and offsets one transaction is in
//! `commit.rs`; the rebalance callbacks that drive it all are in `rebalance.rs`.

mod commit;
mod markers;
mod pace;
mod policy;
mod restore;
mod rewind;

use super::retry::Retries;
use crate::config::{Config, Delivery};
use crate::engine::event::format_ts;
use crate::service::records::dead_letter::{read_event_of, DeadLetter, Rejected, Source};
use crate::service::shared::Shared;
use crate::service::state::partition::Part;
use crate::service::state::restore::StateReader;
use crate::service::txn::{send_dead_letter, TxnProducer};
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything the consumer thread mutates; reached from the loop and from rebalance callbacks.
pub struct Worker {
    cfg: Arc<Config>,
    shared: Arc<Shared>,
    producer: TxnProducer,
    reader: StateReader,
    parts: BTreeMap<i32, Part>,
    batch_events: usize,
    /// When the last batch was committed or handed off: the commit interval runs from here.
    interval_started: Instant,
    /// The latest time read (after each event, or `tick` when the consumer had none): the
    /// batch's due time is judged on it rather than on a clock read of its own.
    now: Instant,
    clock: WallClock,
    /// The partitions of the batch whose commit is in flight, with the last offset of each.
    in_flight_batch: Vec<(i32, i64)>,
    in_flight_since: Instant,
    verdicts: Vec<crate::engine::verdict::Verdict>,
    /// Verdicts of the burst in progress, written with its markers (`markers.rs`).
    held: Vec<Held>,
    /// Since when judged events wait for their judged-through marker (`markers.rs`).
    markers_owed_since: Option<Instant>,
    /// How far behind its events the thread is (`pace.rs`).
    pace: pace::Pace,
    /// A batch failed: the engines are ahead of the last commit. Nothing commits until the
    /// loop has rewound them (`take_next`, `rewind`).
    rewind_owed: bool,
    /// Why the thread must stop (its producer was fenced, say), for the loop (`take_next`).
    stop_owed: Option<String>,
    /// Failed attempts per partition, records to process alone or to give up.
    retries: Retries,
    /// The largest dead letter written.
    dlq_limit: usize,
    /// The latest policy version this thread has picked up (`policy.rs`).
    live: Arc<crate::service::policy_feed::LivePolicy>,
    /// The thread's name, for the admin view of the policy in force.
    thread: String,
    /// Where each tenant's verdicts go (`tenant_topics`).
    topics: crate::service::kafka::tenant_topics::VerdictTopics,
    /// The tenant whose own events topic this thread reads (`kafka.events_topic_template`):
    /// every event it judges is that tenant's; `None` on the shared events topic.
    tenant: Option<Arc<str>>,
}

/// A verdict judged in the burst in progress, written with the burst's markers.
pub struct Held {
    pub partition: i32,
    /// The verdicts topic it goes to (its tenant's, with tenant isolation).
    pub topic: std::sync::Arc<str>,
    pub key: String,
    pub payload: Vec<u8>,
}

/// What the stream loop must do before its next event, owed by a failed batch or from
/// inside a rebalance callback (`Worker::must_rewind`, `must_stop`). A stop outranks a
/// rewind.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Go on consuming.
    Go,
    /// A batch failed: the engines are ahead of the last commit. Nothing commits until the
    /// loop has rewound them (`rewind`).
    Rewind,
    /// The thread cannot go on (its producer was fenced, say): stop with this reason.
    Stop(String),
}

impl Worker {
    /// The engines must be rewound to the last commit before anything else.
    pub fn must_rewind(&mut self) {
        self.rewind_owed = true;
    }

    /// The thread must stop (the first reason given is kept).
    fn must_stop(&mut self, why: String) {
        self.stop_owed.get_or_insert(why);
    }

    /// What the loop must do now. A stop is said once; a rewind stays owed until `rewind`
    /// has brought the engines back to the last commit (nothing commits meanwhile).
    pub fn take_next(&mut self) -> Next {
        if let Some(why) = self.stop_owed.take() {
            return Next::Stop(why);
        }
        if self.rewind_owed {
            return Next::Rewind;
        }
        Next::Go
    }

    pub fn new(
        cfg: Arc<Config>,
        shared: Arc<Shared>,
        producer: TxnProducer,
        reader: StateReader,
    ) -> Self {
        let tenant: Option<Arc<str>> = cfg
            .kafka
            .tenant_of_events_topic(&cfg.kafka.events_topic)
            .map(Arc::from);
        let live = shared.policy.latest().unwrap_or_else(|| {
            Arc::new(crate::service::policy_feed::LivePolicy::from_config(&cfg))
        });
        Worker {
            shared,
            producer,
            reader,
            parts: BTreeMap::new(),
            batch_events: 0,
            interval_started: Instant::now(),
            now: Instant::now(),
            clock: WallClock::new(),
            in_flight_batch: Vec::new(),
            in_flight_since: Instant::now(),
            verdicts: Vec::new(),
            held: Vec::new(),
            markers_owed_since: None,
            pace: pace::Pace::default(),
            rewind_owed: false,
            stop_owed: None,
            retries: Retries::new(cfg.kafka.max_record_retries.get()),
            dlq_limit: cfg.dlq_limit(),
            live,
            topics: crate::service::kafka::tenant_topics::VerdictTopics::new(
                &cfg.kafka,
                tenant.as_deref(),
            ),
            tenant,
            thread: std::thread::current()
                .name()
                .unwrap_or("stream")
                .to_string(),
            cfg,
        }
        .with_policy_noted()
    }

    fn eos(&self) -> bool {
        self.cfg.kafka.delivery == Delivery::ExactlyOnce
    }

    fn update_session_gauge(&self) {
        self.shared.refresh_session_gauge();
    }

    /// Pipelined commits send their offsets under the membership `source` holds then.
    pub fn read_membership_from(
        &self,
        source: Box<dyn crate::service::txn::membership::Membership>,
    ) {
        self.producer.read_membership_from(source);
    }

    /// How the instance names `partition` of this thread's events topic.
    pub fn key(&self, partition: i32) -> crate::service::shared::PartKey {
        crate::service::shared::PartKey::new(&self.tenant, partition)
    }

    /// True when this thread owns `partition`.
    pub fn owns(&self, partition: i32) -> bool {
        self.parts.contains_key(&partition)
    }

    /// Handles one consumed event: engine, then verdicts (or a dead letter) into the batch.
    /// A record that failed before is processed alone, in its own transaction, and one
    /// that failed `max_record_retries` times is given up (dead-lettered minimally).
    pub fn process<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        msg: &BorrowedMessage<'_>,
    ) -> Result<(), KafkaError> {
        let partition = msg.partition();
        if !self.parts.contains_key(&partition) {
            // A restore can wait for a crashed owner's transaction: never with ours open.
            self.commit(consumer)?;
            let committed = self.committed(consumer, &[partition])?;
            self.restore_all(&committed)?;
        }
        if self.retries.isolated(partition, msg.offset()) {
            // Commit what came before, so a failure from here on is this record's own.
            self.commit(consumer)?;
            self.retries.alone(partition, msg.offset());
            if let Err(e) = self.process_record(msg) {
                self.retries.failed(&e, []);
                return Err(e);
            }
            return self.commit(consumer);
        }
        if let Err(e) = self.process_record(msg) {
            let batch = self.batch_partitions();
            self.retries
                .failed(&e, batch.into_iter().chain([(partition, msg.offset())]));
            return Err(e);
        }
        Ok(())
    }

    /// Partitions with records in the open batch, each with the last offset it holds.
    fn batch_partitions(&self) -> Vec<(i32, i64)> {
        self.parts
            .iter()
            .filter_map(|(&p, part)| part.next_offset.map(|next| (p, next - 1)))
            .collect()
    }

    fn process_record(&mut self, msg: &BorrowedMessage<'_>) -> Result<(), KafkaError> {
        let partition = msg.partition();
        self.producer.begin()?;
        self.apply_policy(partition, msg.offset())?;
        let m = &self.shared.metrics;
        let given_up = self.retries.take_given_up(partition, msg.offset());
        let decoded = read_event_of(self.tenant.as_deref(), msg.key(), msg.payload());
        let judged = !given_up && decoded.is_ok();
        // Whether a runtime may be waiting on this record's answer: its marker then goes
        // out with the burst, else with the batch's commit (`markers.rs`). A record that
        // is not judged normally (a dead letter) is answered at once.
        let mut awaited = !judged;
        // Where this event's verdicts and marker go; an event whose tenant has no topic
        // is judged all the same and dead-lettered with the reason (`tenant_topics`).
        let mut topic = self.topics.plain().clone();
        if let (false, Ok(event)) = (given_up, &decoded) {
            let producer = self.producer.producer();
            let routed = self.topics.for_tenant(
                &self.cfg.kafka,
                event.meta.tenant.as_deref(),
                // The latest time read: a clock read per event is not needed to re-ask
                // for a missing topic after 10 s.
                self.now,
                |name| topic_writable(producer, name),
            );
            match routed {
                Ok(t) => topic = t,
                Err(rejected) => {
                    awaited = true;
                    m.dead_letter.with_label_values(&[rejected.reason]).inc();
                    self.dead_letter(msg, &rejected)?;
                }
            }
        }
        match decoded {
            _ if given_up => {
                m.dead_letter.with_label_values(&["retry_limit"]).inc();
                let rejected = Rejected {
                    reason: "retry_limit",
                    detail: format!(
                        "given up after {} failed retries; the record stays at its source offset",
                        self.cfg.kafka.max_record_retries
                    ),
                };
                tracing::error!(
                    partition,
                    offset = msg.offset(),
                    "record given up after repeated failures: dead-lettered minimally"
                );
                self.send_dead_letter(&DeadLetter::minimal(source(msg), &rejected))?;
                // Its sessions' state goes on as a restore's re-run will have it; its
                // verdicts, if any, are not written.
                if let (Ok(event), Some(part)) = (decoded, self.parts.get_mut(&partition)) {
                    self.verdicts.clear();
                    part.engine.handle_event(event, &mut self.verdicts);
                    self.verdicts.clear();
                    part.engine.take_spending();
                }
            }
            Err(rejected) => {
                m.events_malformed
                    .with_label_values(&[rejected.reason])
                    .inc();
                m.dead_letter.with_label_values(&[rejected.reason]).inc();
                self.dead_letter(msg, &rejected)?;
            }
            Ok(event) => {
                m.on_consumed(event.body.kind());
                let event_ms = event.meta.ts_ms;
                let part = self.parts.get_mut(&partition).expect("restored above");
                let started = Instant::now();
                awaited |= crate::service::records::marker::awaited(&event.body);
                self.verdicts.clear();
                part.engine.handle_event(event, &mut self.verdicts);
                awaited |= !self.verdicts.is_empty();
                for spending in part.engine.take_spending() {
                    m.loop_cost.on_spending(&spending);
                    self.shared
                        .demotions
                        .on_spending(&spending, &self.live.set.global().demotion);
                }
                self.now = Instant::now();
                m.event_processing
                    .observe(self.now.duration_since(started).as_secs_f64());
                let now_ms = self.clock.ms_at(self.now);
                if event_ms - now_ms > CLOCK_AHEAD_MS {
                    m.events_ahead_of_clock.inc();
                }
                let mut verdicts = std::mem::take(&mut self.verdicts);
                for mut v in verdicts.drain(..) {
                    v.emitted_at = Some(format_ts(now_ms));
                    let payload = serde_json::to_vec(&v).unwrap_or_default();
                    m.on_verdict(&v);
                    m.event_to_verdict
                        .observe(((now_ms - event_ms).max(0) as f64) / 1000.0);
                    self.held.push(Held {
                        partition,
                        topic: topic.clone(),
                        key: std::mem::take(&mut v.session_id),
                        payload,
                    });
                }
                self.verdicts = verdicts;
            }
        }
        if !judged {
            // Dead letters and given-up records did not read the clock above.
            self.now = Instant::now();
        }
        let now_ms = self.clock.ms_at(self.now);
        self.pace.waited(msg.timestamp().to_millis(), now_ms);
        if let Some(part) = self.parts.get_mut(&partition) {
            part.processed(msg.offset());
            // Judged, whatever became of it: its marker says so (docs/contract.md).
            part.judged.judged(msg.offset(), &topic);
            if awaited {
                self.markers_owed_since.get_or_insert(self.now);
            }
        }
        self.batch_events += 1;
        Ok(())
    }

    /// Writes `msg`'s dead letter, bounded to fit the topic; when the producer refuses it
    /// anyway, a minimal one instead.
    fn dead_letter(
        &self,
        msg: &BorrowedMessage<'_>,
        rejected: &Rejected,
    ) -> Result<(), KafkaError> {
        let headers: Vec<(&str, Option<&[u8]>)> = msg
            .headers()
            .map(|h| h.iter().map(|h| (h.key, h.value)).collect())
            .unwrap_or_default();
        let letter = DeadLetter::new(
            source(msg),
            msg.key(),
            msg.payload(),
            &headers,
            rejected,
            self.dlq_limit,
        );
        if let Err(e) = self.send_dead_letter(&letter) {
            tracing::error!(
                error = %e,
                partition = msg.partition(),
                offset = msg.offset(),
                bytes = letter.size(),
                "dead letter refused: writing a minimal one"
            );
            self.send_dead_letter(&DeadLetter::minimal_marked(source(msg), rejected))?;
        }
        Ok(())
    }

    fn send_dead_letter(&self, letter: &DeadLetter<'_>) -> Result<(), KafkaError> {
        send_dead_letter(self.producer.producer(), &self.cfg.kafka.dlq_topic, letter)
    }
}

/// An event stamped further ahead of the guard's clock than this is counted: its runtime's
/// clock is off, and it moves its partition's event time (docs/service.md).
const CLOCK_AHEAD_MS: i64 = 5 * 60 * 1000;

fn source<'a>(msg: &'a BorrowedMessage<'_>) -> Source<'a> {
    Source {
        topic: msg.topic(),
        partition: msg.partition(),
        offset: msg.offset(),
    }
}

/// The guard's own wall clock, for `emitted_at` and latency only (never for detection):
/// derived from the monotonic time already read for each event, read again at most once
/// a second (so a stepped or slewed system clock is followed within a second).
struct WallClock {
    anchor: Instant,
    anchor_ms: i64,
}

impl WallClock {
    const REREAD: Duration = Duration::from_secs(1);

    fn new() -> Self {
        WallClock {
            anchor: Instant::now(),
            anchor_ms: system_ms(),
        }
    }

    /// The wall clock in ms at `now`.
    fn ms_at(&mut self, now: Instant) -> i64 {
        let since = now.saturating_duration_since(self.anchor);
        if since >= Self::REREAD {
            *self = WallClock::new();
            return self.anchor_ms;
        }
        self.anchor_ms + since.as_millis() as i64
    }
}

fn system_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Whether the broker lists `topic` for this producer: `Err` says why not (missing, or
/// refused to this principal).
fn topic_writable(
    producer: &crate::service::txn::producer::GuardProducer,
    topic: &str,
) -> Result<(), String> {
    use rdkafka::producer::Producer;
    let md = producer
        .client()
        .fetch_metadata(Some(topic), Duration::from_secs(5))
        .map_err(|e| format!("no metadata: {e}"))?;
    match md.topics().first() {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => Ok(()),
        Some(t) => Err(match t.error() {
            Some(e) => rdkafka::types::RDKafkaErrorCode::from(e).to_string(),
            None => "no partitions".into(),
        }),
        None => Err("not listed by the broker".into()),
    }
}
