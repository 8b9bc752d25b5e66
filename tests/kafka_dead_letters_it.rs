//! Integration tests of bad input against a real Apache Kafka broker
//! (KAFKA_BOOTSTRAP_SERVERS, started by scripts/test.sh): malformed, keyless and oversized
//! records go to the dead-letter topic with their reason, a record that keeps failing is
//! given up after its bound, and the sessions behind them on the same partition get their
//! verdicts.
// Each test holds the SERIAL lock across its awaits on purpose (see `serial`).
#![allow(clippy::await_holding_lock)]

mod kafka_env;

use kafka_env::*;
use std::collections::BTreeSet;
use std::time::Duration;

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

/// `n` letters that do not compress (the guard's producer compresses with lz4, and the
/// broker checks the compressed batch against its limit).
fn incompressible(n: usize, seed: u64) -> String {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (b'a' + (x % 26) as u8) as char
        })
        .collect()
}

/// A poison event too large for the dead-letter topic whole: a 600 KB `v` of the wrong
/// type, so it is refused by decoding and its dead letter must be cut.
fn oversized_poison(seed: u64) -> String {
    format!(
        r#"{{"v":"{}","event_id":"e1","session_id":"s-poison","ts":5,"type":"compaction"}}"#,
        incompressible(600_000, seed)
    )
}

/// A canary session (a doom loop: it gets verdicts) produced right behind a poison record.
fn canary(id: &str, seed: u64) -> Vec<loopguard::engine::event::Event> {
    loopguard::fleet::session(
        loopguard::fleet::Scenario::DoomLoop,
        id,
        1_767_225_600_000,
        100,
        seed,
    )
}

/// The most rewinds a guard logged for one partition at one offset.
fn max_rewinds(log: &str) -> u32 {
    log.lines()
        .filter(|l| l.contains("rewinding partition"))
        .filter_map(|l| l.split("rewinds=").nth(1)?.split(' ').next()?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// The most times one record was retried for its own fault (`strikes=` of the guard's
/// "rewinding partition" lines). A rewind for another reason (a rebalance's stale
/// generation on a loaded machine) is in `rewinds=` but is not a retry of the record.
fn max_strikes(log: &str) -> u32 {
    log.lines()
        .filter(|l| l.contains("rewinding partition"))
        .filter_map(|l| l.split("strikes=").nth(1)?.split(' ').next()?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// Produces the largest record the broker takes on `partition` (one byte more is refused);
/// returns its size.
async fn produce_at_broker_limit(env: &Env, key: &[u8], partition: i32) -> usize {
    // Kafka's default message.max.bytes (scripts/kafka.sh leaves it) less the batch and
    // record framing: a first guess, then one byte at a time to the exact edge.
    let mut n = 1_048_588 - 72 - key.len();
    let fill = |n: usize| {
        let mut v = b"{not json ".to_vec();
        v.resize(n, b'x');
        v
    };
    let mut refused = false;
    for _ in 0..64 {
        match env
            .try_produce_record(Some(key), &fill(n + 1), partition)
            .await
        {
            Ok(_) => panic!("{} bytes taken: guess higher", n + 1),
            Err(_) => refused = true,
        }
        match env.try_produce_record(Some(key), &fill(n), partition).await {
            Ok(_) => return n,
            Err(_) => n -= 1,
        }
    }
    panic!("no size at the broker's limit found (refused: {refused})");
}

/// The issue's poison records, each followed on the same partition by a canary session:
/// a 600 KB event whose `v` is a 600,000-char string (serde quotes it in its error), a
/// 400 KB key on a valid 450 KB event of another session, a record of exactly the broker's
/// limit, and a keyless third identical call. Each is dead-lettered, every part bounded;
/// every canary gets its verdicts; the partition never rewinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_records_are_dead_lettered_and_the_canary_behind_each_gets_its_verdicts() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "poison");
    env.create_topics().await;
    let p = 1;
    let v = oversized_poison(1);
    let at_v = env.produce_record(Some(b"s-poison"), v.as_bytes(), p).await;
    let c1 = canary("canary-1", 1);
    env.produce_to(&c1, p).await;
    let big_key = incompressible(400_000, 2);
    let other = format!(
        r#"{{"v":1,"event_id":"e1","session_id":"s-other","ts":5,"type":"user_message","text":"{}"}}"#,
        incompressible(450_000, 3)
    );
    let at_key = env
        .produce_record(Some(big_key.as_bytes()), other.as_bytes(), p)
        .await;
    let c2 = canary("canary-2", 2);
    env.produce_to(&c2, p).await;
    let exact = produce_at_broker_limit(&env, b"s-exact", p).await;
    let c3 = canary("canary-3", 3);
    env.produce_to(&c3, p).await;
    // Two identical calls keyed, the third (which replay blocks) without a key.
    let call = |i: u32| {
        format!(
            r#"{{"v":1,"event_id":"n{i}","session_id":"s-nokey","ts":{},"type":"tool_call","turn_id":"t{i}","call_id":"c{i}","tool":"read_file","args":{{"path":"a.txt"}}}}"#,
            1_767_225_600_000u64 + u64::from(i) * 1000
        )
    };
    let calls: Vec<_> = (1..=3)
        .map(|i| loopguard::engine::event::Event::decode(call(i).as_bytes()).unwrap())
        .collect();
    assert!(
        !oracle(&calls).is_empty(),
        "the third call is blocked when judged"
    );
    assert!(oracle(&calls[..2]).is_empty());
    env.produce_to(&calls[..2], p).await;
    let at_nokey = env.produce_record(None, call(3).as_bytes(), p).await;
    let c4 = canary("canary-4", 4);
    env.produce_to(&c4, p).await;

    let run = env.run_until_committed(&env.config(""), "a");
    assert!(run.committed, "partition stalled");
    let (dlq, got, log) = (run.dlq, run.verdicts, run.log);

    let by_offset: std::collections::BTreeMap<i64, &Record> = dlq
        .iter()
        .map(|r| (r.3["loopguard-source-offset"].parse().unwrap(), r))
        .collect();
    assert_eq!(by_offset.len(), 4, "{:?}", by_offset.keys());
    for r in &dlq {
        assert_eq!(r.3["loopguard-source-partition"], p.to_string());
        assert!(
            r.3["loopguard-error"].len() <= 512,
            "{}",
            r.3["loopguard-error"].len()
        );
        let size = r.1.as_ref().map_or(0, Vec::len)
            + r.2.as_ref().map_or(0, Vec::len)
            + r.3.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        assert!(size < 1_000_000, "{size}");
    }
    let v_letter = by_offset[&at_v];
    assert_eq!(v_letter.3["loopguard-error-reason"], "wrong_type");
    assert_eq!(
        v_letter.2.as_deref(),
        Some(v.as_bytes()),
        "payload kept whole"
    );
    let key_letter = by_offset[&at_key];
    assert_eq!(key_letter.3["loopguard-error-reason"], "key_mismatch");
    assert_eq!(key_letter.3["loopguard-key-truncated"], "400000");
    assert_eq!(key_letter.1.as_ref().map(Vec::len), Some(1024));
    assert_eq!(key_letter.2.as_deref(), Some(other.as_bytes()));
    let exact_letter = by_offset
        .values()
        .find(|r| r.1.as_deref() == Some(b"s-exact".as_slice()))
        .unwrap();
    assert_eq!(exact_letter.3["loopguard-error-reason"], "invalid_json");
    assert_eq!(
        exact_letter.3["loopguard-payload-truncated"],
        exact.to_string()
    );
    assert_eq!(exact_letter.2.as_ref().map(Vec::len), Some(64 * 1024));
    let nokey = by_offset[&at_nokey];
    assert_eq!(nokey.3["loopguard-error-reason"], "missing_key");
    assert_eq!(nokey.2.as_deref(), Some(call(3).as_bytes()));

    let judged: Vec<_> = [c1, c2, c3, calls[..2].to_vec(), c4].concat();
    let want = oracle(&judged);
    for c in ["canary-1", "canary-2", "canary-3", "canary-4"] {
        assert!(want.iter().any(|v| v.session_id == c), "{c} has verdicts");
    }
    assert_same(&got, &want);
    assert_eq!(max_rewinds(&log), 0, "{}", env.guard_log_summary());
    assert!(
        !log.contains("processing failed"),
        "{}",
        env.guard_log_summary()
    );
}

/// A dead letter the broker refuses though the guard took it to fit (the dead-letter
/// topic's limit is below the configured one): the batch fails, the record is retried
/// alone, and after `max_record_retries` failures it is dead-lettered minimally and the
/// partition moves on; the canary behind it gets its verdicts, once, whether read committed
/// or uncommitted and de-duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_keeps_failing_is_given_up_after_the_bound_and_the_partition_moves_on() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "giveup");
    env.create_topics_with_dlq(&[("max.message.bytes", "100000")])
        .await;
    let p = 2;
    let before = canary("canary-0", 5);
    env.produce_to(&before, p).await;
    let v = oversized_poison(7);
    let at = env.produce_record(Some(b"s-poison"), v.as_bytes(), p).await;
    let after = canary("canary-1", 6);
    env.produce_to(&after, p).await;
    // dlq_max_bytes above the topic's limit: the guard cannot know, the broker refuses.
    let run = env.run_until_committed(&env.config("max_record_retries = 3"), "a");
    assert!(run.committed, "partition stalled");
    let (dlq, got, log) = (run.dlq, run.verdicts, run.log);
    assert_eq!(dlq.len(), 1, "{dlq:?}");
    let (_, key, payload, h) = &dlq[0];
    assert_eq!(h["loopguard-error-reason"], "retry_limit");
    assert_eq!(h["loopguard-source-offset"], at.to_string());
    assert_eq!(h["loopguard-source-partition"], p.to_string());
    assert_eq!(h["loopguard-source-topic"], env.topic("events"));
    assert!(payload.as_ref().is_none_or(Vec::is_empty), "no payload");
    assert!(key.as_ref().is_none_or(Vec::is_empty), "no key");
    let want = oracle(&[before, after].concat());
    assert_same(&got, &want);
    // The low-latency path through aborted transactions: the failed batches' verdicts were
    // flushed to the log before their commit failed (aborted), then written again by the
    // retries; read_uncommitted and de-duplicated on `verdict_id`, the stream is the oracle.
    let (uncommitted, raw) = env.verdicts_uncommitted_deduplicated();
    assert_same(&uncommitted, &want);
    assert!(
        raw > uncommitted.len(),
        "no aborted verdict in the log ({raw} records)"
    );
    // Judged-through markers through the aborted batches and their re-runs: no verdict
    // after a marker covering its event, on either path; the given-up record covered too.
    for isolation in ["read_committed", "read_uncommitted"] {
        assert!(env.check_judged_markers(isolation).markers > 0);
    }
    // Retried for its own fault at most `max_record_retries` (3) times, then given up.
    let strikes = max_strikes(&log);
    assert!(
        (1..=3).contains(&strikes),
        "strikes {strikes}\n{}",
        env.guard_log_summary()
    );
    assert!(log.contains("giving it up"), "{}", env.guard_log_summary());
}
