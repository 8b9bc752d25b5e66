//! The stream threads of an instance: each a consumer in the group with its own
//! transactional producer, consuming, judging (`worker`), committing, following rebalances
//! (`rebalance`) and leaving the group together (`leave`).

mod leave;
pub mod rebalance;
pub mod retry;
mod rewind_bound;
pub mod worker;

use crate::config::Config;
use crate::service::kafka::settings::{
    consumer_config, instance_id, state_probe_config, state_reader_config,
};
use crate::service::policy_feed::run_policy_reader;
use crate::service::shared::Shared;
use crate::service::state::restore::{QuietEof, StateReader};
use crate::service::txn::membership::SharedConsumer;
use crate::service::txn::TxnProducer;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rebalance::GuardContext;
use rewind_bound::rewind_gives_up;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use worker::{Next, Worker};

/// How long a starting instance waits for the policy topic to be read to its end.
const POLICY_CATCH_UP: Duration = Duration::from_secs(10);

/// How long in-flight work may take to commit after a stop signal.
pub const GRACE: Duration = Duration::from_secs(20);

/// Runs `cfg.stream_threads()` stream threads until `stop` is set, each a consumer in the
/// group with its own transactional producer (the partitions are spread over them by the
/// group's assignor), and with tenants from the writer (`kafka.events_topic_template`)
/// `kafka.tenant_threads` more for each tenant's own events topic (`kafka::tenants`), new tenants
/// picked up while running; returns after every thread committed its in-flight work. A
/// thread that fails stops the others, and its error is returned.
pub fn run_stream_threads(
    cfg: Arc<Config>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let instance = instance_id();
    shared.metrics.set_policy_version(cfg.policy.version());
    let mut tenants = Tenants::new(&cfg, &instance)?;
    let first = tenants.discover(&cfg);
    let lane_threads = cfg.kafka.tenant_threads.get();
    shared.expect_joins(cfg.stream_threads() + first.len() * lane_threads);
    std::thread::scope(|scope| {
        let reader = {
            let (cfg, shared, stop) = (cfg.clone(), shared.clone(), stop.clone());
            std::thread::Builder::new()
                .name("policy-reader".into())
                .spawn_scoped(scope, move || {
                    let result = run_policy_reader(&cfg, &shared.policy, &shared.metrics, &stop);
                    if let Err(e) = &result {
                        tracing::error!(error = %e, "policy reader stopped");
                        stop.store(true, Ordering::Release);
                    }
                    result
                })?
        };
        let (demote, demotions) = std::sync::mpsc::channel();
        shared.demotions.publish_to(demote);
        let publisher = {
            let (cfg, shared) = (cfg.clone(), shared.clone());
            std::thread::Builder::new()
                .name("demotions".into())
                .spawn_scoped(scope, move || {
                    crate::service::demotion::run_publisher(
                        &cfg,
                        &shared.policy,
                        &shared.metrics,
                        demotions,
                    )
                })?
        };
        // However this scope ends (an early return included), the publisher is told to
        // finish before the scope waits for it.
        let _stop_publishing = crate::service::demotion::StopOnDrop(&shared.demotions);
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
        let mut handles = Vec::new();
        let spawn = |lane: Arc<Config>, tenant: Option<&str>, handles: &mut Vec<_>| {
            spawn_lane(scope, lane, tenant, &shared, &stop, &instance, handles)
                .inspect_err(|_| stop.store(true, Ordering::Release))
        };
        spawn(cfg.clone(), None, &mut handles)?;
        for (t, lane) in first {
            spawn(lane, Some(&t), &mut handles)?;
        }
        let every = Duration::from_millis(cfg.kafka.tenant_discovery_ms.max(100));
        let mut next = Instant::now() + every;
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50));
            if cfg.kafka.tenants_from_topics() && Instant::now() >= next {
                for (t, lane) in tenants.discover(&cfg) {
                    spawn(lane, Some(&t), &mut handles)?;
                }
                next = Instant::now() + every;
            }
        }
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
        shared.demotions.stop_publishing();
        let _ = publisher.join();
        if let Ok(Err(e)) = reader.join() {
            first_error.get_or_insert(e);
        }
        first_error.map_or(Ok(()), Err)
    })
}

/// The tenants served so far, and what the broker was asked to find more.
struct Tenants {
    probe: Option<BaseConsumer<QuietEof>>,
    instance: String,
    served: std::collections::BTreeSet<String>,
    /// What was last said of a tenant not served (missing topics, refused ACLs): said
    /// again only when it changes.
    said: std::collections::BTreeMap<String, String>,
}

impl Tenants {
    fn new(cfg: &Config, instance: &str) -> anyhow::Result<Self> {
        let probe = match cfg.kafka.tenants_from_topics() {
            true => Some(state_probe_config(cfg).create_with_context(QuietEof)?),
            false => None,
        };
        Ok(Tenants {
            probe,
            instance: instance.to_string(),
            served: Default::default(),
            said: Default::default(),
        })
    }

    /// The tenants found on the broker since the last call whose topics are all there
    /// and whose ACLs let this guard serve them, each with its lane's configuration.
    fn discover(&mut self, cfg: &Config) -> Vec<(String, Arc<Config>)> {
        let Some(probe) = &self.probe else {
            return Vec::new();
        };
        let found = match crate::service::kafka::tenants::discover(cfg, probe) {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the tenants' events topics; asking again later");
                return Vec::new();
            }
        };
        for (t, missing) in &found.incomplete {
            let why = format!("missing {}", missing.join(", "));
            self.say(t, why, "a tenant events topic is not served until its topics exist (`loopguard topics create --tenant T`)");
        }
        let mut new = Vec::new();
        for t in found.ready {
            if self.served.contains(&t) {
                continue;
            }
            let Some(lane) = crate::service::kafka::tenants::lane_config(cfg, &t) else {
                continue;
            };
            if let Err(e) = crate::service::kafka::access::check(&lane, &self.instance) {
                self.say(
                    &t,
                    e.to_string(),
                    "a tenant events topic is not served: the guard's ACLs do not cover it",
                );
                continue;
            }
            tracing::info!(tenant = %t, topic = %lane.kafka.events_topic, group = %lane.kafka.group_id, "serving a tenant's events topic");
            self.said.remove(&t);
            self.served.insert(t.clone());
            new.push((t, Arc::new(lane)));
        }
        new
    }

    fn say(&mut self, tenant: &str, why: String, what: &str) {
        if self.said.get(tenant) != Some(&why) {
            tracing::warn!(tenant, reason = %why, "{what}");
            self.said.insert(tenant.to_string(), why);
        }
    }
}

/// Starts a lane's stream threads (`lane.stream_threads()` of them, leaving the group
/// together): the shared events topic's (`tenant` `None`) or a tenant's own.
fn spawn_lane<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    lane: Arc<Config>,
    tenant: Option<&str>,
    shared: &Arc<Shared>,
    stop: &Arc<AtomicBool>,
    instance: &str,
    handles: &mut Vec<std::thread::ScopedJoinHandle<'scope, anyhow::Result<()>>>,
) -> std::io::Result<()> {
    let threads = lane.stream_threads();
    let leave = Arc::new(leave::LeaveTogether::new(threads));
    tracing::info!(threads, instance = %instance, tenant, "starting stream threads");
    for i in 0..threads {
        // Thread 0 keeps the instance's own transactional id, so a single-threaded
        // guard fences its predecessor exactly as before; a tenant's threads add the tenant.
        let base = match tenant {
            Some(t) => format!("{instance}.{t}"),
            None => instance.to_string(),
        };
        let name = if i == 0 { base } else { format!("{base}-{i}") };
        let thread = match tenant {
            Some(t) => format!("stream-{t}-{i}"),
            None => format!("stream-{i}"),
        };
        let (cfg, shared, stop, leave) =
            (lane.clone(), shared.clone(), stop.clone(), leave.clone());
        let handle = std::thread::Builder::new()
            .name(thread.clone())
            .spawn_scoped(scope, move || {
                // A failed or panicking thread stops the others at once, not when its
                // turn to be joined comes.
                let run = std::panic::AssertUnwindSafe(|| {
                    run_consumer(cfg, shared, stop.clone(), &name, &leave)
                });
                let result = std::panic::catch_unwind(run)
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("stream thread {thread} panicked")));
                if let Err(e) = &result {
                    tracing::error!(thread, error = %e, "stream thread stopped");
                    stop.store(true, Ordering::Release);
                }
                result
            })?;
        handles.push(handle);
    }
    Ok(())
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
    let producer = TxnProducer::new(cfg.clone(), instance)?;
    let reader = StateReader::new(
        state_reader_config(&cfg).create_with_context(QuietEof)?,
        state_probe_config(&cfg).create_with_context(QuietEof)?,
    );
    let worker = Worker::new(cfg.clone(), shared.clone(), producer, reader);
    let context = GuardContext::new(worker, shared.clone(), cfg.kafka.events_topic.clone());
    let consumer: SharedConsumer<GuardContext> =
        SharedConsumer::new(consumer_config(&cfg).create_with_context(context)?);
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
        match w.take_next() {
            Next::Go => {}
            Next::Stop(why) => anyhow::bail!(why),
            Next::Rewind => {
                drop(msg);
                match w.rewind(consumer) {
                    Ok(()) => failing_since = None,
                    Err(e) => {
                        if let Next::Stop(why) = w.take_next() {
                            anyhow::bail!(why);
                        }
                        if let Some(why) = rewind_gives_up(&e, &mut failing_since) {
                            anyhow::bail!(why);
                        }
                        // The broker is away (or restarting): the engines stay at the last
                        // commit and the partitions unserved (`/readyz` 503) until it
                        // answers; polling goes on meanwhile, so the group sees this member
                        // alive and rebalances reach it.
                        tracing::warn!(error = %e, "rewind failed; trying again");
                        drop(w);
                        std::thread::sleep(REWIND_BACKOFF);
                    }
                }
                continue;
            }
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
        let metrics =
            crate::service::metrics::Metrics::new(prometheus::Registry::new(), &cfg.metrics)
                .unwrap();
        let shared = Shared::new(metrics, "");
        let stop = Arc::new(AtomicBool::new(false));
        let err = run_stream_threads(Arc::new(cfg), shared, stop.clone()).unwrap_err();
        assert!(err.to_string().contains("no.such.property"), "{err}");
        assert!(stop.load(Ordering::Acquire));
    }
}
