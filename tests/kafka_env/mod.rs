//! The Kafka integration tests' harness: a private set of topics, group and config per
//! test, guard processes with their logs, readers of what they wrote, and the replay oracle.
// Two test binaries (kafka_it, kafka_dead_letters_it) each use a part of it.
#![allow(dead_code)]

mod guard;
mod markers;

pub use markers::is_marker;

use loopguard::engine::event::Event;
use loopguard::engine::policy::PolicySet;
use loopguard::engine::verdict::Verdict;
use loopguard::engine::{Engine, Limits};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

pub const PARTITIONS: i32 = 4;

/// The tests start guard processes; one at a time keeps them from starving each other.
/// (A std mutex held across awaits on purpose: each test holds it for its whole run.)
pub static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn bootstrap() -> Option<String> {
    match std::env::var("KAFKA_BOOTSTRAP_SERVERS") {
        Ok(b) if !b.is_empty() => Some(b),
        _ => {
            assert!(
                std::env::var("LOOPGUARD_REQUIRE_KAFKA").is_err(),
                "LOOPGUARD_REQUIRE_KAFKA is set but KAFKA_BOOTSTRAP_SERVERS is not"
            );
            eprintln!("skipped: set KAFKA_BOOTSTRAP_SERVERS or run scripts/test.sh (it starts a real broker)");
            None
        }
    }
}

/// A record as read back: partition, key, payload, headers.
pub type Record = (
    i32,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    BTreeMap<String, String>,
);

/// One test's private topics, group and config file.
pub struct Env {
    pub bootstrap: String,
    pub name: String,
    pub dir: tempfile::TempDir,
    /// Partitions of each topic (`PARTITIONS` unless made `with_partitions`).
    pub partitions: i32,
    /// The guards `spawn_guard` started: killed if the test fails, so none outlives it.
    pub spawned: std::sync::Mutex<Vec<u32>>,
}

impl Env {
    pub fn with_partitions(bootstrap: String, test: &str, partitions: i32) -> Env {
        let mut env = Env::new(bootstrap, test);
        env.partitions = partitions;
        env
    }

    pub fn new(bootstrap: String, test: &str) -> Env {
        let name = format!(
            "{test}-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos() ^ rand_suffix()
        );
        Env {
            bootstrap,
            name,
            dir: tempfile::tempdir().unwrap(),
            partitions: PARTITIONS,
            spawned: Default::default(),
        }
    }

    pub fn topic(&self, kind: &str) -> String {
        format!("{}-{kind}", self.name)
    }

    pub async fn create_topics(&self) {
        self.create_topics_with_dlq(&[]).await
    }

    /// As `create_topics`, with topic settings for the dead-letter topic.
    pub async fn create_topics_with_dlq(&self, dlq: &[(&str, &str)]) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .unwrap();
        let names = [
            self.topic("events"),
            self.topic("verdicts"),
            self.topic("dlq"),
            self.topic("state"),
        ];
        let topics: Vec<NewTopic> = names
            .iter()
            .map(|n| {
                let mut t = NewTopic::new(n, self.partitions, TopicReplication::Fixed(1));
                if n.ends_with("-state") {
                    t = t.set("cleanup.policy", "compact");
                }
                if n.ends_with("-dlq") {
                    for (k, v) in dlq {
                        t = t.set(k, v);
                    }
                }
                t
            })
            .collect();
        for r in admin
            .create_topics(topics.iter(), &AdminOptions::new())
            .await
            .unwrap()
        {
            r.unwrap();
        }
    }

    /// Waits until every partition of the test's topics has a leader that answers (a
    /// loaded broker can take seconds after creating many partitions).
    pub fn wait_for_leaders(&self) {
        let c = self.consumer(&format!("{}-probe", self.name));
        let deadline = Instant::now() + Duration::from_secs(60);
        for kind in ["events", "verdicts", "dlq", "state"] {
            let topic = self.topic(kind);
            while Instant::now() < deadline {
                let ready = c
                    .fetch_metadata(Some(&topic), Duration::from_secs(10))
                    .ok()
                    .and_then(|md| {
                        let t = md.topics().first()?;
                        Some(
                            t.partitions().len() == self.partitions as usize
                                && t.partitions()
                                    .iter()
                                    .all(|p| p.leader() >= 0 && p.error().is_none()),
                        )
                    })
                    .unwrap_or(false);
                let answers = ready
                    && (0..self.partitions).all(|p| {
                        c.fetch_watermarks(&topic, p, Duration::from_secs(10))
                            .is_ok()
                    });
                if answers {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Writes a config file; `extra` is appended TOML.
    pub fn config(&self, extra: &str) -> String {
        let path = self.dir.path().join("loopguard.toml");
        let text = format!(
            "[kafka]\nbootstrap_servers = \"{b}\"\ngroup_id = \"{n}-group\"\nevents_topic = \"{n}-events\"\nverdicts_topic = \"{n}-verdicts\"\ndlq_topic = \"{n}-dlq\"\nstate_topic = \"{n}-state\"\npolicy_topic = \"{n}-policy\"\n{batch}{extra}\n[kafka.properties]\n\"transaction.timeout.ms\" = \"10000\"\n\"session.timeout.ms\" = \"6000\"\n[admin]\nlisten = \"127.0.0.1:0\"\n",
            b = self.bootstrap,
            n = self.name,
            batch = if extra.contains("batch_max_ms") { "" } else { "batch_max_ms = 20\n" }
        );
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }

    pub fn produce(&self, events: &[Event], gap: Duration) {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("enable.idempotence", "true")
            .create()
            .unwrap();
        for e in events {
            let payload = serde_json::to_vec(&e.to_wire()).unwrap();
            p.send(
                BaseRecord::to(&self.topic("events"))
                    .key(e.meta.session_id.as_bytes())
                    .payload(&payload),
            )
            .unwrap();
            p.poll(Duration::ZERO);
            if !gap.is_zero() {
                std::thread::sleep(gap);
            }
        }
        p.flush(Duration::from_secs(30)).unwrap();
    }

    /// A producer for records as given: large ones too (up to 4 MB client-side, so the
    /// broker's limit is what refuses), uncompressed, sent one at a time.
    fn record_producer(&self) -> rdkafka::producer::FutureProducer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("message.max.bytes", "4000000")
            .set("compression.type", "none")
            .set("linger.ms", "0")
            .create()
            .unwrap()
    }

    /// Produces `events` to one partition, each keyed by its session, in order.
    pub async fn produce_to(&self, events: &[Event], partition: i32) {
        let p = self.record_producer();
        for e in events {
            let payload = serde_json::to_vec(&e.to_wire()).unwrap();
            send_record(
                &p,
                &self.topic("events"),
                Some(e.meta.session_id.as_bytes()),
                &payload,
                partition,
            )
            .await
            .unwrap();
        }
    }

    /// Produces one record as given (a key or none, any size up to the broker's limit) to
    /// `partition`; returns its offset.
    pub async fn produce_record(&self, key: Option<&[u8]>, payload: &[u8], partition: i32) -> i64 {
        self.try_produce_record(key, payload, partition)
            .await
            .unwrap_or_else(|e| panic!("producing {} bytes: {e}", payload.len()))
    }

    /// As `produce_record`, with the broker's refusal returned.
    pub async fn try_produce_record(
        &self,
        key: Option<&[u8]>,
        payload: &[u8],
        partition: i32,
    ) -> Result<i64, rdkafka::error::KafkaError> {
        let p = self.record_producer();
        send_record(&p, &self.topic("events"), key, payload, partition).await
    }

    pub fn produce_raw(&self, key: &str, payload: &[u8]) {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("enable.idempotence", "true")
            .create()
            .unwrap();
        p.send(
            BaseRecord::to(&self.topic("events"))
                .key(key)
                .payload(payload),
        )
        .unwrap();
        p.flush(Duration::from_secs(30)).unwrap();
    }

    pub fn consumer(&self, group: &str) -> BaseConsumer {
        self.consumer_at(group, "read_committed")
    }

    /// A consumer with the given `isolation.level`.
    pub fn consumer_at(&self, group: &str, isolation: &str) -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", group)
            .set("isolation.level", isolation)
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap()
    }

    /// Every record of `topic` (read_committed) with its partition and headers.
    pub fn read_all(&self, topic: &str) -> Vec<Record> {
        self.read_all_at(topic, "read_committed")
    }

    /// Every record of `topic` at the given isolation level (read_uncommitted also returns
    /// the records of aborted and still open transactions).
    pub fn read_all_at(&self, topic: &str, isolation: &str) -> Vec<Record> {
        /// The partition's end; a loaded broker can answer "not leader" for a while after
        /// topics were created or a leader moved: asked again for up to 60 s.
        fn high_watermark(c: &BaseConsumer, topic: &str, p: i32) -> i64 {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                match c.fetch_watermarks(topic, p, Duration::from_secs(10)) {
                    Ok((_, high)) => return high,
                    Err(e) if Instant::now() < deadline => {
                        eprintln!("watermarks of {topic}[{p}]: {e}; asking again");
                        std::thread::sleep(Duration::from_millis(250));
                    }
                    Err(e) => panic!("watermarks of {topic}[{p}]: {e}"),
                }
            }
        }
        let group = format!("{}-reader-{}", self.name, rand_suffix());
        let c = self.consumer_at(&group, isolation);
        let mut out = Vec::new();
        let mut tpl = TopicPartitionList::new();
        let mut ends = BTreeMap::new();
        for p in 0..self.partitions {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
            ends.insert(p, high_watermark(&c, topic, p));
        }
        c.assign(&tpl).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut positions: BTreeMap<i32, i64> = BTreeMap::new();
        while Instant::now() < deadline
            && ends
                .iter()
                .any(|(p, e)| positions.get(p).copied().unwrap_or(0) < *e && *e > 0)
        {
            match c.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    positions.insert(m.partition(), m.offset() + 1);
                    let mut headers = BTreeMap::new();
                    if let Some(h) = m.headers() {
                        for x in h.iter() {
                            headers.insert(
                                x.key.to_string(),
                                String::from_utf8_lossy(x.value.unwrap_or_default()).into_owned(),
                            );
                        }
                    }
                    out.push((
                        m.partition(),
                        m.key().map(<[u8]>::to_vec),
                        m.payload().map(<[u8]>::to_vec),
                        headers,
                    ));
                }
                _ => {
                    // Transaction markers take offsets: re-check the consumer's positions.
                    if let Ok(pos) = c.position() {
                        for e in pos.elements() {
                            if let Offset::Offset(o) = e.offset() {
                                positions.insert(e.partition(), o);
                            }
                        }
                    }
                }
            }
        }
        out
    }

    pub fn verdicts(&self) -> Vec<(i32, Verdict)> {
        self.read_all(&self.topic("verdicts"))
            .into_iter()
            .filter(|(_, k, _, h)| !is_marker(k, h))
            .filter_map(|(p, _, v, _)| Some((p, serde_json::from_slice(&v?).unwrap())))
            .collect()
    }

    /// The verdicts as a low-latency runtime reads them: read_uncommitted (aborted and
    /// re-run transactions included), the first of each `verdict_id` kept. Also returns how
    /// many records the raw stream had.
    pub fn verdicts_uncommitted_deduplicated(&self) -> (Vec<(i32, Verdict)>, usize) {
        let raw = self.read_all_at(&self.topic("verdicts"), "read_uncommitted");
        let raw: Vec<_> = raw
            .into_iter()
            .filter(|(_, k, _, h)| !is_marker(k, h))
            .collect();
        let total = raw.len();
        let mut seen = BTreeSet::new();
        let kept = raw
            .into_iter()
            .filter_map(|(p, _, v, _)| Some((p, serde_json::from_slice::<Verdict>(&v?).unwrap())))
            .filter(|(_, v)| seen.insert(v.verdict_id.clone()))
            .collect();
        (kept, total)
    }

    /// Waits until the guard's group has committed every event.
    pub fn wait_committed(&self, timeout: Duration) -> bool {
        let c = self.consumer(&format!("{}-group", self.name));
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let mut tpl = TopicPartitionList::new();
            let mut end = 0;
            let mut known = true;
            for p in 0..self.partitions {
                tpl.add_partition(&self.topic("events"), p);
                // A loaded broker can answer "not leader" for a while after creating many
                // partitions: ask again rather than fail.
                match c.fetch_watermarks(&self.topic("events"), p, Duration::from_secs(10)) {
                    Ok((_, high)) => end += high,
                    Err(_) => known = false,
                }
            }
            if !known {
                std::thread::sleep(Duration::from_millis(250));
                continue;
            }
            let committed: i64 = c
                .committed_offsets(tpl, Duration::from_secs(10))
                .map(|t| {
                    t.elements()
                        .iter()
                        .map(|e| {
                            if let Offset::Offset(o) = e.offset() {
                                o
                            } else {
                                0
                            }
                        })
                        .sum()
                })
                .unwrap_or(0);
            if committed >= end && end > 0 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        false
    }
}

async fn send_record(
    p: &rdkafka::producer::FutureProducer,
    topic: &str,
    key: Option<&[u8]>,
    payload: &[u8],
    partition: i32,
) -> Result<i64, rdkafka::error::KafkaError> {
    let mut record = rdkafka::producer::FutureRecord::<[u8], [u8]>::to(topic)
        .payload(payload)
        .partition(partition);
    if let Some(k) = key {
        record = record.key(k);
    }
    p.send(record, Duration::from_secs(30))
        .await
        .map(|(_, offset)| offset)
        .map_err(|(e, _)| e)
}

pub fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_007
}

/// What `loopguard replay` gives for the same events.
pub fn oracle(events: &[Event]) -> Vec<Verdict> {
    let mut engine = Engine::new(PolicySet::default(), Limits::default());
    let mut out = Vec::new();
    for e in events {
        engine.handle_event(e.clone(), &mut out);
    }
    out
}

/// Compares verdict streams ignoring `emitted_at` and cross-session order; no duplicates.
pub fn assert_same(got: &[(i32, Verdict)], want: &[Verdict]) {
    let key = |v: &Verdict| {
        let mut v = v.clone();
        v.emitted_at = None;
        serde_json::to_string(&v).unwrap()
    };
    let ids: Vec<&str> = got.iter().map(|(_, v)| v.verdict_id.as_str()).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(
        ids.len(),
        unique.len(),
        "duplicate verdicts delivered: {:#?}",
        got.iter()
            .map(|(p, v)| format!("p{p} {} {} {}", v.verdict_id, v.rule.as_str(), v.event_id))
            .collect::<Vec<_>>()
    );
    let got_set: BTreeSet<String> = got.iter().map(|(_, v)| key(v)).collect();
    let want_set: BTreeSet<String> = want.iter().map(key).collect();
    let missing: Vec<_> = want_set.difference(&got_set).take(3).collect();
    let extra: Vec<_> = got_set.difference(&want_set).take(3).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:#?}\nextra {extra:#?}"
    );
    // Per session, the order is the replay's order.
    for session in want.iter().map(|v| &v.session_id).collect::<BTreeSet<_>>() {
        let a: Vec<&str> = got
            .iter()
            .filter(|(_, v)| &v.session_id == session)
            .map(|(_, v)| v.verdict_id.as_str())
            .collect();
        let b: Vec<&str> = want
            .iter()
            .filter(|v| &v.session_id == session)
            .map(|v| v.verdict_id.as_str())
            .collect();
        assert_eq!(a, b, "order of session {session}");
    }
}

pub fn fleet(sessions: usize, prefix: &str) -> Vec<Event> {
    loopguard::fleet::fleet(sessions, prefix, 1_767_225_600_000, 200, 11)
}

pub fn session_partitions(env: &Env) -> BTreeMap<String, i32> {
    env.read_all(&env.topic("events"))
        .into_iter()
        .filter_map(|(p, k, _, _)| Some((String::from_utf8(k?).ok()?, p)))
        .collect()
}

/// Creates the test's policy topic (one partition, compacted), as `topics create` does.
pub async fn create_policy_topic(env: &Env) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &env.bootstrap)
        .create()
        .unwrap();
    let name = env.topic("policy");
    let topic =
        NewTopic::new(&name, 1, TopicReplication::Fixed(1)).set("cleanup.policy", "compact");
    for r in admin
        .create_topics([&topic], &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap();
    }
}
