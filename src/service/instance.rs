//! One guard instance, wired the same way for `serve` and `demo`: the broker (embedded
//! when none is configured), the metrics and the state its threads share, the admin HTTP
//! server, the stream threads, and a stop that commits in-flight work.

use super::admin;
use super::kafka::access;
use super::kafka::embedded::EmbeddedKafka;
use super::kafka::settings::instance_id;
use super::kafka::topics::{ensure_topics, reachable, KafkaSetupError};
use super::metrics::Metrics;
use super::shared::Shared;
use super::stream::{run_stream_threads, GRACE};
use crate::config::Config;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A running instance: its shared state, its admin address, the embedded broker it runs
/// (if any), and once `start`ed its stream threads.
pub struct Instance {
    pub shared: Arc<Shared>,
    /// Where the admin HTTP server listens (`admin.listen`, its port resolved).
    pub admin: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _embedded: Option<EmbeddedKafka>,
}

impl Instance {
    /// The embedded broker when `kafka.bootstrap_servers` is empty (its address written
    /// there), else None.
    pub fn embedded_broker(cfg: &mut Config) -> anyhow::Result<Option<EmbeddedKafka>> {
        if !cfg.kafka.bootstrap_servers.is_empty() {
            return Ok(None);
        }
        let cluster = EmbeddedKafka::start(cfg)?;
        cfg.kafka.bootstrap_servers = cluster.bootstrap_servers();
        Ok(Some(cluster))
    }

    /// Metrics on `registry`, the shared state, and the admin HTTP server bound and
    /// serving; no stream thread yet.
    pub async fn open(
        cfg: &Config,
        registry: prometheus::Registry,
        embedded: Option<EmbeddedKafka>,
    ) -> anyhow::Result<Instance> {
        let metrics = Metrics::new(registry, &cfg.metrics)?;
        let shared = Shared::new(metrics, &cfg.admin.debug_token);
        let listener = admin::bind(cfg.admin.listen).await?;
        let addr = listener.local_addr()?;
        tracing::info!(addr = %addr, "admin HTTP listening (/livez /readyz /metrics)");
        let app = admin::router(shared.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "admin server stopped");
            }
        });
        Ok(Instance {
            shared,
            admin: addr,
            stop: Arc::new(AtomicBool::new(false)),
            threads: None,
            _embedded: embedded,
        })
    }

    /// Starts the stream threads (and the policy reader) on `cfg`.
    pub fn start(&mut self, cfg: Arc<Config>) {
        let (shared, stop) = (self.shared.clone(), self.stop.clone());
        self.threads = Some(tokio::task::spawn_blocking(move || {
            run_stream_threads(cfg, shared, stop)
        }));
    }

    /// Runs until a stop signal (then in-flight work is committed) or until the stream
    /// threads end by themselves (their error returned).
    pub async fn run_until_signal(&mut self) -> anyhow::Result<()> {
        let Some(threads) = self.threads.as_mut() else {
            return Ok(());
        };
        tokio::select! {
            _ = shutdown_signal() => tracing::info!("signal received: draining"),
            r = threads => {
                self.threads = None;
                return r?;
            }
        }
        self.stop().await
    }

    /// Stops the stream threads; returns once they committed their in-flight work, or
    /// fails when that takes longer than the grace period.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Release);
        let Some(threads) = self.threads.take() else {
            return Ok(());
        };
        match tokio::time::timeout(GRACE + Duration::from_secs(5), threads).await {
            Ok(r) => r?,
            Err(_) => anyhow::bail!("in-flight work not committed within the grace period"),
        }
    }
}

/// How often a guard refused by the broker asks again.
const ACCESS_RECHECK: Duration = Duration::from_secs(10);
/// How often, and for how long, a check the broker could not answer yet is asked again
/// (a group or transaction coordinator takes seconds to move after a broker fails).
const ACCESS_BUSY_RETRY: Duration = Duration::from_secs(2);
const ACCESS_BUSY_LIMIT: Duration = Duration::from_secs(120);

/// Checks the topics and what the broker lets this guard do (`access`) until both pass:
/// while an ACL is missing the guard stays up and unready, names the refused resource and
/// operation (log, `/readyz`, `loopguard_kafka_access_denied`) and asks again every
/// `ACCESS_RECHECK`, so granting it is enough; no crash loop. Other errors are returned.
async fn wait_for_access(cfg: &Config, shared: &Arc<Shared>) -> anyhow::Result<()> {
    let gauge = &shared.metrics.access_denied;
    let mut said: Option<String> = None;
    let busy_since = std::time::Instant::now();
    loop {
        // The topics first (a broker that never answers, a missing topic: named there),
        // then what the broker grants; a topic it will not even describe is named by the
        // operations the guard needs on it.
        let topics = match ensure_topics(cfg, None).await {
            Err(KafkaSetupError::Denied(d)) => Some(d),
            Err(e) => return Err(e.into()),
            Ok(_) => None,
        };
        let c = cfg.clone();
        let instance = instance_id();
        let refused =
            match tokio::task::spawn_blocking(move || access::check(&c, &instance)).await? {
                Err(access::AccessError::Denied(d)) => Some(d),
                // A coordinator moving after a broker failed: asked again, for a while.
                Err(e @ access::AccessError::BrokerBusy(_))
                    if topics.is_none() && busy_since.elapsed() < ACCESS_BUSY_LIMIT =>
                {
                    tracing::warn!("{e}; asking again in {}s", ACCESS_BUSY_RETRY.as_secs());
                    tokio::time::sleep(ACCESS_BUSY_RETRY).await;
                    continue;
                }
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

/// `loopguard serve`: the broker's address and topics checked, the instance opened (admin
/// HTTP up), what the broker grants waited for (or the embedded broker started), then the
/// stream threads until a signal. Returns when stopped.
pub async fn serve(mut cfg: Config, registry: prometheus::Registry) -> anyhow::Result<()> {
    if !cfg.kafka.bootstrap_servers.is_empty() {
        // Before anything else: a broker address that refuses connections is named at once.
        let servers = cfg.kafka.bootstrap_servers.clone();
        tokio::task::spawn_blocking(move || reachable(&servers, "kafka.bootstrap_servers"))
            .await??;
        // A missing topic or a broker that never answers ends the start here, before the
        // admin port is taken; a refusal is waited out below, with the admin port up.
        match ensure_topics(&cfg, None).await {
            Err(KafkaSetupError::Denied(_)) | Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let embedded = Instance::embedded_broker(&mut cfg)?;
    let mut instance = Instance::open(&cfg, registry, embedded).await?;
    if instance._embedded.is_none() {
        let granted = tokio::select! {
            _ = shutdown_signal() => false,
            r = wait_for_access(&cfg, &instance.shared) => { r?; true }
        };
        if !granted {
            tracing::info!("signal received before the broker granted access: exiting");
            return Ok(());
        }
    }
    instance.start(Arc::new(cfg));
    instance.run_until_signal().await
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
