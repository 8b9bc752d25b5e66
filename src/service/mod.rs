//! `loopguard serve`: the Kafka adapter around the engine. Wiring only: config ->
//! telemetry -> topics -> stream threads + admin HTTP -> run until SIGTERM/SIGINT ->
//! commit in-flight work -> exit.

pub mod access;
pub mod admin;
pub mod committer;
pub mod dlq;
pub mod embedded;
pub mod judged;
pub mod kafka;
mod leave;
pub mod loop_metrics;
pub mod membership;
pub mod metrics;
pub mod partition;
pub mod policy_feed;
pub mod policy_record;
pub mod rebalance;
pub mod retry;
pub mod state;
pub mod tenant_topics;
pub mod txn;
pub mod worker;

use crate::config::Config;
use admin::Shared;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rebalance::GuardContext;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use worker::Worker;

/// How long a starting instance waits for the policy topic to be read to its end.
const POLICY_CATCH_UP: Duration = Duration::from_secs(10);

/// How long in-flight work may take to commit after a stop signal.
pub const GRACE: Duration = Duration::from_secs(20);

/// A name for this instance: stable across restarts of the same pod or host, so a
/// restarted instance fences its predecessor's transaction at once.
pub fn instance_id() -> String {
    std::env::var("LOOPGUARD_INSTANCE_ID")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("pid-{}", std::process::id()))
}

/// Runs `cfg.stream_threads()` stream threads until `stop` is set, each a consumer in the
/// group with its own transactional producer (the partitions are spread over them by the
/// group's assignor); returns after every thread committed its in-flight work. A thread
/// that fails stops the others, and its error is returned.
pub fn run_stream_threads(
    cfg: Arc<Config>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let threads = cfg.stream_threads();
    shared.expect_joins(threads);
    let instance = instance_id();
    shared.metrics.set_policy_version(cfg.policy.version());
    let leave = leave::LeaveTogether::new(threads);
    std::thread::scope(|scope| {
        let reader = {
            let (cfg, shared, stop) = (cfg.clone(), shared.clone(), stop.clone());
            std::thread::Builder::new()
                .name("policy-reader".into())
                .spawn_scoped(scope, move || {
                    let result = policy_feed::run_policy_reader(&cfg, &shared, &stop);
                    if let Err(e) = &result {
                        tracing::error!(error = %e, "policy reader stopped");
                        stop.store(true, Ordering::Release);
                    }
                    result
                })?
        };
        // The first event is judged by the latest published version: the policy topic is
        // read to its end first (a few ms; at most POLICY_CATCH_UP).
        let started = Instant::now();
        while !shared.policy.is_caught_up()
            && !reader.is_finished()
            && started.elapsed() < POLICY_CATCH_UP
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        if reader.is_finished() {
            return reader
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the policy reader panicked")))
                .and(Err(anyhow::anyhow!("the policy reader stopped")));
        }
        if !shared.policy.is_caught_up() {
            tracing::warn!(topic = %cfg.kafka.policy_topic, "policy topic not read to its end in time; starting with the version known");
        }
        tracing::info!(threads, instance = %instance, "starting stream threads");
        let leave = &leave;
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                // Thread 0 keeps the instance's own transactional id, so a single-threaded
                // guard fences its predecessor exactly as before.
                let name = if i == 0 {
                    instance.clone()
                } else {
                    format!("{instance}-{i}")
                };
                let (cfg, shared, stop) = (cfg.clone(), shared.clone(), stop.clone());
                std::thread::Builder::new()
                    .name(format!("stream-{i}"))
                    .spawn_scoped(scope, move || {
                        // A failed or panicking thread stops the others at once, not when
                        // its turn to be joined comes.
                        let run = std::panic::AssertUnwindSafe(|| {
                            run_consumer(cfg, shared, stop.clone(), &name, leave)
                        });
                        let result = std::panic::catch_unwind(run)
                            .unwrap_or_else(|_| Err(anyhow::anyhow!("stream thread {i} panicked")));
                        if let Err(e) = &result {
                            tracing::error!(thread = i, error = %e, "stream thread stopped");
                            stop.store(true, Ordering::Release);
                        }
                        result
                    })
            })
            .collect::<Result<_, _>>()
            .inspect_err(|_| stop.store(true, Ordering::Release))?;
        let mut first_error = None;
        for h in handles {
            let result = h
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("a stream thread panicked")));
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        stop.store(true, Ordering::Release);
        if let Ok(Err(e)) = reader.join() {
            first_error.get_or_insert(e);
        }
        first_error.map_or(Ok(()), Err)
    })
}

/// One stream thread: runs until `stop` is set; returns after committing in-flight work.
/// `instance` names its transactional producer; it leaves the group with the instance's
/// other stream threads (`leave`).
fn run_consumer(
    cfg: Arc<Config>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    instance: &str,
    leave: &leave::LeaveTogether,
) -> anyhow::Result<()> {
    let mut member = leave.join();
    let producer = txn::TxnProducer::new(cfg.clone(), instance)?;
    let reader = state::StateReader::new(
        kafka::state_reader_config(&cfg).create_with_context(state::QuietEof)?,
        kafka::state_probe_config(&cfg).create_with_context(state::QuietEof)?,
    );
    let worker = Worker::new(cfg.clone(), shared.clone(), producer, reader);
    let context = GuardContext::new(worker, shared.clone(), cfg.kafka.events_topic.clone());
    let consumer: membership::SharedConsumer<GuardContext> =
        membership::SharedConsumer::new(kafka::consumer_config(&cfg).create_with_context(context)?);
    consumer
        .context()
        .lock()
        .read_membership_from(Box::new(consumer.membership()));
    consumer.subscribe(&[&cfg.kafka.events_topic])?;
    tracing::info!(instance = %instance, topic = %cfg.kafka.events_topic, group = %cfg.kafka.group_id, "consuming");
    let result = stream_loop(&consumer, &stop);
    if result.is_ok() && !member.finished(GRACE) {
        tracing::warn!("leaving the group before every stream thread's final commit");
    }
    // A thread that failed leaves at once (`member` dropped: no one waits for it).
    drop(member);
    // However the loop ended, the callbacks served while the consumer closes only let the
    // partitions go: no restore, no commit.
    consumer.context().close();
    result?;
    tracing::info!("stop requested: in-flight work committed, leaving the group");
    consumer.unsubscribe();
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline && consumer.poll(Duration::from_millis(100)).is_some() {}
    Ok(())
}

/// How long a stream thread waits before it tries a failed rewind again.
const REWIND_BACKOFF: Duration = Duration::from_millis(500);

/// The consumer loop of a stream thread, until `stop` is set (then in-flight work is
/// committed) or an error it cannot ride out.
fn stream_loop(consumer: &BaseConsumer<GuardContext>, stop: &AtomicBool) -> anyhow::Result<()> {
    // Since when rewinds have failed with errors other than the broker's absence.
    let mut failing_since: Option<Instant> = None;
    while !stop.load(Ordering::Acquire) {
        // Wake up when the open batch is due, so an idle partition's last verdicts commit
        // on time, not one long poll later.
        // While judged-through markers are owed, the queue is only looked at: an empty one
        // means the burst is over, and they are written at once.
        let wait = consumer.context().lock().poll_wait();
        let msg = consumer.poll(wait);
        let mut w = consumer.context().lock();
        w.poll_policy();
        if let Err(e) = w.poll_commit() {
            // The open batch is aborted too and a rewind is pending (`Worker::poll_commit`).
            tracing::error!(error = %e, "commit failed; rewinding to the last commit");
        }
        if let Some(fatal) = w.fatal.take() {
            anyhow::bail!(fatal);
        }
        if w.needs_rewind {
            w.needs_rewind = false;
            drop(msg);
            match w.rewind(consumer) {
                Ok(()) => failing_since = None,
                Err(e) => {
                    if let Some(fatal) = w.fatal.take() {
                        anyhow::bail!(fatal);
                    }
                    if let Some(why) = worker::rewind_gives_up(&e, &mut failing_since) {
                        anyhow::bail!(why);
                    }
                    // The broker is away (or restarting): the engines stay at the last
                    // commit and the partitions unserved (`/readyz` 503) until it answers;
                    // polling goes on meanwhile, so the group sees this member alive and
                    // rebalances reach it.
                    tracing::warn!(error = %e, "rewind failed; trying again");
                    w.needs_rewind = true;
                    drop(w);
                    std::thread::sleep(REWIND_BACKOFF);
                }
            }
            continue;
        }
        let idle = msg.is_none();
        match msg {
            Some(Ok(m)) => {
                if let Err(e) = w.process(consumer, &m) {
                    tracing::error!(error = %e, "processing failed; rewinding to the last commit");
                    drop(m);
                    w.fail_batch();
                    continue;
                }
            }
            Some(Err(e)) => {
                w.tick();
                tracing::warn!(error = %e, "consumer error")
            }
            None => w.tick(),
        }
        if idle || w.markers_overdue() {
            if let Err(e) = w.write_markers() {
                tracing::error!(error = %e, "writing verdicts and markers failed; rewinding to the last commit");
                w.fail_writes(&e);
                continue;
            }
        }
        if w.due() {
            if let Err(e) = w.commit_pipelined(consumer) {
                // The batch is aborted and a rewind is pending (`Worker::commit`).
                tracing::error!(error = %e, "commit failed; rewinding to the last commit");
            }
        }
    }
    let mut w = consumer.context().lock();
    w.commit_final(consumer)?;
    Ok(())
}

/// How often a guard refused by the broker asks again.
const ACCESS_RECHECK: Duration = Duration::from_secs(10);

/// Checks the topics and what the broker lets this guard do (`access`) until both pass:
/// while an ACL is missing the guard stays up and unready, names the refused resource and
/// operation (log, `/readyz`, `loopguard_kafka_access_denied`) and asks again every
/// `ACCESS_RECHECK`, so granting it is enough; no crash loop. Other errors are returned.
async fn wait_for_access(cfg: &Config, shared: &Arc<Shared>) -> anyhow::Result<()> {
    let gauge = &shared.metrics.access_denied;
    let mut said: Option<String> = None;
    loop {
        // The topics first (a broker that never answers, a missing topic: named there),
        // then what the broker grants; a topic it will not even describe is named by the
        // operations the guard needs on it.
        let topics = match kafka::ensure_topics(cfg, None).await {
            Err(kafka::KafkaSetupError::Denied(d)) => Some(d),
            Err(e) => return Err(e.into()),
            Ok(_) => None,
        };
        let c = cfg.clone();
        let instance = instance_id();
        let refused =
            match tokio::task::spawn_blocking(move || access::check(&c, &instance)).await? {
                Err(access::AccessError::Denied(d)) => Some(d),
                Err(e) => match topics {
                    Some(d) => Some(vec![d]),
                    None => return Err(e.into()),
                },
                Ok(()) => topics.map(|d| vec![d]),
            };
        gauge.reset();
        let Some(refused) = refused else {
            *shared
                .access_denied
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = None;
            if said.is_some() {
                tracing::info!("the broker now grants every operation the guard needs");
            }
            return Ok(());
        };
        for d in &refused {
            gauge.with_label_values(&[&d.resource, d.operation]).set(1);
        }
        let text = refused
            .iter()
            .map(|d| format!("{} on {}", d.operation, d.resource))
            .collect::<Vec<_>>()
            .join(", ");
        if said.as_deref() != Some(text.as_str()) {
            for d in &refused {
                tracing::error!(resource = %d.resource, operation = d.operation, "{d}");
            }
            tracing::error!(refused = %text, "not starting until granted; asking again every {}s", ACCESS_RECHECK.as_secs());
        }
        *shared
            .access_denied
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(format!(
            "the broker refuses {text} (docs/operations.md, ACLs)"
        ));
        said = Some(text);
        tokio::time::sleep(ACCESS_RECHECK).await;
    }
}

/// `loopguard serve`: embedded broker when no bootstrap servers, admin HTTP, the consumer
/// thread, signals. Returns when stopped.
pub async fn serve(mut cfg: Config, registry: prometheus::Registry) -> anyhow::Result<()> {
    if !cfg.kafka.bootstrap_servers.is_empty() {
        // Before anything else: a broker address that refuses connections is named at once.
        let servers = cfg.kafka.bootstrap_servers.clone();
        tokio::task::spawn_blocking(move || kafka::reachable(&servers, "kafka.bootstrap_servers"))
            .await??;
        // A missing topic or a broker that never answers ends the start here, before the
        // admin port is taken; a refusal is waited out below, with the admin port up.
        match kafka::ensure_topics(&cfg, None).await {
            Err(kafka::KafkaSetupError::Denied(_)) | Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let metrics = metrics::Metrics::new(registry, &cfg.metrics)?;
    let shared = Shared::new(metrics, &cfg.admin.debug_token);
    let listener = admin::bind(cfg.admin.listen).await?;
    tracing::info!(addr = %cfg.admin.listen, "admin HTTP listening (/livez /readyz /metrics)");
    let app = admin::router(shared.clone());
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "admin server stopped");
        }
    });
    let _embedded = if cfg.kafka.bootstrap_servers.is_empty() {
        let cluster = embedded::EmbeddedKafka::start(&cfg)?;
        cfg.kafka.bootstrap_servers = cluster.bootstrap_servers();
        Some(cluster)
    } else {
        let granted = tokio::select! {
            _ = shutdown_signal() => false,
            r = wait_for_access(&cfg, &shared) => { r?; true }
        };
        if !granted {
            tracing::info!("signal received before the broker granted access: exiting");
            return Ok(());
        }
        None
    };
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = Arc::new(cfg);
    let mut consumer = {
        let (cfg, shared, stop) = (cfg.clone(), shared.clone(), stop.clone());
        tokio::task::spawn_blocking(move || run_stream_threads(cfg, shared, stop))
    };
    tokio::select! {
        _ = shutdown_signal() => tracing::info!("signal received: draining"),
        r = &mut consumer => return r?,
    }
    stop.store(true, Ordering::Release);
    match tokio::time::timeout(GRACE + Duration::from_secs(5), consumer).await {
        Ok(r) => r?,
        Err(_) => anyhow::bail!("in-flight work not committed within the grace period"),
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every thread's producer is refused (an unknown librdkafka property): the threads
    /// stop and the first error comes back, nothing hangs.
    #[test]
    fn stream_threads_that_cannot_start_return_their_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loopguard.toml");
        std::fs::write(
            &path,
            "[kafka]\nbootstrap_servers = \"127.0.0.1:1\"\nthreads = 2\n[kafka.properties]\n\"no.such.property\" = \"1\"\n",
        )
        .unwrap();
        let cfg = crate::config::load(Some(path.to_str().unwrap())).unwrap();
        let metrics = metrics::Metrics::new(prometheus::Registry::new(), &cfg.metrics).unwrap();
        let shared = Shared::new(metrics, "");
        let stop = Arc::new(AtomicBool::new(false));
        let err = run_stream_threads(Arc::new(cfg), shared, stop.clone()).unwrap_err();
        assert!(err.to_string().contains("no.such.property"), "{err}");
        assert!(stop.load(Ordering::Acquire));
    }
}
