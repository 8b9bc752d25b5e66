//! `loopguard demo`: an embedded broker, the guard, a simulated fleet (healthy and looping
//! agents, real reasoning loops among them) and a live view of the verdicts.

use crate::config::Config;
use crate::engine::event::Event;
use crate::engine::policy::PolicySet;
use crate::engine::verdict::Verdict;
use crate::fleet;
use crate::service::{self, records::marker as judged, Instance};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, Producer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct DemoOptions {
    /// Only play the fleet into an existing broker (a load source); no guard, no view.
    pub fleet_only: bool,
    pub sessions: usize,
    /// Stop after this long; `None` runs until Ctrl-C.
    pub duration: Option<Duration>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Publishes `events` keyed by session, pacing them `gap` apart; returns events sent.
pub fn publish(
    producer: &BaseProducer,
    topic: &str,
    events: &[Event],
    gap: Duration,
    stop: &AtomicBool,
) -> anyhow::Result<usize> {
    let mut sent = 0;
    for e in events {
        if stop.load(Ordering::Acquire) {
            break;
        }
        crate::service::kafka::publish::publish_event(producer, topic, e)?;
        sent += 1;
        if !gap.is_zero() {
            std::thread::sleep(gap);
        }
    }
    producer.flush(Duration::from_secs(10))?;
    Ok(sent)
}

/// What the demo says first: where its broker is, a client to try against it, and the
/// no-code path (the edge and a CLI hook).
fn try_a_client(bootstrap: &str) -> String {
    format!(
        "loopguard demo: embedded Kafka-protocol broker at {bootstrap} (in memory, not durable)\n\
         try a client against it (docs/integration.md), e.g. Python: Guard(\"{bootstrap}\", agent=\"me\")\n\
         or TypeScript: await Guard.connect({{ brokers: [\"{bootstrap}\"], agent: \"me\" }})\n\
         or with no code (docs/edge.md): loopguard edge --bootstrap-servers {bootstrap}, then your CLI's hook: loopguard hook claude-code\n"
    )
}

/// The rule the demo runs in observe mode, unless the configuration sets modes itself.
pub const DEMO_OBSERVED_RULE: &str = "content.repeat";

/// The configuration's policy with `DEMO_OBSERVED_RULE` in observe mode appended (a later
/// entry wins), unless the policy already sets a mode anywhere; `None`: left as it is.
fn with_observed_rule(raw: &serde_json::Value) -> Option<PolicySet> {
    if raw.to_string().contains("\"mode\"") {
        return None;
    }
    let mut raw = match raw {
        serde_json::Value::Object(_) => raw.clone(),
        _ => serde_json::json!({}),
    };
    let rules = raw
        .as_object_mut()?
        .entry("rules")
        .or_insert_with(|| serde_json::json!([]));
    rules
        .as_array_mut()?
        .push(serde_json::json!({"rule": DEMO_OBSERVED_RULE, "mode": "observe"}));
    PolicySet::compile(&raw).ok()
}

/// One verdict line; an observe-mode one is marked `observe` in place of its colour (it is
/// written with `enforce: false`: what the rule would have done, never acted on).
fn verdict_line(v: &Verdict) -> String {
    let colour = match v.action.as_str() {
        "warn" => "33",
        "steer" => "36",
        "block" => "35",
        _ => "31",
    };
    let (colour, mode) = if v.enforce {
        (colour, "       ")
    } else {
        ("2", "observe")
    };
    let msg: String = v.message.chars().take(100).collect();
    format!(
        "\x1b[{colour}m{:>5}\x1b[0m {mode} {:<26} {:<34} attempt {} | {msg}",
        v.action.as_str(),
        v.rule.as_str(),
        v.session_id,
        v.attempt
    )
}

/// What the demo's viewer read from the verdicts topic.
#[derive(Default)]
struct Viewed {
    verdicts: usize,
    markers: usize,
    /// The highest judged-through offset per partition: the events covered.
    judged: std::collections::BTreeMap<i32, i64>,
}

/// A judged-through marker's `through_offset` (None for a verdict).
fn marker_through(m: &rdkafka::message::BorrowedMessage<'_>) -> Option<i64> {
    use rdkafka::message::Headers;
    let kind = m.headers()?.iter().find(|h| h.key == judged::KIND_HEADER)?;
    if m.key().is_some() || kind.value != Some(judged::JUDGED.as_bytes()) {
        return None;
    }
    serde_json::from_slice::<judged::Marker>(m.payload()?)
        .ok()
        .map(|marker| marker.through_offset)
}

pub async fn run(
    mut cfg: Config,
    registry: prometheus::Registry,
    opts: DemoOptions,
) -> anyhow::Result<()> {
    let embedded = Instance::embedded_broker(&mut cfg)?;
    if embedded.is_none() {
        service::kafka::topics::ensure_topics(&cfg, Some(cfg.kafka.embedded_partitions.get()))
            .await?;
    } else if !opts.fleet_only {
        print!("{}", try_a_client(&cfg.kafka.bootstrap_servers));
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            service::shutdown_signal().await;
            stop.store(true, Ordering::Release);
        });
    }
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &cfg.kafka.bootstrap_servers)
        .set("linger.ms", "5")
        .create()?;
    if opts.fleet_only {
        let mut round = 0u64;
        while !stop.load(Ordering::Acquire) {
            let events = fleet::fleet(opts.sessions, &format!("r{round}-"), now_ms(), 200, round);
            let n = publish(
                &producer,
                &cfg.kafka.events_topic,
                &events,
                Duration::from_millis(5),
                &stop,
            )?;
            println!(
                "fleet round {round}: {n} events from {} sessions",
                opts.sessions
            );
            round += 1;
        }
        return Ok(());
    }

    if let Some(policy) = with_observed_rule(&cfg.policy_raw) {
        cfg.policy = policy;
        println!(
            "loopguard demo: rule {DEMO_OBSERVED_RULE} runs in observe mode: its verdicts are marked `observe` \
             (written with enforce false, never acted on; docs/tuning.md)"
        );
    }
    let mut instance = Instance::open(&cfg, registry, embedded).await?;
    let admin = instance.admin;
    println!("loopguard demo: metrics on http://{admin}/metrics");
    let cfg = Arc::new(cfg);
    instance.start(cfg.clone());
    let viewer = {
        let (cfg, stop) = (cfg.clone(), stop.clone());
        std::thread::spawn(move || -> anyhow::Result<Viewed> {
            let c: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &cfg.kafka.bootstrap_servers)
                .set("group.id", "loopguard-demo-viewer")
                .set("isolation.level", "read_committed")
                .set("auto.offset.reset", "earliest")
                .set("enable.auto.commit", "false")
                .create()?;
            c.subscribe(&[&cfg.kafka.verdicts_topic])?;
            let mut seen = Viewed::default();
            while !stop.load(Ordering::Acquire) {
                if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
                    if let Some(through) = marker_through(&m) {
                        seen.markers += 1;
                        let judged = seen.judged.entry(m.partition()).or_default();
                        *judged = (*judged).max(through);
                    } else if let Some(v) = m
                        .payload()
                        .and_then(|p| serde_json::from_slice::<Verdict>(p).ok())
                    {
                        println!("{}", verdict_line(&v));
                        seen.verdicts += 1;
                    }
                }
            }
            Ok(seen)
        })
    };
    let events = fleet::fleet(opts.sessions, "demo-", now_ms(), 50, 42);
    println!("playing a fleet of {} sessions ({} events): healthy coders, paging, polling, and looping agents\n", opts.sessions, events.len());
    let started = Instant::now();
    let sent = publish(
        &producer,
        &cfg.kafka.events_topic,
        &events,
        Duration::from_millis(4),
        &stop,
    )?;
    println!(
        "\nfleet done: {sent} events in {:.1} s; waiting for the last verdicts (Ctrl-C to stop)",
        started.elapsed().as_secs_f64()
    );
    let deadline = opts.duration.map(|d| started + d);
    while !stop.load(Ordering::Acquire) && deadline.is_none_or(|d| Instant::now() < d) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Release);
    let seen = viewer
        .join()
        .map_err(|_| anyhow::anyhow!("viewer panicked"))??;
    instance.stop().await?;
    println!(
        "{} verdicts shown; {} judged-through markers cover {} of the {sent} events (a runtime's call \
         that gets no verdict returns at its marker, not at its deadline). Metrics were at http://{admin}/metrics",
        seen.verdicts,
        seen.markers,
        seen.judged.values().sum::<i64>()
    );
    // The guard's own counters (loopguard_loop_tokens_total, …): the fleet's runtimes send
    // `usage` on every response end.
    print!("{}", instance.shared.metrics.loop_cost.summary().render());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_observes_one_rule_and_marks_its_verdicts() {
        let mut set = with_observed_rule(&serde_json::Value::Null).unwrap();
        let rule = crate::engine::verdict::Rule::from_name(DEMO_OBSERVED_RULE).unwrap();
        assert_eq!(
            set.mode_of(None, None, rule).0,
            crate::engine::policy::Mode::Observe
        );
        // A configuration that sets modes itself is left alone.
        let own = serde_json::json!({"rules": [{"rule": "tool.cycle", "mode": "observe"}]});
        assert!(with_observed_rule(&own).is_none());
        let events = fleet::fleet(18, "t-", 0, 50, 42);
        let mut engine = crate::engine::Engine::new(set, crate::engine::Limits::default());
        let mut out = Vec::new();
        for e in events {
            engine.handle_event(e, &mut out);
        }
        let observed: Vec<&Verdict> = out.iter().filter(|v| !v.enforce).collect();
        assert!(
            !observed.is_empty(),
            "the demo fleet triggers {DEMO_OBSERVED_RULE}"
        );
        assert!(observed.iter().all(|v| v.rule == rule));
        assert!(out.iter().any(|v| v.enforce));
        assert!(verdict_line(observed[0]).contains(" observe "));
        let enforced = out.iter().find(|v| v.enforce).unwrap();
        assert!(!verdict_line(enforced).contains("observe"));
    }

    #[test]
    fn the_hint_names_the_address_for_both_clients() {
        assert_eq!(
            super::try_a_client("127.0.0.1:9192"),
            "loopguard demo: embedded Kafka-protocol broker at 127.0.0.1:9192 (in memory, not durable)\n\
             try a client against it (docs/integration.md), e.g. Python: Guard(\"127.0.0.1:9192\", agent=\"me\")\n\
             or TypeScript: await Guard.connect({ brokers: [\"127.0.0.1:9192\"], agent: \"me\" })\n\
             or with no code (docs/edge.md): loopguard edge --bootstrap-servers 127.0.0.1:9192, then your CLI's hook: loopguard hook claude-code\n"
        );
    }
}
