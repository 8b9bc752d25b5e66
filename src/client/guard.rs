//! `Guard`: one producer and one verdict reader per process. `publish` sends events (checked
//! by the engine's own decoder first: nothing invalid is sent); `check` sends a tool call
//! and waits for its answer, failing open at the caller's deadline.

use super::pending::Settled;
use super::reader::{self, Shared};
use super::settings::GuardSettings;
use super::verdict::Verdict;
use crate::engine::event::{DecodeError, Event};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;
use rdkafka::ClientConfig;
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach Kafka at {servers}: {detail}")]
    Unreachable { servers: String, detail: String },
    #[error("topic `{0}` does not exist (create the topics: loopguard topics create)")]
    MissingTopic(String),
    #[error("the broker refuses {operation} on topic `{topic}` to this principal (grant it: loopguard topics acls)")]
    Refused {
        topic: String,
        operation: &'static str,
    },
    #[error("`{events}` has {events_n} partitions and `{verdicts}` {verdicts_n}: the contract needs the same number")]
    PartitionMismatch {
        events: String,
        events_n: usize,
        verdicts: String,
        verdicts_n: usize,
    },
    /// The event breaks the contract; nothing was sent. `reason` is the dead-letter reason
    /// the guard would have given it.
    #[error("{reason}: {detail}")]
    InvalidEvent {
        reason: &'static str,
        detail: String,
    },
    #[error("the broker did not take the event: {0}")]
    NotAcknowledged(String),
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// A setting that cannot work (a topic template without its tenant); nothing connected.
    #[error("{0}")]
    Settings(#[from] super::settings::SettingsError),
}

impl ClientError {
    fn invalid(e: DecodeError) -> Self {
        ClientError::InvalidEvent {
            reason: e.reason(),
            detail: e.to_string(),
        }
    }
}

/// Why a call was let run without the guard's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailOpen {
    /// `unacknowledged`: the broker did not take the call in time; `deadline`: the guard did
    /// not judge it in time (down or far behind).
    pub reason: &'static str,
    pub detail: String,
}

/// The answer to a tool call.
#[derive(Debug, Clone)]
pub enum Answer {
    /// An enforced verdict on the call: act on it (block and abort refuse the call).
    Verdict(Arc<Verdict>),
    /// Judged, nothing to say: run the tool.
    NoVerdict,
    /// No answer by the deadline: run the tool, and count it.
    FailOpen(FailOpen),
}

pub struct Guard {
    producer: FutureProducer,
    shared: Arc<Shared>,
    settings: GuardSettings,
    partitions: usize,
    reader: Option<std::thread::JoinHandle<()>>,
    /// Why verdicts cannot be read (the broker refuses Read on the verdicts topic): every
    /// call is published and answered fail-open at once, said once at connect.
    refused: Option<String>,
}

impl Guard {
    /// Connects: learns both topics (equal partition counts), where each verdict partition
    /// ends, and starts reading them all. Blocking; at most `startup_timeout` per request.
    /// A topic template (`agent-events.{tenant}`) is its tenant's topic: without a tenant,
    /// `ClientError::Settings` before anything connects.
    pub fn connect(settings: GuardSettings) -> Result<Guard, ClientError> {
        let settings = settings.resolved()?;
        let unreachable = |e: KafkaError| ClientError::Unreachable {
            servers: settings.bootstrap_servers.clone(),
            detail: e.to_string(),
        };
        let mut base = ClientConfig::new();
        base.set("bootstrap.servers", &settings.bootstrap_servers)
            // A fresh client's first request otherwise waits out half this backoff
            // (docs/decisions.md, "A fresh process's first call").
            .set("reconnect.backoff.ms", "10")
            .set("log_level", "3");
        let mut reader_config = base.clone();
        reader_config
            .set(
                "group.id",
                format!("loopguard-edge-reader-{}", std::process::id()),
            )
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set(
                "isolation.level",
                if settings.read_uncommitted {
                    "read_uncommitted"
                } else {
                    "read_committed"
                },
            )
            // A long poll: the broker answers as soon as a verdict or marker (or the commit
            // that makes one visible) arrives; idle, 2 requests a second.
            .set("fetch.wait.max.ms", "500")
            .set("fetch.error.backoff.ms", "10");
        let mut producer_config = base;
        producer_config
            .set("acks", "all")
            // One request in flight keeps each session's events in order across retries; a
            // retry that doubles an event is dropped by the guard (`event_id`).
            .set("max.in.flight.requests.per.connection", "1")
            .set("linger.ms", "1")
            // Java's partitioner (murmur2): a session lands where the other clients put it.
            .set("partitioner", "murmur2_random");
        for (k, v) in &settings.properties {
            reader_config.set(k, v);
            producer_config.set(k, v);
        }
        let consumer: BaseConsumer = reader_config.create().map_err(unreachable)?;
        let timeout = settings.startup_timeout;
        let count = |topic: &str, operation| -> Result<usize, ClientError> {
            let md = consumer
                .fetch_metadata(Some(topic), timeout)
                .map_err(unreachable)?;
            let t = md.topics().first();
            if t.and_then(|t| t.error())
                .map(rdkafka::types::RDKafkaErrorCode::from)
                == Some(rdkafka::types::RDKafkaErrorCode::TopicAuthorizationFailed)
            {
                return Err(ClientError::Refused {
                    topic: topic.to_string(),
                    operation,
                });
            }
            t.filter(|t| t.error().is_none() && !t.partitions().is_empty())
                .map(|t| t.partitions().len())
                .ok_or_else(|| ClientError::MissingTopic(topic.to_string()))
        };
        let events_n = count(&settings.events_topic, "Write")?;
        let verdicts_n = match count(&settings.verdicts_topic, "Read") {
            // Calls still go to the guard; their answers cannot be read: fail open.
            Err(e @ ClientError::Refused { .. }) => {
                tracing::warn!(error = %e, "verdicts cannot be read: every call is allowed (fail open) until this is granted and the client restarted");
                let producer: FutureProducer = producer_config.create().map_err(unreachable)?;
                return Ok(Guard {
                    producer,
                    shared: Arc::new(Shared::default()),
                    settings,
                    partitions: events_n,
                    reader: None,
                    refused: Some(e.to_string()),
                });
            }
            other => other?,
        };
        if events_n != verdicts_n {
            return Err(ClientError::PartitionMismatch {
                events: settings.events_topic.clone(),
                events_n,
                verdicts: settings.verdicts_topic.clone(),
                verdicts_n,
            });
        }
        // Where each verdict partition ends now: nothing written for a call made after this
        // can be missed.
        let mut start = Vec::with_capacity(verdicts_n);
        for p in 0..verdicts_n as i32 {
            let (_, high) = consumer
                .fetch_watermarks(&settings.verdicts_topic, p, timeout)
                .map_err(unreachable)?;
            start.push((p, high));
        }
        let producer: FutureProducer = producer_config.create().map_err(unreachable)?;
        // The events topic's leaders, learned now rather than by the first event.
        producer
            .client()
            .fetch_metadata(Some(&settings.events_topic), timeout)
            .map_err(unreachable)?;
        let shared = Arc::new(Shared::default());
        let reader = reader::spawn(
            consumer,
            &settings.verdicts_topic,
            &start,
            Arc::clone(&shared),
        )?;
        Ok(Guard {
            producer,
            shared,
            settings,
            partitions: events_n,
            reader: Some(reader),
            refused: None,
        })
    }

    /// Partitions of the events (and verdicts) topic.
    pub fn partitions(&self) -> usize {
        self.partitions
    }

    /// The settings, each topic as its tenant's (templates substituted).
    pub fn settings(&self) -> &GuardSettings {
        &self.settings
    }

    /// Checks an event against the contract: its session id, event id and type.
    pub fn validate(event: &Value) -> Result<Event, ClientError> {
        let bytes = serde_json::to_vec(event).map_err(|e| ClientError::InvalidEvent {
            reason: "invalid_json",
            detail: e.to_string(),
        })?;
        Event::decode(&bytes).map_err(ClientError::invalid)
    }

    /// Publishes events in order, each once the previous is handed to the producer, and
    /// waits until the broker acknowledged every one (or `within` passed). All are checked
    /// first: one invalid event and none is sent.
    pub async fn publish(&self, events: &[Value], within: Duration) -> Result<(), ClientError> {
        let mut decoded = Vec::with_capacity(events.len());
        for (i, e) in events.iter().enumerate() {
            let ev = Self::validate(e).map_err(|err| match err {
                ClientError::InvalidEvent { reason, detail } if events.len() > 1 => {
                    ClientError::InvalidEvent {
                        reason,
                        detail: format!("event {i}: {detail}"),
                    }
                }
                other => other,
            })?;
            decoded.push(ev);
        }
        let mut deliveries = Vec::with_capacity(events.len());
        for (raw, ev) in events.iter().zip(&decoded) {
            deliveries.push(self.send(raw, &ev.meta.session_id)?);
        }
        let deadline = tokio::time::Instant::now() + within;
        for d in deliveries {
            match tokio::time::timeout_at(deadline, d).await {
                Ok(Ok(Ok(_))) => {}
                Ok(Ok(Err((e, _)))) => return Err(ClientError::NotAcknowledged(e.to_string())),
                Ok(Err(_)) => return Err(ClientError::NotAcknowledged("producer closed".into())),
                Err(_) => {
                    return Err(ClientError::NotAcknowledged(format!(
                        "no acknowledgement within {} ms",
                        within.as_millis()
                    )))
                }
            }
        }
        Ok(())
    }

    /// Publishes an event and waits for the guard's answer on it at most `deadline`; never
    /// longer. For a `tool_call`, whether to run it; for a `tool_result` (or any event), the
    /// verdict it brought (a steer on a repeated error) or none. Only an invalid event is an
    /// error (nothing sent).
    pub async fn check(&self, event: &Value, deadline: Duration) -> Result<Answer, ClientError> {
        let started = Instant::now();
        let ev = Self::validate(event)?;
        let event_id = ev.meta.event_id.as_str();
        let answer = self.shared.pending.lock().unwrap().register(event_id);
        let delivery = self.send(event, &ev.meta.session_id)?;
        let until = tokio::time::Instant::from_std(started + deadline);
        let fail_open = |reason, detail| {
            self.shared.pending.lock().unwrap().forget(event_id);
            Ok(Answer::FailOpen(FailOpen { reason, detail }))
        };
        if let Some(why) = &self.refused {
            return fail_open("verdicts_refused", why.clone());
        }
        match tokio::time::timeout_at(until, delivery).await {
            Ok(Ok(Ok((partition, offset)))) => {
                self.shared
                    .pending
                    .lock()
                    .unwrap()
                    .delivered(event_id, partition, offset);
            }
            Ok(Ok(Err((e, _)))) => return fail_open("unacknowledged", e.to_string()),
            Ok(Err(_)) => return fail_open("unacknowledged", "producer closed".into()),
            Err(_) => {
                return fail_open(
                    "unacknowledged",
                    format!(
                        "the broker did not take the call within {} ms",
                        deadline.as_millis()
                    ),
                )
            }
        }
        match tokio::time::timeout_at(until, answer).await {
            Ok(Ok(Settled::Verdict(v))) => Ok(Answer::Verdict(v)),
            Ok(Ok(Settled::Judged)) => Ok(Answer::NoVerdict),
            Ok(Err(_)) => fail_open(
                "deadline",
                "the wait was replaced by a retry of the call".into(),
            ),
            Err(_) => fail_open(
                "deadline",
                format!(
                    "the guard did not judge the call within {} ms (down or far behind)",
                    deadline.as_millis()
                ),
            ),
        }
    }

    /// Every verdict of the session from now on, observed ones included.
    pub fn subscribe(&self, session_id: &str) -> broadcast::Receiver<Arc<Verdict>> {
        self.shared.subscribe(session_id)
    }

    /// Calls waiting for their answer now.
    pub fn pending(&self) -> usize {
        self.shared.pending.lock().unwrap().len()
    }

    /// Verdicts and markers read so far.
    pub fn read_counts(&self) -> (u64, u64) {
        (
            self.shared.verdicts.load(Ordering::Relaxed),
            self.shared.markers.load(Ordering::Relaxed),
        )
    }

    fn send(
        &self,
        event: &Value,
        session_id: &str,
    ) -> Result<rdkafka::producer::DeliveryFuture, ClientError> {
        let payload = serde_json::to_vec(event).expect("a JSON value serialises");
        let record = FutureRecord::to(&self.settings.events_topic)
            .key(session_id)
            .payload(&payload);
        self.producer
            .send_result(record)
            .map_err(|(e, _)| ClientError::NotAcknowledged(e.to_string()))
    }

    /// Sends what is queued (at most `within`) and stops the reader.
    pub fn close(mut self, within: Duration) {
        let _ = self.producer.flush(Timeout::After(within));
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}
