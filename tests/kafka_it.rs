//! Integration tests against a real Apache Kafka broker (KAFKA_BOOTSTRAP_SERVERS, started
//! by scripts/test.sh). The bar: the verdicts read with read_committed are exactly what
//! `loopguard replay` gives for the same events, through crashes, restarts and rebalances.
// Each test holds the SERIAL lock across its awaits on purpose (see `serial`).
#![allow(clippy::await_holding_lock)]

use loopguard::engine::event::Event;
use loopguard::engine::policy::PolicySet;
use loopguard::engine::verdict::Verdict;
use loopguard::engine::{Engine, Limits};
use loopguard::service::txn::TxnProducer;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 4;

/// The tests start guard processes; one at a time keeps them from starving each other.
/// (A std mutex held across awaits on purpose: each test holds it for its whole run.)
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn bootstrap() -> Option<String> {
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
type Record = (
    i32,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    BTreeMap<String, String>,
);

/// One test's private topics, group and config file.
struct Env {
    bootstrap: String,
    name: String,
    dir: tempfile::TempDir,
}

impl Env {
    fn new(bootstrap: String, test: &str) -> Env {
        let name = format!(
            "{test}-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos() ^ rand_suffix()
        );
        Env {
            bootstrap,
            name,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn topic(&self, kind: &str) -> String {
        format!("{}-{kind}", self.name)
    }

    async fn create_topics(&self) {
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
                let t = NewTopic::new(n, PARTITIONS, TopicReplication::Fixed(1));
                if n.ends_with("-state") {
                    t.set("cleanup.policy", "compact")
                } else {
                    t
                }
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

    /// Writes a config file; `extra` is appended TOML.
    fn config(&self, extra: &str) -> String {
        let path = self.dir.path().join("loopguard.toml");
        let text = format!(
            "[kafka]\nbootstrap_servers = \"{b}\"\ngroup_id = \"{n}-group\"\nevents_topic = \"{n}-events\"\nverdicts_topic = \"{n}-verdicts\"\ndlq_topic = \"{n}-dlq\"\nstate_topic = \"{n}-state\"\n{batch}{extra}\n[kafka.properties]\n\"transaction.timeout.ms\" = \"10000\"\n\"session.timeout.ms\" = \"6000\"\n[admin]\nlisten = \"127.0.0.1:0\"\n",
            b = self.bootstrap,
            n = self.name,
            batch = if extra.contains("batch_max_ms") { "" } else { "batch_max_ms = 20\n" }
        );
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }

    fn produce(&self, events: &[Event], gap: Duration) {
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

    fn produce_raw(&self, key: &str, payload: &[u8]) {
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

    fn consumer(&self, group: &str) -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", group)
            .set("isolation.level", "read_committed")
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap()
    }

    /// Every record of `topic` (read_committed) with its partition and headers.
    fn read_all(&self, topic: &str) -> Vec<Record> {
        let c = self.consumer(&format!("{}-reader-{}", self.name, rand_suffix()));
        let mut out = Vec::new();
        let mut tpl = TopicPartitionList::new();
        let mut ends = BTreeMap::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
            ends.insert(
                p,
                c.fetch_watermarks(topic, p, Duration::from_secs(10))
                    .unwrap()
                    .1,
            );
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

    fn verdicts(&self) -> Vec<(i32, Verdict)> {
        self.read_all(&self.topic("verdicts"))
            .into_iter()
            .filter_map(|(p, _, v, _)| Some((p, serde_json::from_slice(&v?).unwrap())))
            .collect()
    }

    /// Waits until the guard's group has committed every event.
    fn wait_committed(&self, timeout: Duration) -> bool {
        let c = self.consumer(&format!("{}-group", self.name));
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let mut tpl = TopicPartitionList::new();
            let mut end = 0;
            for p in 0..PARTITIONS {
                tpl.add_partition(&self.topic("events"), p);
                end += c
                    .fetch_watermarks(&self.topic("events"), p, Duration::from_secs(10))
                    .unwrap()
                    .1;
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

    /// Starts `loopguard serve`; its log goes to a file, summarized if the test fails.
    fn spawn_guard(&self, config: &str, instance: &str) -> Child {
        let log =
            std::fs::File::create(self.dir.path().join(format!("guard-{instance}.log"))).unwrap();
        Command::new(env!("CARGO_BIN_EXE_loopguard"))
            .args(["serve", "--config", config])
            .env("LOOPGUARD_INSTANCE_ID", format!("{}-{instance}", self.name))
            .env("RUST_LOG", "warn,loopguard::service::worker=info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// Events a guard re-ran while restoring partitions, from its "partition restored" lines.
    fn replayed_by(&self, instance: &str) -> u64 {
        let log = std::fs::read_to_string(self.dir.path().join(format!("guard-{instance}.log")))
            .unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("partition restored"))
            .filter_map(|l| {
                l.split("replayed=")
                    .nth(1)?
                    .split(' ')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    /// The guards' "partition restored" lines.
    fn restores(&self) -> String {
        ["a", "b"]
            .iter()
            .flat_map(|i| {
                std::fs::read_to_string(self.dir.path().join(format!("guard-{i}.log")))
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains("partition restored"))
                    .map(|l| format!("{i}: {l}\n"))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Each guard's warnings and errors in order of first appearance, repeats counted.
    fn guard_log_summary(&self) -> String {
        let mut out = String::new();
        let mut logs: Vec<_> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        logs.sort();
        for path in logs {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let mut seen: Vec<(String, usize)> = Vec::new();
            for line in text
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            {
                // Drop the timestamp so repeats of one message count together.
                let msg = line
                    .split_once(' ')
                    .map_or(line, |(_, m)| m)
                    .trim()
                    .to_string();
                match seen.iter_mut().find(|(m, _)| *m == msg) {
                    Some((_, n)) => *n += 1,
                    None => seen.push((msg, 1)),
                }
            }
            out.push_str(&format!("== {}\n", path.display()));
            for (msg, n) in seen.iter().take(40) {
                out.push_str(&format!("{n:>5}x {msg}\n"));
            }
        }
        out
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // On failure, or always with LOOPGUARD_TEST_LOGS set (and --nocapture).
        if std::thread::panicking() || std::env::var_os("LOOPGUARD_TEST_LOGS").is_some() {
            eprintln!(
                "guard logs (warnings and errors):\n{}restores:\n{}",
                self.guard_log_summary(),
                self.restores()
            );
        }
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_007
}

/// What `loopguard replay` gives for the same events.
fn oracle(events: &[Event]) -> Vec<Verdict> {
    let mut engine = Engine::new(PolicySet::default(), Limits::default());
    let mut out = Vec::new();
    for e in events {
        engine.handle_event(e.clone(), &mut out);
    }
    out
}

/// Compares verdict streams ignoring `emitted_at` and cross-session order; no duplicates.
fn assert_same(got: &[(i32, Verdict)], want: &[Verdict]) {
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

fn fleet(sessions: usize, prefix: &str) -> Vec<Event> {
    loopguard::fleet::fleet(sessions, prefix, 1_767_225_600_000, 200, 11)
}

fn session_partitions(env: &Env) -> BTreeMap<String, i32> {
    env.read_all(&env.topic("events"))
        .into_iter()
        .filter_map(|(p, k, _, _)| Some((String::from_utf8(k?).ok()?, p)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rule_family_end_to_end_on_the_right_partition() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "families");
    env.create_topics().await;
    let events = fleet(27, "fam-");
    env.produce(&events, Duration::ZERO);
    let cfg = env.config("");
    let mut guard = env.spawn_guard(&cfg, "a");
    assert!(
        env.wait_committed(Duration::from_secs(90)),
        "guard did not consume everything"
    );
    let got = env.verdicts();
    guard.kill().ok();
    guard.wait().ok();
    let want = oracle(&events);
    let rules: BTreeSet<&str> = want.iter().map(|v| v.rule.as_str()).collect();
    assert!(rules.len() >= 7, "{rules:?}");
    assert_same(&got, &want);
    let parts = session_partitions(&env);
    for (p, v) in &got {
        assert_eq!(
            parts[&v.session_id], *p,
            "verdict of {} on partition {p}",
            v.session_id
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_events_go_to_the_dead_letter_topic_and_offsets_move_on() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "dlq");
    env.create_topics().await;
    env.produce_raw("s-bad", b"{not json");
    env.produce_raw(
        "s-bad",
        br#"{"v":1,"event_id":"e1","session_id":"s-bad","ts":true,"type":"tool_call"}"#,
    );
    env.produce_raw(
        "s-bad",
        br#"{"v":1,"event_id":"e2","session_id":"s-bad","ts":5,"type":"tool_call","turn_id":"t"}"#,
    );
    env.produce_raw(
        "s-bad",
        br#"{"v":1,"event_id":"e5","session_id":"s-bad","ts":5,"type":"user_message","text":5}"#,
    );
    env.produce_raw(
        "other-key",
        br#"{"v":1,"event_id":"e3","session_id":"s-bad","ts":5,"type":"compaction"}"#,
    );
    let huge = format!(
        r#"{{"v":1,"event_id":"e4","session_id":"s-big","ts":5,"type":"reasoning","turn_id":"t","text":"{}"}}"#,
        "x".repeat(600_000)
    );
    env.produce_raw("s-big", huge.as_bytes());
    // Not JSON and near the broker's record limit: dead-lettered with its head only.
    let mut near_limit = b"{not json ".to_vec();
    near_limit.resize(950_000, b'x');
    env.produce_raw("s-bad", &near_limit);
    let events = loopguard::fleet::session(
        loopguard::fleet::Scenario::DoomLoop,
        "s-loop",
        1_767_225_600_000,
        100,
        3,
    );
    env.produce(&events, Duration::ZERO);
    let cfg = env.config("");
    let mut guard = env.spawn_guard(&cfg, "a");
    assert!(
        env.wait_committed(Duration::from_secs(90)),
        "partition stalled"
    );
    let dlq = env.read_all(&env.topic("dlq"));
    let got = env.verdicts();
    guard.kill().ok();
    guard.wait().ok();
    let reasons: BTreeSet<String> = dlq
        .iter()
        .map(|(_, _, _, h)| h["loopguard-error-reason"].clone())
        .collect();
    let listed: Vec<&String> = dlq
        .iter()
        .map(|(_, _, _, h)| &h["loopguard-error-reason"])
        .collect();
    assert_eq!(dlq.len(), 6, "{listed:?}");
    let cut: Vec<_> = dlq
        .iter()
        .filter(|(_, _, _, h)| h.contains_key("loopguard-payload-truncated"))
        .collect();
    assert_eq!(cut.len(), 1);
    assert_eq!(cut[0].3["loopguard-payload-truncated"], "950000");
    assert_eq!(cut[0].2.as_ref().map(Vec::len), Some(64 * 1024));
    assert_eq!(
        reasons,
        [
            "invalid_json",
            "invalid_field",
            "wrong_type",
            "missing_field",
            "key_mismatch"
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    );
    for (_, _, payload, h) in &dlq {
        assert_eq!(h["loopguard-source-topic"], env.topic("events"));
        assert!(h.contains_key("loopguard-source-offset") && h.contains_key("loopguard-error"));
        assert!(payload.is_some(), "original bytes kept");
    }
    // The oversized event is truncated and processed, not dead-lettered: 256 KiB of one
    // char is a loop, steered twice before the guard gives up on the response.
    let (big, rest): (Vec<_>, Vec<_>) = got.into_iter().partition(|(_, v)| v.session_id == "s-big");
    assert_eq!(
        big.iter()
            .map(|(_, v)| (v.rule.as_str(), v.attempt))
            .collect::<Vec<_>>(),
        [("reasoning.repeat", 1), ("reasoning.repeat", 2)]
    );
    assert_same(&rest, &oracle(&events));
}

/// librdkafka's abort waits until the transaction's delivery reports are served; before
/// the guard served them itself, an abort with records in flight timed out and left every
/// later transaction refused ("Conflicting abort_transaction API call is already in
/// progress"), a partition stalled for good after one failed commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_with_records_in_flight_aborts_and_the_next_batch_commits() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "abort");
    env.create_topics().await;
    let cfg = Arc::new(loopguard::config::load(Some(&env.config(""))).unwrap());
    let mut producer = TxnProducer::new(cfg, &format!("{}-txn", env.name)).unwrap();
    let topic = env.topic("verdicts");
    let send = |p: &TxnProducer, text: &str| {
        p.producer()
            .send(BaseRecord::to(&topic).partition(0).key("k").payload(text))
            .unwrap();
    };
    producer.begin().unwrap();
    for i in 0..2000 {
        send(&producer, &format!("aborted-{i}"));
    }
    // Offsets without a consumer group cannot be committed: the commit fails and aborts.
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset(&env.topic("events"), 0, Offset::Offset(1))
        .unwrap();
    let started = Instant::now();
    assert!(producer.commit(&offsets, None).is_err());
    assert!(!producer.is_open());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the abort took {:?}",
        started.elapsed()
    );
    producer.begin().unwrap();
    send(&producer, "committed");
    producer.commit(&TopicPartitionList::new(), None).unwrap();
    let payloads: Vec<String> = env
        .read_all(&topic)
        .into_iter()
        .map(|(_, _, v, _)| String::from_utf8(v.unwrap()).unwrap())
        .collect();
    assert_eq!(payloads, ["committed"]);
}

/// The survivor restores the dead instance's partitions from no checkpoint at all (the
/// default checkpoint interval is longer than the test): every committed event is re-run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_dash_nine_of_one_instance_loses_and_doubles_nothing() {
    let env = kill_dash_nine("kill9", "batch_max_events = 50").await;
    assert!(env.is_none_or(|env| env.replayed_by("b") > 0));
}

/// Checkpoints every 300 ms: the survivor restores the dead instance's last checkpoint and
/// re-runs whatever it committed after it (how much depends on timing; the verdict stream
/// must be the oracle's either way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_dash_nine_with_checkpoints_restores_from_the_dead_instances_checkpoint() {
    let Some(env) = kill_dash_nine(
        "kill9ckpt",
        "batch_max_events = 50\ncheckpoint_max_ms = 300",
    )
    .await
    else {
        return;
    };
    // The survivor started from a checkpoint of the dead instance's.
    assert!(
        env.restores().lines().any(|l| l.starts_with("b:")
            && l.contains("sessions=")
            && !l.contains("checkpoint=none")
            && !l.contains("sessions=0")),
        "{}",
        env.restores()
    );
    let checkpoints = env
        .read_all(&env.topic("state"))
        .into_iter()
        .filter(|(_, key, _, _)| key.as_deref() == Some(b"\xffloopguard-clock".as_slice()))
        .count();
    assert!(checkpoints > 0);
}

/// Two guards, `kill -9` of one mid-stream; the verdicts must be exactly the oracle's.
/// Returns the test's environment for further checks (None when Kafka is not configured).
async fn kill_dash_nine(name: &str, settings: &str) -> Option<Env> {
    let b = bootstrap()?;
    let _one_at_a_time = serial();
    let env = Env::new(b, name);
    env.create_topics().await;
    let cfg = env.config(settings);
    let mut a = env.spawn_guard(&cfg, "a");
    let mut b = env.spawn_guard(&cfg, "b");
    let events = fleet(36, "k9-");
    let (first, rest) = events.split_at(events.len() / 3);
    env.produce(first, Duration::from_micros(500));
    // Long enough for the first instance to commit its share of the first third.
    std::thread::sleep(Duration::from_secs(4));
    // kill -9: no chance to commit or leave the group.
    a.kill().unwrap();
    a.wait().unwrap();
    env.produce(rest, Duration::from_micros(200));
    assert!(
        env.wait_committed(Duration::from_secs(120)),
        "survivor did not take over"
    );
    // The dead instance's open transaction holds back what read_committed readers see on
    // the partitions it wrote, until the broker aborts it: transaction.timeout.ms (10 s
    // here) plus the broker's clean-up interval (2 s in scripts/kafka.sh). A runtime sees
    // the same delay; the stream it then reads must be exactly the oracle.
    std::thread::sleep(Duration::from_secs(15));
    let got = env.verdicts();
    b.kill().ok();
    b.wait().ok();
    assert_same(&got, &oracle(&events));
    // State and offsets commit together: no restore may find a checkpoint past the offset.
    let summary = env.guard_log_summary();
    assert!(!summary.contains("checkpoint ahead"), "{summary}");
    Some(env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_resumes_from_committed_state_and_sigterm_commits_in_flight_work() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "restart");
    env.create_topics().await;
    // Huge batches: nothing commits until the stop signal.
    let cfg = env.config("batch_max_events = 1000000\nbatch_max_ms = 600000");
    let events = fleet(18, "rs-");
    let (first, second) = events.split_at(events.len() / 2);
    let mut guard = env.spawn_guard(&cfg, "a");
    env.produce(first, Duration::ZERO);
    std::thread::sleep(Duration::from_secs(8));
    assert!(
        !env.wait_committed(Duration::from_millis(10)),
        "nothing is committed before the signal"
    );
    let pid = guard.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = guard.wait().unwrap();
    assert!(status.success(), "SIGTERM exit: {status:?}");
    assert!(
        env.wait_committed(Duration::from_secs(5)),
        "in-flight work committed on SIGTERM"
    );
    // A second run picks up the sessions' state mid-request.
    env.produce(second, Duration::ZERO);
    let cfg = env.config("");
    let mut guard = env.spawn_guard(&cfg, "a");
    assert!(env.wait_committed(Duration::from_secs(90)));
    let got = env.verdicts();
    guard.kill().ok();
    guard.wait().ok();
    assert_same(&got, &oracle(&events));
}
