//! The verdict reader: a thread reading every partition of the verdicts topic from where it
//! ended at start-up, feeding markers and verdicts to the pending calls, and each verdict
//! (observed ones too) to the session's subscribers, once each (de-duplicated on its id).

use super::pending::Pending;
use super::verdict::Verdict;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use serde::Deserialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

/// The header and value kind of a judged-through marker (docs/contract.md).
const MARKER_HEADER: &str = "loopguard-kind";
const MARKER_KIND: &[u8] = b"judged";
/// Verdict ids remembered for de-duplication.
const SEEN_CAPACITY: usize = 100_000;
/// Subscribed sessions kept before those with no subscriber left are pruned.
const PRUNE_AT: usize = 1024;
/// Verdicts buffered per subscriber before a slow one misses some (it is told how many).
const SUBSCRIBER_BUFFER: usize = 256;

/// What the reader shares with the `Guard`.
#[derive(Default)]
pub struct Shared {
    pub pending: Mutex<Pending>,
    subscribers: Mutex<HashMap<String, broadcast::Sender<Arc<Verdict>>>>,
    pub stop: AtomicBool,
    /// Records read that were neither a verdict nor a marker (a later version's).
    pub unreadable: AtomicU64,
    pub verdicts: AtomicU64,
    pub markers: AtomicU64,
}

impl Shared {
    /// Every verdict of `session_id` from now on, observed ones included.
    pub fn subscribe(&self, session_id: &str) -> broadcast::Receiver<Arc<Verdict>> {
        let mut subs = self.subscribers.lock().unwrap();
        if subs.len() >= PRUNE_AT {
            // Streams closed on sessions that never got a verdict since: forget them.
            subs.retain(|_, tx| tx.receiver_count() > 0);
        }
        subs.entry(session_id.to_string())
            .or_insert_with(|| broadcast::channel(SUBSCRIBER_BUFFER).0)
            .subscribe()
    }

    fn publish(&self, v: &Arc<Verdict>) {
        let mut subs = self.subscribers.lock().unwrap();
        if let Some(tx) = subs.get(&v.session_id) {
            if tx.send(Arc::clone(v)).is_err() {
                subs.remove(&v.session_id); // its last subscriber left
            }
        }
    }
}

#[derive(Deserialize)]
struct Marker {
    partition: i32,
    through_offset: i64,
}

/// Assigns every partition of `topic` at the given start offsets and reads until `stop`.
pub fn spawn(
    consumer: BaseConsumer,
    topic: &str,
    start: &[(i32, i64)],
    shared: Arc<Shared>,
) -> rdkafka::error::KafkaResult<std::thread::JoinHandle<()>> {
    let mut tpl = TopicPartitionList::new();
    for &(p, o) in start {
        tpl.add_partition_offset(topic, p, Offset::Offset(o))?;
    }
    consumer.assign(&tpl)?;
    Ok(std::thread::Builder::new()
        .name("loopguard-verdicts".into())
        .spawn(move || read(consumer, shared))
        .expect("spawn the verdict reader"))
}

fn read(consumer: BaseConsumer, shared: Arc<Shared>) {
    let mut seen = Seen::default();
    while !shared.stop.load(Ordering::Relaxed) {
        let Some(record) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        // A fetch error (a broker away) is librdkafka's to retry; the callers' deadlines
        // bound what it costs them.
        let Ok(record) = record else { continue };
        let is_marker = record.headers().is_some_and(|h| {
            h.iter()
                .any(|h| h.key == MARKER_HEADER && h.value == Some(MARKER_KIND))
        });
        let payload = record.payload().unwrap_or_default();
        if is_marker {
            match serde_json::from_slice::<Marker>(payload) {
                Ok(m) => {
                    shared.markers.fetch_add(1, Ordering::Relaxed);
                    // The marker's own partition field names the events partition; it is
                    // the record's partition by the contract.
                    let p = if m.partition >= 0 {
                        m.partition
                    } else {
                        record.partition()
                    };
                    shared
                        .pending
                        .lock()
                        .unwrap()
                        .judged_through(p, m.through_offset);
                }
                Err(_) => {
                    shared.unreadable.fetch_add(1, Ordering::Relaxed);
                }
            }
            continue;
        }
        let Some(v) = Verdict::parse(payload) else {
            shared.unreadable.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        if !seen.first_time(&v.verdict_id) {
            continue;
        }
        shared.verdicts.fetch_add(1, Ordering::Relaxed);
        let v = Arc::new(v);
        shared.pending.lock().unwrap().verdict(&v);
        shared.publish(&v);
    }
}

/// The last `SEEN_CAPACITY` verdict ids.
#[derive(Default)]
struct Seen {
    set: HashSet<String>,
    order: VecDeque<String>,
}

impl Seen {
    fn first_time(&mut self, id: &str) -> bool {
        if self.set.contains(id) {
            return false;
        }
        if self.order.len() == SEEN_CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        self.set.insert(id.to_string());
        self.order.push_back(id.to_string());
        true
    }
}
