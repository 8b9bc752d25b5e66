//! The policy in force after a restart with another `--config`, on a real Apache Kafka
//! broker (KAFKA_BOOTSTRAP_SERVERS): with no version published, every partition is judged
//! by the new configuration's policy, also those whose state recorded the old one.
// Each test holds the SERIAL lock across its awaits on purpose (see `serial`).
#![allow(clippy::await_holding_lock)]

mod kafka_env;

use kafka_env::*;
use loopguard::engine::event::Event;
use serde_json::json;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// Issue 45: a guard restarted with another `--config` (no version published) judges every
/// partition by the new configuration's policy, also the partitions whose state recorded
/// the old one (docs/tuning.md, "Which policy is in force"; decisions (gt)).
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_with_another_config_judges_every_partition_by_it() {
    let _serial = serial();
    let Some(bootstrap) = bootstrap() else {
        return;
    };
    let env = Env::new(bootstrap, "restart-config");
    env.create_topics().await;
    create_policy_topic(&env).await;
    env.wait_for_leaders();
    let with_threshold = |n: u32, name: &str| {
        let text = std::fs::read_to_string(env.config("")).unwrap()
            + &format!("[policy.tool]\nrepeat_threshold = {n}\n");
        let path = env.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    let (old, new) = (with_threshold(5, "old.toml"), with_threshold(3, "new.toml"));
    let call = |session: &str, n: i64| {
        let e = json!({"v": 1, "event_id": format!("{session}-{n}"), "session_id": session,
            "ts": 1_767_225_600_000i64 + n * 1000, "type": "tool_call",
            "turn_id": format!("t{n}"), "call_id": format!("c{n}"), "tool": "bash",
            "args": {"cmd": "make test"}});
        Event::decode(e.to_string().as_bytes()).unwrap()
    };
    let sessions: Vec<String> = (0..24).map(|i| format!("s{i}")).collect();
    // Two same calls of every session under the old configuration (threshold 5): each
    // partition records the old configuration's policy with its checkpoint.
    let mut guard = env.spawn_guard(&old, "old");
    let first: Vec<Event> = sessions
        .iter()
        .flat_map(|s| [call(s, 1), call(s, 2)])
        .collect();
    env.produce(&first, Duration::ZERO);
    assert!(
        env.wait_committed(Duration::from_secs(120)),
        "{}",
        env.guard_log_summary()
    );
    stop(&mut guard);
    // Restarted with the new one (threshold 3): every session's third call is blocked.
    let mut guard = env.spawn_guard(&new, "new");
    let third: Vec<Event> = sessions.iter().map(|s| call(s, 3)).collect();
    env.produce(&third, Duration::ZERO);
    assert!(
        env.wait_committed(Duration::from_secs(120)),
        "{}",
        env.guard_log_summary()
    );
    stop(&mut guard);
    let verdicts = env.verdicts();
    let partitions = session_partitions(&env);
    let blocked: BTreeMap<i32, usize> = verdicts
        .iter()
        .filter(|(_, v)| v.event_id.ends_with("-3"))
        .fold(BTreeMap::new(), |mut m, (p, _)| {
            *m.entry(*p).or_default() += 1;
            m
        });
    let per_partition: BTreeMap<i32, usize> =
        partitions.values().fold(BTreeMap::new(), |mut m, p| {
            *m.entry(*p).or_default() += 1;
            m
        });
    assert_eq!(
        blocked,
        per_partition,
        "third calls blocked per partition vs sessions per partition\n{}",
        env.guard_log_summary()
    );
    assert_eq!(verdicts.len(), sessions.len(), "{verdicts:?}");
}

/// SIGTERM, so the guard commits and checkpoints before it goes.
fn stop(guard: &mut std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &guard.id().to_string()])
        .status();
    guard.wait().unwrap();
}
