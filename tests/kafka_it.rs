//! Integration tests against a real Apache Kafka broker (KAFKA_BOOTSTRAP_SERVERS, started
//! by scripts/test.sh). The bar: the verdicts read with read_committed are exactly what
//! `loopguard replay` gives for the same events, through crashes, restarts and rebalances.
// Each test holds the SERIAL lock across its awaits on purpose (see `serial`).
#![allow(clippy::await_holding_lock)]

mod kafka_env;

use kafka_env::*;
use loopguard::service::txn::TxnProducer;
use rdkafka::producer::BaseRecord;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
