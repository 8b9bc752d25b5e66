//! `loopguard loadgen`: a realistic fleet workload against a real broker. Modes: `latency`
//! (paced load, event-to-verdict percentiles), `preload` (fill the events topic), `drain`
//! (time the guard's group to consume a preloaded topic), `raw-consume` (the same topic
//! through a plain consumer: the baseline for the throughput ratio).

use crate::engine::verdict::Verdict;
use crate::fleet;
use clap::{Args, Subcommand};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::BaseProducer;
use rdkafka::{Offset, TopicPartitionList};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct LoadgenArgs {
    #[arg(
        long,
        env = "KAFKA_BOOTSTRAP_SERVERS",
        default_value = "127.0.0.1:19092"
    )]
    pub bootstrap_servers: String,
    #[arg(long, default_value = "agent-events")]
    pub events_topic: String,
    #[arg(long, default_value = "agent-verdicts")]
    pub verdicts_topic: String,
    /// A librdkafka property for every client it makes, `KEY=VALUE` (SASL, TLS); repeat.
    #[arg(long = "property", value_name = "KEY=VALUE", global = true)]
    pub properties: Vec<String>,
    #[command(subcommand)]
    pub mode: Mode,
}

#[derive(Debug, Subcommand)]
pub enum Mode {
    /// Produce at `rate` events/s for `duration` s and measure event-to-verdict latency.
    Latency {
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        #[arg(long, default_value_t = 20)]
        duration: u64,
        #[arg(long, default_value_t = 200)]
        sessions: usize,
        /// How the verdicts are read: `committed` (read_committed) or `uncommitted`
        /// (read_uncommitted, de-duplicated on `verdict_id`: the low-latency path).
        #[arg(long, value_enum, default_value_t = Isolation::Committed)]
        isolation: Isolation,
    },
    /// Write `events` fleet events as fast as the broker takes them, or the events of a
    /// JSONL file (`dump`'s output), each keyed by its session.
    Preload {
        #[arg(long, default_value_t = 500_000)]
        events: usize,
        #[arg(long, default_value_t = 2000)]
        sessions: usize,
        #[arg(long)]
        file: Option<std::path::PathBuf>,
        /// Events per second (0: as fast as the broker takes them): a steady load.
        #[arg(long, default_value_t = 0)]
        rate: u64,
    },
    /// Wait for consumer group `group` to commit through the end of the events topic;
    /// report its rate.
    Drain {
        #[arg(long, default_value = "loopguard")]
        group: String,
        #[arg(long, default_value_t = 300)]
        timeout: u64,
    },
    /// Write `events` fleet events to stdout as JSONL (for `loopguard replay`).
    Dump {
        #[arg(long, default_value_t = 300_000)]
        events: usize,
        #[arg(long, default_value_t = 3000)]
        sessions: usize,
    },
    /// Read the whole events topic with a plain consumer; report its rate.
    RawConsume {
        #[arg(long, default_value_t = 300)]
        timeout: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Isolation {
    Committed,
    Uncommitted,
}

impl Isolation {
    fn level(self) -> &'static str {
        match self {
            Isolation::Committed => "read_committed",
            Isolation::Uncommitted => "read_uncommitted",
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn client(args: &LoadgenArgs) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &args.bootstrap_servers);
    for p in &args.properties {
        if let Some((k, v)) = p.split_once('=') {
            c.set(k.trim(), v.trim());
        }
    }
    c
}

/// Produces fleet events forever (fresh sessions each round) until `stop` or `limit`;
/// `rate` 0 means as fast as possible. Event times are the send times.
fn produce(
    args: &LoadgenArgs,
    rate: u64,
    sessions: usize,
    limit: usize,
    stop: &AtomicBool,
) -> anyhow::Result<(usize, Duration)> {
    let producer: BaseProducer = client(args)
        .set("linger.ms", "1")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "500000")
        .create()?;
    // Generate everything before the clock starts: generating a round mid-run would stall
    // the sender and then release a burst, which measures queueing, not the guard.
    let mut events = Vec::with_capacity(limit);
    let mut round = 0u64;
    while events.len() < limit {
        let prefix = format!("lg{}-{round}-", std::process::id());
        events.extend(fleet::fleet(sessions, &prefix, now_ms(), 0, round));
        round += 1;
    }
    events.truncate(limit);
    let started = Instant::now();
    let mut sent = 0usize;
    for mut e in events {
        if stop.load(Ordering::Acquire) {
            break;
        }
        if rate > 0 {
            let due = started + Duration::from_secs_f64(sent as f64 / rate as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        e.meta.ts_ms = now_ms();
        crate::service::kafka::publish::publish_event(&producer, &args.events_topic, &e)?;
        sent += 1;
    }
    crate::service::kafka::publish::flush_within(&producer, Duration::from_secs(30))?;
    Ok((sent, started.elapsed()))
}

/// Publishes every line of a JSONL file of events as it is, keyed by its `session_id`, at
/// `rate` events/s (0: as fast as the broker takes them).
fn preload_file(
    args: &LoadgenArgs,
    file: &std::path::Path,
    rate: u64,
) -> anyhow::Result<(usize, Duration)> {
    use rdkafka::producer::BaseRecord;
    use std::io::BufRead;
    let producer: BaseProducer = client(args)
        .set("linger.ms", "5")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "500000")
        .create()?;
    #[derive(serde::Deserialize)]
    struct Keyed<'a> {
        #[serde(borrow)]
        session_id: &'a str,
    }
    let started = Instant::now();
    let mut n = 0usize;
    for line in std::io::BufReader::new(std::fs::File::open(file)?).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let key = serde_json::from_str::<Keyed<'_>>(&line)?
            .session_id
            .to_string();
        if rate > 0 {
            // Delivery reports are served while waiting, not all left to the final flush.
            let due = started + Duration::from_secs_f64(n as f64 / rate as f64);
            while let Some(wait) = due.checked_duration_since(Instant::now()) {
                producer.poll(wait);
            }
        }
        let record = BaseRecord::to(&args.events_topic).key(&key).payload(&line);
        crate::service::kafka::publish::send_waiting(&producer, record)?;
        n += 1;
    }
    crate::service::kafka::publish::flush_within(&producer, Duration::from_secs(60))?;
    Ok((n, started.elapsed()))
}

fn end_offsets(c: &BaseConsumer, topic: &str) -> anyhow::Result<Vec<(i32, i64)>> {
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let parts: Vec<i32> = md
        .topics()
        .first()
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    parts
        .into_iter()
        .map(|p| Ok((p, c.fetch_watermarks(topic, p, Duration::from_secs(10))?.1)))
        .collect()
}

pub async fn run(args: LoadgenArgs) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(move || run_blocking(&args)).await?
}

fn run_blocking(args: &LoadgenArgs) -> anyhow::Result<()> {
    match &args.mode {
        Mode::Dump { events, sessions } => {
            use std::io::Write;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let (mut n, mut round) = (0usize, 0u64);
            while n < *events {
                for e in fleet::fleet(
                    *sessions,
                    &format!("dump-{round}-"),
                    1_767_225_600_000,
                    10,
                    round,
                ) {
                    if n == *events {
                        break;
                    }
                    serde_json::to_writer(&mut out, &e.to_wire())?;
                    out.write_all(b"\n")?;
                    n += 1;
                }
                round += 1;
            }
        }
        Mode::Preload {
            file: Some(file),
            rate,
            ..
        } => {
            let (n, t) = preload_file(args, file, *rate)?;
            println!(
                "preload: {n} events of {} in {:.2} s ({:.0} events/s)",
                file.display(),
                t.as_secs_f64(),
                n as f64 / t.as_secs_f64()
            );
        }
        Mode::Preload {
            events,
            sessions,
            file: None,
            rate,
        } => {
            let (n, t) = produce(args, *rate, *sessions, *events, &AtomicBool::new(false))?;
            println!(
                "preload: {n} events in {:.2} s ({:.0} events/s)",
                t.as_secs_f64(),
                n as f64 / t.as_secs_f64()
            );
        }
        Mode::RawConsume { timeout } => {
            let c: BaseConsumer = client(args)
                .set("group.id", format!("loadgen-raw-{}", std::process::id()))
                .set("auto.offset.reset", "earliest")
                .set("enable.auto.commit", "false")
                .set("isolation.level", "read_committed")
                .create()?;
            let total: i64 = end_offsets(&c, &args.events_topic)?
                .iter()
                .map(|(_, h)| h)
                .sum();
            c.subscribe(&[&args.events_topic])?;
            let deadline = Instant::now() + Duration::from_secs(*timeout);
            let (mut n, mut first) = (0i64, None);
            while n < total && Instant::now() < deadline {
                if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
                    first.get_or_insert_with(Instant::now);
                    n += 1;
                    std::hint::black_box(m.payload());
                }
            }
            let t = first.map_or(Duration::ZERO, |f| f.elapsed());
            println!(
                "raw-consume: {n} of {total} events in {:.2} s ({:.0} events/s)",
                t.as_secs_f64(),
                n as f64 / t.as_secs_f64().max(1e-9)
            );
        }
        Mode::Drain { group, timeout } => {
            let c: BaseConsumer = client(args)
                .set("group.id", group)
                .set("enable.auto.commit", "false")
                .create()?;
            let ends = end_offsets(&c, &args.events_topic)?;
            let total: i64 = ends.iter().map(|(_, h)| h).sum();
            let mut tpl = TopicPartitionList::new();
            for (p, _) in &ends {
                tpl.add_partition(&args.events_topic, *p);
            }
            let committed = |c: &BaseConsumer| -> anyhow::Result<i64> {
                let got = c.committed_offsets(tpl.clone(), Duration::from_secs(10))?;
                Ok(got
                    .elements()
                    .iter()
                    .map(|e| {
                        if let Offset::Offset(o) = e.offset() {
                            o
                        } else {
                            0
                        }
                    })
                    .sum())
            };
            let deadline = Instant::now() + Duration::from_secs(*timeout);
            let base = committed(&c)?;
            let mut start: Option<(Instant, i64)> = None;
            let mut last = base;
            while last < total && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
                last = committed(&c)?;
                if last > base && start.is_none() {
                    start = Some((Instant::now(), last));
                }
            }
            let (t0, c0) = start.unwrap_or((Instant::now(), last));
            let t = t0.elapsed().as_secs_f64().max(1e-9);
            println!("drain: group `{group}` committed {} events in {t:.2} s ({:.0} events/s); {} of {total} committed", last - c0, (last - c0) as f64 / t, last);
        }
        Mode::Latency {
            rate,
            duration,
            sessions,
            isolation,
        } => {
            let stop = Arc::new(AtomicBool::new(false));
            let c: BaseConsumer = client(args)
                .set(
                    "group.id",
                    format!("loadgen-latency-{}", std::process::id()),
                )
                // read_committed fetches wake on new data, not on a commit marker: keep the
                // broker long-poll short or a verdict can wait fetch.wait.max.ms (500 ms).
                .set("fetch.wait.max.ms", "5")
                .set("auto.offset.reset", "latest")
                .set("enable.auto.commit", "false")
                .set("isolation.level", isolation.level())
                .create()?;
            c.subscribe(&[&args.verdicts_topic])?;
            let warm = Instant::now();
            while c.assignment()?.count() == 0 && warm.elapsed() < Duration::from_secs(30) {
                c.poll(Duration::from_millis(100));
            }
            let producer = {
                let stop = stop.clone();
                let (rate, sessions, duration) = (*rate, *sessions, *duration);
                let args = LoadgenArgs {
                    bootstrap_servers: args.bootstrap_servers.clone(),
                    events_topic: args.events_topic.clone(),
                    verdicts_topic: args.verdicts_topic.clone(),
                    properties: args.properties.clone(),
                    mode: Mode::RawConsume { timeout: 0 },
                };
                std::thread::spawn(move || {
                    produce(&args, rate, sessions, (rate * duration) as usize, &stop)
                })
            };
            let mut hist = hdrhistogram::Histogram::<u64>::new(3)?;
            // read_uncommitted: a verdict of an aborted batch is written again when the batch
            // is redone (same verdict_id); the runtime keeps the first.
            let (mut seen, mut duplicates) = (std::collections::HashSet::new(), 0u64);
            // Event time to the guard writing the verdict (before its commit).
            let mut in_guard = hdrhistogram::Histogram::<u64>::new(3)?;
            // Until the producer is done, then 2 s for the last verdicts.
            let mut grace: Option<Instant> = None;
            while grace.is_none_or(|g| Instant::now() < g) {
                if grace.is_none() && producer.is_finished() {
                    grace = Some(Instant::now() + Duration::from_secs(2));
                }
                if let Some(Ok(m)) = c.poll(Duration::from_millis(50)) {
                    if let Some(v) = m
                        .payload()
                        .and_then(|p| serde_json::from_slice::<Verdict>(p).ok())
                    {
                        if !seen.insert(v.verdict_id.clone()) {
                            duplicates += 1;
                            continue;
                        }
                        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(&v.ts) {
                            hist.record((now_ms() - t.timestamp_millis()).max(0) as u64)?;
                            let emitted = v
                                .emitted_at
                                .as_deref()
                                .and_then(|e| chrono::DateTime::parse_from_rfc3339(e).ok());
                            if let Some(e) = emitted {
                                in_guard.record(
                                    (e.timestamp_millis() - t.timestamp_millis()).max(0) as u64,
                                )?;
                            }
                        }
                    }
                }
            }
            stop.store(true, Ordering::Release);
            let (sent, took) = producer
                .join()
                .map_err(|_| anyhow::anyhow!("producer panicked"))??;
            println!(
                "latency ({}): sent {sent} events in {:.1} s ({:.0}/s); {} verdicts ({duplicates} duplicates dropped); event-to-verdict ms p50 {} p90 {} p99 {} max {}",
                isolation.level(),
                took.as_secs_f64(),
                sent as f64 / took.as_secs_f64(),
                hist.len(),
                hist.value_at_quantile(0.5),
                hist.value_at_quantile(0.9),
                hist.value_at_quantile(0.99),
                hist.max()
            );
            println!(
                "latency: event-to-emitted (before the commit) ms p50 {} p90 {} p99 {} max {}",
                in_guard.value_at_quantile(0.5),
                in_guard.value_at_quantile(0.9),
                in_guard.value_at_quantile(0.99),
                in_guard.max()
            );
        }
    }
    Ok(())
}
