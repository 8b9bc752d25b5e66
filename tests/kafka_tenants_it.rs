//! Tenants from the writer on a real Apache Kafka broker (KAFKA_BOOTSTRAP_SERVERS): a guard
//! rolled from the shared layout to `kafka.events_topic_template` keeps the shared topic's
//! sessions; a tenant whose topics are made while it runs (`loopguard topics create
//! --tenant`) is served without a restart; its sessions are its own (the same session id on
//! the shared topic is another session), an event on its topic naming another tenant is
//! dead-lettered, and a `kill -9` in the middle of its loop loses nothing: the third same
//! call is blocked on the tenant's verdicts topic, once.
// Each test holds the SERIAL lock across its awaits on purpose (see `serial`).
#![allow(clippy::await_holding_lock)]

mod kafka_env;

use kafka_env::*;
use loopguard::engine::verdict::{Action, Verdict};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

/// `n`-th same call of `session` (or its request, at 0), naming `tenant` if given.
fn event(session: &str, n: i64, tenant: Option<&str>) -> Value {
    let mut e = match n {
        0 => json!({"type": "user_message", "text": "make the tests pass"}),
        n => json!({"type": "tool_call", "turn_id": format!("t{n}"), "call_id": format!("c{n}"),
                    "tool": "bash", "args": {"cmd": "make test"}}),
    };
    e["v"] = json!(1);
    e["event_id"] = json!(format!("{session}-{n}"));
    e["session_id"] = json!(session);
    e["ts"] = json!(1_767_225_600_000i64 + n * 1000);
    if let Some(t) = tenant {
        e["tenant"] = json!(t);
    }
    e
}

fn produce(env: &Env, topic: &str, events: &[Value]) {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &env.bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    for e in events {
        let payload = serde_json::to_vec(e).unwrap();
        let key = e["session_id"].as_str().unwrap();
        p.send(BaseRecord::to(topic).key(key).payload(&payload))
            .unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();
}

/// The verdicts of `topic` (read_committed), waiting up to a minute for `until` to hold.
fn verdicts_until(env: &Env, topic: &str, until: impl Fn(&[Verdict]) -> bool) -> Vec<Verdict> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got: Vec<Verdict> = env
            .read_all(topic)
            .into_iter()
            .filter(|(_, k, _, h)| !is_marker(k, h))
            .filter_map(|(_, _, v, _)| serde_json::from_slice(&v?).ok())
            .collect();
        if until(&got) || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn blocked(verdicts: &[Verdict], event_id: &str) -> bool {
    verdicts
        .iter()
        .any(|v| v.event_id == event_id && v.action == Action::Block)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_topic_is_served_without_a_restart_keeps_its_sessions_apart_and_survives_a_crash()
{
    let _serial = serial();
    let Some(bootstrap) = bootstrap() else {
        return;
    };
    let env = Env::with_partitions(bootstrap, "tenants", 2);
    env.create_topics().await;
    env.wait_for_leaders();
    let n = &env.name;
    let shared = env.topic("events");

    // The shared layout, as before the upgrade: two same calls of session s1.
    let before = env.config("");
    let mut guard = env.spawn_guard(&before, "a");
    produce(
        &env,
        &shared,
        &[
            event("s1", 0, None),
            event("s1", 1, None),
            event("s1", 2, None),
        ],
    );
    assert!(
        env.wait_committed(Duration::from_secs(120)),
        "{}",
        env.guard_log_summary()
    );
    guard.kill().unwrap();
    guard.wait().unwrap();

    // Rolled to tenants from the writer (after a kill -9): the shared topic's session goes on.
    let config = env.config(&format!(
        "events_topic_template = \"{n}-events.{{tenant}}\"\nverdicts_topic_template = \"{n}-verdicts.{{tenant}}\"\ntenant_discovery_ms = 500\n"
    ));
    let mut guard = env.spawn_guard(&config, "b");
    produce(&env, &shared, &[event("s1", 3, None)]);
    let plain = verdicts_until(&env, &env.topic("verdicts"), |v| blocked(v, "s1-3"));
    assert!(
        blocked(&plain, "s1-3"),
        "the shared topic's session lost across the upgrade: {plain:?}\n{}",
        env.guard_log_summary()
    );

    // acme's topics made while the guard runs, with the documented command.
    loopguard_ok(&[
        "topics",
        "create",
        "--config",
        &config,
        "--partitions",
        "2",
        "--tenant",
        "acme",
    ]);
    let acme_events = format!("{n}-events.acme");
    let acme_verdicts = format!("{n}-verdicts.acme");
    // The same session id on acme's own topic is another session: two same calls, then an
    // event naming another tenant (dead-lettered, never judged).
    produce(
        &env,
        &acme_events,
        &[
            event("s1", 0, None),
            event("s1", 1, None),
            event("s1", 2, Some("acme")),
        ],
    );
    produce(&env, &acme_events, &[event("s1", 7, Some("beta"))]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mismatch = loop {
        let dlq = env.read_all(&env.topic("dlq"));
        let found = dlq.iter().any(|(_, _, _, h)| {
            h.get("loopguard-error-reason").map(String::as_str) == Some("tenant_mismatch")
        });
        if found || Instant::now() > deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(
        mismatch,
        "no tenant_mismatch dead letter\n{}",
        env.guard_log_summary()
    );
    // Crash in the middle of acme's loop, after its two calls are committed.
    std::thread::sleep(Duration::from_millis(500));
    guard.kill().unwrap();
    guard.wait().unwrap();
    // With an admin address of its own, to see the policy its threads apply.
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("listen = \"127.0.0.1:0\"", &format!("listen = \"{admin}\""));
    std::fs::write(&config, text).unwrap();
    let mut guard = env.spawn_guard(&config, "c");
    produce(&env, &acme_events, &[event("s1", 3, None)]);
    let acme = verdicts_until(&env, &acme_verdicts, |v| blocked(v, "s1-3"));
    let ids: Vec<(&str, String, Option<&str>)> = acme
        .iter()
        .map(|v| {
            (
                v.event_id.as_str(),
                format!("{:?}", v.action),
                v.tenant.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        ids,
        [("s1-3", "Block".to_string(), Some("acme"))],
        "acme's verdicts\n{}",
        env.guard_log_summary()
    );
    // The shared topic got nothing of acme's: still its one block.
    let plain = verdicts_until(&env, &env.topic("verdicts"), |_| true);
    assert_eq!(
        plain
            .iter()
            .map(|v| v.event_id.as_str())
            .collect::<Vec<_>>(),
        ["s1-3"]
    );

    // The live policy on the tenant's topic: a version published while the guard runs is
    // picked up by acme's stream thread, recorded in acme's state topic where it took
    // effect, and judges acme's next session (a 4th same call blocked, not a 3rd).
    std::fs::write(
        env.dir.path().join("policy.toml"),
        "[tool]\nrepeat_threshold = 4\n",
    )
    .unwrap();
    let policy = env.dir.path().join("policy.toml");
    let published = loopguard_ok(&[
        "policy",
        "publish",
        "--config",
        &config,
        policy.to_str().unwrap(),
    ]);
    let version = published
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .unwrap_or_else(|| panic!("no version in {published}"))
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !picked_up(admin, "stream-acme-0", &version) {
        assert!(
            Instant::now() < deadline,
            "acme's thread never took {version}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let s2: Vec<Value> = (0..=4).map(|n| event("s2", n, None)).collect();
    produce(&env, &acme_events, &s2);
    let acme = verdicts_until(&env, &acme_verdicts, |v| {
        v.iter().any(|v| v.session_id == "s2")
    });
    guard.kill().ok();
    guard.wait().ok();
    let s2: Vec<(&str, &str)> = acme
        .iter()
        .filter(|v| v.session_id == "s2")
        .map(|v| (v.event_id.as_str(), v.policy_version.as_str()))
        .collect();
    assert_eq!(
        s2,
        [("s2-4", version.as_str())],
        "{}",
        env.guard_log_summary()
    );
    let history = loopguard_ok(&["policy", "history", "--tenant", "acme", "--config", &config]);
    assert!(
        history.contains(&version),
        "policy history --tenant acme: {history}"
    );
}

/// Runs `loopguard ARGS`, which must succeed; its standard output.
fn loopguard_ok(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "loopguard {args:?}: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether `thread` of the guard at `admin` applies `version` (its `/v1/policy`).
fn picked_up(admin: std::net::SocketAddr, thread: &str, version: &str) -> bool {
    loopguard::cli::policy::fetch_status(admin)
        .ok()
        .and_then(|s| {
            s["threads"][thread]["version"]
                .as_str()
                .map(|v| v == version)
        })
        .unwrap_or(false)
}
