//! Feedback on verdicts (issue 32) on a real Apache Kafka broker (KAFKA_BOOTSTRAP_SERVERS):
//! an operator's `loopguard feedback` on verdicts a running guard wrote reaches that guard's
//! precision metric, by the verdict's rule, each verdict once (a repeat is counted apart);
//! feedback naming no verdict is counted as such; under `kafka.events_topic_template` it
//! goes to the session's tenant's own events topic.
// Each test holds the SERIAL lock across its awaits on purpose (see `serial`).
#![allow(clippy::await_holding_lock)]

mod kafka_env;

use kafka_env::*;
use rdkafka::config::ClientConfig;
use rdkafka::producer::BaseProducer;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

fn free_admin() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `GET /metrics` of the instance at `admin`.
fn metrics(admin: SocketAddr) -> String {
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&admin, Duration::from_secs(2)) else {
        return String::new();
    };
    let _ = write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

/// The sum of every series of `family` whose labels hold each of `labels`.
fn sum(text: &str, family: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `loopguard feedback` on `verdict` of `session` (`--wrong` or `--useful`); it must succeed.
fn feedback(cfg: &str, session: &str, verdict: &str, flag: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(["feedback", "--config", cfg, "--session", session])
        .args(["--verdict", verdict, flag, "--note", "checked by hand"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_from_the_cli_reaches_the_precision_metric_by_rule() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "feedback");
    env.create_topics().await;
    // Recent events (feedback carries the time it is sent; the sessions must still be
    // held then), placed by Java's partitioner as the runtimes' clients place them.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let events = loopguard::fleet::fleet(12, "fb-", now - 120_000, 100, 5);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &env.bootstrap)
        .set("partitioner", "murmur2_random")
        .create()
        .unwrap();
    for e in &events {
        loopguard::service::kafka::publish::publish_event(&producer, &env.topic("events"), e)
            .unwrap();
    }
    loopguard::service::kafka::publish::flush_within(&producer, Duration::from_secs(30)).unwrap();
    let admin = free_admin();
    let cfg_path = env.dir.path().join("loopguard-fb.toml");
    let text = std::fs::read_to_string(env.config(""))
        .unwrap()
        .replace("listen = \"127.0.0.1:0\"", &format!("listen = \"{admin}\""));
    std::fs::write(&cfg_path, text).unwrap();
    let cfg = cfg_path.to_string_lossy().into_owned();
    let mut guard = env.spawn_guard(&cfg, "a");
    assert!(
        env.wait_committed(Duration::from_secs(90)),
        "guard did not consume everything"
    );
    let verdicts = env.verdicts();
    assert!(verdicts.len() >= 3, "{} verdicts", verdicts.len());
    // Two verdicts judged wrong, one right, and one feedback naming no verdict.
    let mut want: BTreeMap<(String, bool), f64> = BTreeMap::new();
    for (i, (_, v)) in verdicts.iter().take(3).enumerate() {
        let useful = i == 2;
        let flag = if useful { "--useful" } else { "--wrong" };
        feedback(&cfg, &v.session_id, &v.verdict_id, flag);
        *want
            .entry((v.rule.as_str().to_string(), useful))
            .or_default() += 1.0;
    }
    let (_, first) = &verdicts[0];
    feedback(
        &cfg,
        &first.session_id,
        "not-a-verdict-of-this-session",
        "--wrong",
    );
    // The first verdict judged wrong again (a new event): a repeat, not a judgement.
    feedback(&cfg, &first.session_id, &first.verdict_id, "--wrong");
    let deadline = Instant::now() + Duration::from_secs(60);
    let counted = |text: &str| {
        want.iter().all(|((rule, useful), n)| {
            let labels = [format!("rule=\"{rule}\""), format!("useful=\"{useful}\"")];
            let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            sum(text, "loopguard_verdict_feedback_total", &labels) == *n
        }) && sum(
            text,
            "loopguard_feedback_unmatched_total",
            &["reason=\"unknown_verdict\""],
        ) == 1.0
            && sum(
                text,
                "loopguard_feedback_unmatched_total",
                &["reason=\"repeat\""],
            ) == 1.0
    };
    let mut text = metrics(admin);
    while !counted(&text) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
        text = metrics(admin);
    }
    guard.kill().ok();
    guard.wait().ok();
    assert!(
        counted(&text),
        "wanted {want:?}, 1 unknown_verdict and 1 repeat in:\n{}",
        text.lines()
            .filter(|l| l.contains("feedback"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Nothing of it dead-lettered.
    assert!(env.read_all(&env.topic("dlq")).is_empty());
}

/// Tenants from the writer (issue 44): under `kafka.events_topic_template`, `loopguard
/// feedback --tenant acme` goes to acme's own events topic, keyed by the session and naming
/// acme; without `--tenant` it is invalid input (exit 2) and nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_under_an_events_template_goes_to_the_tenants_own_topic() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "fbtenant");
    env.create_topics().await;
    let acme = format!("{}-events.acme", env.name);
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &env.bootstrap)
        .create()
        .unwrap();
    let topic = NewTopic::new(&acme, env.partitions, TopicReplication::Fixed(1));
    for r in admin
        .create_topics([&topic], &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap();
    }
    let cfg = env.config(&format!(
        "events_topic_template = \"{n}-events.{{tenant}}\"\nverdicts_topic_template = \"{n}-verdicts.{{tenant}}\"\n",
        n = env.name
    ));
    let run = |tenant: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_loopguard"));
        c.args(["feedback", "--config", &cfg, "--session", "s-acme"])
            .args(["--verdict", "5d1c0b9a33e04f7e8a61c2d4b7f09e13", "--wrong"]);
        if let Some(t) = tenant {
            c.args(["--tenant", t]);
        }
        c.output().unwrap()
    };
    let refused = run(None);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no --tenant"),
        "{refused:?}"
    );
    let sent = run(Some("acme"));
    assert!(sent.status.success(), "{sent:?}");
    assert!(
        String::from_utf8_lossy(&sent.stdout).contains(&format!("sent to {acme} ")),
        "{sent:?}"
    );
    let records = env.read_all(&acme);
    assert_eq!(records.len(), 1, "one feedback event in {acme}");
    let (_, key, payload, _) = &records[0];
    assert_eq!(key.as_deref(), Some(&b"s-acme"[..]));
    let event: serde_json::Value = serde_json::from_slice(payload.as_deref().unwrap()).unwrap();
    assert_eq!(event["type"], "feedback");
    assert_eq!(event["tenant"], "acme");
    assert!(
        env.read_all(&env.topic("events")).is_empty(),
        "nothing on the shared topic"
    );
    let _ = admin
        .delete_topics(&[acme.as_str()], &AdminOptions::new())
        .await;
}
