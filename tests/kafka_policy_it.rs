//! The live policy on a real Apache Kafka broker (KAFKA_BOOTSTRAP_SERVERS): a version
//! published while two guards run under load is in force on every stream thread of both
//! within seconds (measured: docs/benchmarks.md); verdicts before and after carry the
//! version that judged them; with `kill -9` of one guard in the middle, the verdict stream
//! read with read_committed is exactly `loopguard replay` of each partition with the
//! policy changes the guards recorded; an invalid publication changes nothing.
// Each test holds the SERIAL lock across its awaits on purpose (see `serial`).
#![allow(clippy::await_holding_lock)]

mod kafka_env;

use kafka_env::*;
use loopguard::cli::policy::fetch_status;
use loopguard::engine::event::Event;
use loopguard::engine::policy::PolicySet;
use loopguard::engine::verdict::Verdict;
use loopguard::engine::{Engine, Limits};
use loopguard::service::records::policy_change::{is_policy_key, PolicyChange, PolicyTimeline};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

/// The bound on propagation this test enforces; the measured figure is printed.
const PROPAGATION_LIMIT: Duration = Duration::from_secs(10);

fn free_admin() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The test's config with this instance's own admin address.
fn instance_config(env: &Env, settings: &str, instance: &str, admin: SocketAddr) -> String {
    let text = std::fs::read_to_string(env.config(settings))
        .unwrap()
        .replace("listen = \"127.0.0.1:0\"", &format!("listen = \"{admin}\""));
    let path = env.dir.path().join(format!("loopguard-{instance}.toml"));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn loopguard(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(args)
        .output()
        .unwrap()
}

/// (seq, version) of every stream thread of the instance at `admin`.
fn threads(admin: SocketAddr) -> Vec<(i64, String)> {
    fetch_status(admin).map_or_else(
        |_| Vec::new(),
        |s| {
            s["threads"]
                .as_object()
                .map(|t| {
                    t.values()
                        .map(|v| {
                            (
                                v["seq"].as_i64().unwrap(),
                                v["version"].as_str().unwrap().to_string(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        },
    )
}

/// Waits until both stream threads of every instance apply `seq`; how long it took.
fn wait_in_force(admins: &[SocketAddr], seq: i64, since: Instant) -> Duration {
    loop {
        let all = admins.iter().all(|a| {
            let t = threads(*a);
            t.len() == 2 && t.iter().all(|(s, _)| *s == seq)
        });
        if all {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < PROPAGATION_LIMIT,
            "policy seq {seq} not in force on every thread within {PROPAGATION_LIMIT:?}: {:?}",
            admins.iter().map(|a| threads(*a)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Each partition's events in offset order, with their offsets (produced without
/// transactions: offsets run from 0 without gaps).
fn events_by_partition(env: &Env) -> BTreeMap<i32, Vec<(i64, Event)>> {
    let mut out: BTreeMap<i32, Vec<(i64, Event)>> = BTreeMap::new();
    for (p, _, payload, _) in env.read_all(&env.topic("events")) {
        let list = out.entry(p).or_default();
        let offset = list.len() as i64;
        list.push((offset, Event::decode(&payload.unwrap()).unwrap()));
    }
    out
}

/// The policy changes the guards recorded, per partition (state topic, read_committed).
fn recorded_changes(env: &Env) -> BTreeMap<i32, Vec<PolicyChange>> {
    let mut out: BTreeMap<i32, Vec<PolicyChange>> = BTreeMap::new();
    for (p, key, payload, _) in env.read_all(&env.topic("state")) {
        if key.as_deref().is_some_and(is_policy_key) {
            let change = serde_json::from_slice(&payload.unwrap()).unwrap();
            out.entry(p).or_default().push(change);
        }
    }
    out
}

/// `loopguard replay` of one partition with its recorded changes.
fn replay_partition(events: &[(i64, Event)], changes: &[PolicyChange]) -> Vec<Verdict> {
    let timeline = PolicyTimeline::new(changes.to_vec()).unwrap();
    let mut engine = Engine::new(PolicySet::default(), Limits::default());
    let mut out = Vec::new();
    for (offset, event) in events {
        if let Some(set) = timeline.in_force(*offset) {
            if set.version() != engine.policy_version() {
                engine.set_policies(set.clone());
            }
        }
        engine.handle_event(event.clone(), &mut out);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_published_under_load_is_in_force_everywhere_and_replays_exactly() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "policy");
    env.create_topics().await;
    create_policy_topic(&env).await;
    // No checkpoint but the ones a policy switch writes: the survivor restores from those.
    let settings = "threads = 2\ncheckpoint_max_ms = 600000\ncheckpoint_max_events = 10000000\n";
    let (admin_a, admin_b) = (free_admin(), free_admin());
    let cfg_a = instance_config(&env, settings, "a", admin_a);
    let cfg_b = instance_config(&env, settings, "b", admin_b);
    let mut a = env.spawn_guard(&cfg_a, "a");
    let mut b = env.spawn_guard(&cfg_b, "b");
    let settled = Instant::now() + Duration::from_secs(60);
    while [admin_a, admin_b].iter().any(|x| threads(*x).len() < 2) && Instant::now() < settled {
        std::thread::sleep(Duration::from_millis(100));
    }
    let default_version = PolicySet::default().version().to_string();
    for admin in [admin_a, admin_b] {
        assert_eq!(threads(admin), vec![(-1, default_version.clone()); 2]);
    }

    // The new version: the whole fleet in observe mode, a lower repeat threshold.
    let policy = json!({"mode": "observe", "tool": {"repeat_threshold": 2}});
    let policy_file = env.dir.path().join("observe.json");
    std::fs::write(&policy_file, policy.to_string()).unwrap();
    let new_version = PolicySet::compile(&policy).unwrap().version().to_string();
    let out = loopguard(&["policy", "check", policy_file.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");

    // A first third judged (and committed) under the configuration's version, so verdicts
    // of both versions exist whatever the machine's speed; the rest is the load the new
    // version is published under.
    let events = fleet(48, "pol-");
    let (first, rest) = events.split_at(events.len() / 3);
    env.produce(first, Duration::from_micros(200));
    assert!(
        env.wait_committed(Duration::from_secs(60)),
        "first third not judged"
    );
    assert!(!env.verdicts().is_empty(), "no verdict in the first third");
    let (propagation, published_at) = std::thread::scope(|scope| {
        let load = scope.spawn(|| env.produce(rest, Duration::from_micros(1500)));
        std::thread::sleep(Duration::from_secs(1));
        let started = Instant::now();
        let out = loopguard(&[
            "policy",
            "publish",
            policy_file.to_str().unwrap(),
            "--config",
            &cfg_a,
        ]);
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(stdout.contains(&new_version), "{stdout}");
        let offset: i64 = stdout.trim().rsplit(' ').next().unwrap().parse().unwrap();
        let took = wait_in_force(&[admin_a, admin_b], offset, started);
        assert!(
            !load.is_finished(),
            "the load ended before the policy was in force"
        );
        std::thread::sleep(Duration::from_millis(700));
        // kill -9 in the middle: its partitions are restored by the survivor from their
        // checkpoints, with the policy recorded there.
        a.kill().unwrap();
        a.wait().unwrap();
        load.join().unwrap();
        (took, offset)
    });
    eprintln!(
        "policy propagation: {} ms to every stream thread of two instances",
        propagation.as_millis()
    );

    // An invalid version: refused by the CLI; written anyway, refused by the guard whole.
    let bad_file = env.dir.path().join("bad.toml");
    std::fs::write(&bad_file, "[tool]\nwindow = \"eight\"\n").unwrap();
    let out = loopguard(&[
        "policy",
        "publish",
        bad_file.to_str().unwrap(),
        "--config",
        &cfg_b,
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("policy.tool.window"),
        "{out:?}"
    );
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &env.bootstrap)
        .create()
        .unwrap();
    let bad = json!({"policy": {"tool": {"window": "eight"}}}).to_string();
    producer
        .send(
            BaseRecord::to(&env.topic("policy"))
                .key("policy")
                .payload(&bad)
                .partition(0),
        )
        .unwrap();
    producer.flush(Duration::from_secs(10)).unwrap();
    let refused_by = Instant::now() + Duration::from_secs(20);
    let refused = loop {
        let status = fetch_status(admin_b).unwrap();
        if status["last_refused"].is_object() || Instant::now() > refused_by {
            break status;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        refused["last_refused"]["offset"],
        published_at + 1,
        "{refused}"
    );
    assert!(
        refused["last_refused"]["problems"][0]
            .as_str()
            .unwrap()
            .starts_with("policy.tool.window:"),
        "{refused}"
    );
    assert_eq!(
        threads(admin_b),
        vec![(published_at, new_version.clone()); 2]
    );
    assert!(env.log_of("b").contains("policy refused whole"));

    assert!(
        env.wait_committed(Duration::from_secs(120)),
        "survivor did not take over"
    );
    // The killed guard's open transaction is aborted after transaction.timeout.ms (10 s)
    // plus the broker's clean-up interval; only then do read_committed readers pass it.
    std::thread::sleep(Duration::from_secs(15));
    let got = env.verdicts();
    b.kill().ok();
    b.wait().ok();

    let by_partition = events_by_partition(&env);
    let changes = recorded_changes(&env);
    let mut want = Vec::new();
    let mut switched_mid_stream = 0;
    for (p, events) in &by_partition {
        let recorded = changes.get(p).cloned().unwrap_or_default();
        // Every partition recorded the configuration's version before its first event and
        // the published one at the offset of the first event it judged.
        assert!(
            recorded
                .iter()
                .any(|c| c.from_offset == 0 && c.version == default_version),
            "p{p}: {recorded:?}"
        );
        let switch = recorded
            .iter()
            .find(|c| c.version == new_version)
            .unwrap_or_else(|| panic!("p{p}: {recorded:?}"));
        if switch.from_offset > 0 && switch.from_offset < events.len() as i64 {
            switched_mid_stream += 1;
        }
        want.extend(replay_partition(events, &recorded));
    }
    assert!(switched_mid_stream >= 2, "{changes:?}");
    assert_same(&got, &want);
    let versions: std::collections::BTreeSet<&str> =
        got.iter().map(|(_, v)| v.policy_version.as_str()).collect();
    assert_eq!(
        versions,
        [default_version.as_str(), new_version.as_str()]
            .into_iter()
            .collect()
    );
    // Enforced under the configuration's version, observed under the published one.
    assert!(got
        .iter()
        .all(|(_, v)| v.enforce == (v.policy_version == default_version)));

    // `loopguard policy history` prints the recorded changes; `loopguard replay
    // --policy-changes` of one partition with them gives the same verdicts.
    let (p, events) = by_partition.iter().max_by_key(|(_, e)| e.len()).unwrap();
    let dir = env.dir.path();
    let events_text: String = env
        .read_all(&env.topic("events"))
        .into_iter()
        .filter(|(q, ..)| q == p)
        .map(|(_, _, v, _)| format!("{}\n", String::from_utf8(v.unwrap()).unwrap()))
        .collect();
    std::fs::write(dir.join("p.events.jsonl"), events_text).unwrap();
    let out = loopguard(&[
        "policy",
        "history",
        "--partition",
        &p.to_string(),
        "--config",
        &cfg_b,
    ]);
    assert!(out.status.success(), "{out:?}");
    let history: Vec<PolicyChange> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut recorded = changes[p].clone();
    recorded.sort_by_key(|c| (c.from_offset, c.seq));
    assert_eq!(history, recorded);
    std::fs::write(dir.join("p.changes.jsonl"), &out.stdout).unwrap();
    let out = loopguard(&[
        "replay",
        "--policy-changes",
        dir.join("p.changes.jsonl").to_str().unwrap(),
        dir.join("p.events.jsonl").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let replayed: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let expected: Vec<Value> = replay_partition(events, &changes[p])
        .iter()
        .map(|v| serde_json::to_value(v).unwrap())
        .collect();
    assert_eq!(replayed, expected);
    eprintln!(
        "policy: {} verdicts ({} under the new version), {} partitions switched mid-stream",
        got.len(),
        got.iter()
            .filter(|(_, v)| v.policy_version == new_version)
            .count(),
        switched_mid_stream
    );
}

/// Automatic demotion (issue 32): two guards with `policy.demotion` on. Feedback judging a
/// rule's verdicts for one tenant and agent wrong makes an instance that has seen enough
/// publish a policy version with that rule in observe mode for them; both instances apply
/// it; the rule's later verdicts for them carry `enforce: false` and the new version, and
/// every partition's verdicts are `loopguard replay`'s with the policy changes recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_judged_wrong_enough_is_demoted_everywhere_and_replays_exactly() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "demotion");
    env.create_topics().await;
    create_policy_topic(&env).await;
    let (admin_a, admin_b) = (free_admin(), free_admin());
    let demotion = "\n[policy.demotion]\nbelow = 0.5\nmin_judgements = 2\nwindow = 10\n";
    let mut configs = Vec::new();
    for (name, admin) in [("a", admin_a), ("b", admin_b)] {
        let path = instance_config(&env, "threads = 2\n", name, admin);
        let text = std::fs::read_to_string(&path).unwrap() + demotion;
        std::fs::write(&path, text).unwrap();
        configs.push(path);
    }
    let mut a = env.spawn_guard(&configs[0], "a");
    let mut b = env.spawn_guard(&configs[1], "b");
    let first = fleet(48, "dem-");
    env.produce(&first, Duration::ZERO);
    assert!(
        env.wait_committed(Duration::from_secs(90)),
        "first fleet not judged"
    );
    let before = env.verdicts();
    // The rule and (tenant, agent) with the most enforced verdicts: all judged wrong.
    let mut counts: BTreeMap<(String, Option<String>, Option<String>), usize> = BTreeMap::new();
    for (_, v) in before.iter().filter(|(_, v)| v.enforce) {
        *counts
            .entry((
                v.rule.as_str().to_string(),
                v.tenant.clone(),
                v.agent.clone(),
            ))
            .or_default() += 1;
    }
    let ((rule, tenant, agent), n) = counts.into_iter().max_by_key(|(_, n)| *n).unwrap();
    assert!(n >= 3, "only {n} verdicts of {rule}");
    let last_ts: BTreeMap<&str, i64> = first
        .iter()
        .map(|e| (e.meta.session_id.as_str(), e.meta.ts_ms))
        .collect();
    let judged: Vec<Event> = before
        .iter()
        .filter(|(_, v)| v.rule.as_str() == rule && v.tenant == tenant && v.agent == agent)
        .map(|(_, v)| {
            let e = json!({
                "v": 1, "event_id": format!("fb-{}", v.verdict_id), "session_id": v.session_id,
                "ts": last_ts[v.session_id.as_str()] + 1, "type": "feedback",
                "verdict_id": v.verdict_id, "useful": false, "tenant": v.tenant, "agent": v.agent,
            });
            Event::decode(e.to_string().as_bytes()).unwrap()
        })
        .collect();
    env.produce(&judged, Duration::ZERO);
    // A version published by the guards themselves, in force on every stream thread.
    let deadline = Instant::now() + Duration::from_secs(30);
    let demoted_seq = loop {
        let seqs: Vec<i64> = [admin_a, admin_b]
            .iter()
            .flat_map(|x| threads(*x).into_iter().map(|(s, _)| s))
            .collect();
        if seqs.len() == 4 && seqs.iter().all(|s| *s >= 0 && *s == seqs[0]) {
            break seqs[0];
        }
        assert!(Instant::now() < deadline, "no demotion in force: {seqs:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let published = last_policy_record(&env);
    let new_version = published["version"].as_str().unwrap().to_string();
    let mut set = PolicySet::compile(&published["policy"]).unwrap();
    let r = loopguard::engine::verdict::Rule::from_name(&rule).unwrap();
    assert_eq!(
        set.mode_of(tenant.as_deref(), agent.as_deref(), r).0,
        loopguard::engine::policy::Mode::Observe
    );
    assert_eq!(
        published["policy"]["demotion"]["below"], 0.5,
        "the rest of the policy kept"
    );
    // Said once published (the version can be in force before the publisher hears back).
    let said = |env: &Env| {
        [env.log_of("a"), env.log_of("b")]
            .iter()
            .any(|l| l.contains("rule demoted to observe"))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !said(&env) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(said(&env), "no instance said it demoted");
    // The same fleet again, new sessions after the first (event time): the rule's verdicts
    // for them are observed under the new version.
    let later = first.iter().map(|e| e.meta.ts_ms).max().unwrap() + 1_000;
    env.produce(
        &loopguard::fleet::fleet(48, "dem2-", later, 200, 11),
        Duration::ZERO,
    );
    assert!(
        env.wait_committed(Duration::from_secs(90)),
        "second fleet not judged"
    );
    let got = env.verdicts();
    a.kill().ok();
    b.kill().ok();
    a.wait().ok();
    b.wait().ok();
    let after: Vec<&Verdict> = got
        .iter()
        .map(|(_, v)| v)
        .filter(|v| v.policy_version == new_version)
        .filter(|v| v.rule.as_str() == rule && v.tenant == tenant && v.agent == agent)
        .collect();
    let mut seen: BTreeMap<(String, Option<String>, String, bool), usize> = BTreeMap::new();
    for (_, v) in &got {
        let key = (
            format!("{} {}", &v.session_id[..5], v.rule.as_str()),
            v.tenant.clone(),
            v.policy_version.clone(),
            v.enforce,
        );
        *seen.entry(key).or_default() += 1;
    }
    assert!(
        !after.is_empty(),
        "no verdict of {rule} after the demotion (seq {demoted_seq}, {new_version}): {seen:#?}"
    );
    assert!(after.iter().all(|v| !v.enforce), "{after:?}");
    // Exactly replay's, partition by partition, with the changes the guards recorded.
    let by_partition = events_by_partition(&env);
    let changes = recorded_changes(&env);
    let mut want = Vec::new();
    for (p, events) in &by_partition {
        let recorded = changes.get(p).cloned().unwrap_or_default();
        want.extend(replay_partition(events, &recorded));
    }
    assert_same(&got, &want);
}

/// The last record of the (one-partition) policy topic.
fn last_policy_record(env: &Env) -> Value {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &env.bootstrap)
        .set("group.id", format!("{}-policy-peek", env.name))
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let topic = env.topic("policy");
    let (_, high) = c
        .fetch_watermarks(&topic, 0, Duration::from_secs(10))
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, rdkafka::Offset::Offset(high - 1))
        .unwrap();
    c.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            return serde_json::from_slice(m.payload().unwrap()).unwrap();
        }
        assert!(Instant::now() < deadline, "policy topic unread");
    }
}
