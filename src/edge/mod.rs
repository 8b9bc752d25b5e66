//! `loopguard edge`: a long-lived local process (a sidecar per pod, a daemon per host) that
//! holds one `client::Guard` and serves it over HTTP on loopback, for runtimes without a
//! Kafka client and for the per-call hook commands and the MCP proxy (docs/integration.md,
//! "The edge").

mod client;
mod metrics;
mod routes;

pub use client::{EdgeAnswer, EdgeClient, DEFAULT_URL};
pub use metrics::EdgeMetrics;
pub use routes::router;

use crate::client::{Guard, GuardSettings};
use crate::config::Config;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Where the edge listens unless told otherwise (loopback; the guard's admin is on 9464).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9465";

#[derive(clap::Args, Debug, Clone)]
pub struct EdgeArgs {
    /// The guard's configuration file: its `[kafka]` section (broker, topic names,
    /// properties such as SASL/TLS) is the edge's.
    #[arg(long, env = "LOOPGUARD_CONFIG")]
    pub config: Option<String>,
    /// The broker, over the configuration's `kafka.bootstrap_servers`.
    #[arg(long)]
    pub bootstrap_servers: Option<String>,
    /// Where to serve HTTP.
    #[arg(long, env = "LOOPGUARD_EDGE_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// The longest a `POST /v1/check` waits for the guard before answering fail-open (ms);
    /// a request may ask for less (`?deadline_ms=`), never more than 30 s.
    #[arg(long, default_value_t = 1000)]
    pub deadline_ms: u64,
    /// How long `POST /v1/events` waits for the broker's acknowledgement (ms).
    #[arg(long, default_value_t = 5000)]
    pub publish_timeout_ms: u64,
    /// Read verdicts as soon as the guard writes them, not only once committed.
    #[arg(long)]
    pub read_uncommitted: bool,
    /// The tenant whose agents this edge serves: with tenant isolation
    /// (`kafka.verdicts_topic_template`) it reads that tenant's verdicts topic only, the one
    /// its principal may read. Events for other tenants get no verdicts here (fail open).
    #[arg(long, env = "LOOPGUARD_EDGE_TENANT")]
    pub tenant: Option<String>,
}

/// What every request handler shares.
pub struct Edge {
    pub guard: Guard,
    pub metrics: EdgeMetrics,
    pub deadline: Duration,
    pub publish_timeout: Duration,
}

/// The edge's settings from its flags and the configuration.
pub fn settings(args: &EdgeArgs, cfg: &Config) -> anyhow::Result<GuardSettings> {
    let mut s = GuardSettings::from_config(cfg);
    if let Some(b) = &args.bootstrap_servers {
        s.bootstrap_servers.clone_from(b);
    }
    s.read_uncommitted = args.read_uncommitted;
    if let Some(t) = &args.tenant {
        s.verdicts_topic = cfg.kafka.verdicts_topic_for(Some(t)).ok_or_else(|| {
            anyhow::anyhow!(
                "--tenant `{t}` cannot name a topic (ASCII letters, digits, `.`, `_`, `-`)"
            )
        })?;
    }
    Ok(s)
}

/// Connects to the broker, then serves until SIGINT or SIGTERM.
pub async fn run(args: EdgeArgs, cfg: Config) -> anyhow::Result<()> {
    let settings = settings(&args, &cfg)?;
    if settings.bootstrap_servers.is_empty() {
        anyhow::bail!(
            "the edge needs a broker: --bootstrap-servers or kafka.bootstrap_servers (`loopguard demo` serves one at 127.0.0.1:9192)"
        );
    }
    let guard = tokio::task::spawn_blocking(move || Guard::connect(settings)).await??;
    let registry = prometheus::Registry::new();
    let edge = Arc::new(Edge {
        guard,
        metrics: EdgeMetrics::new(&registry)?,
        deadline: Duration::from_millis(args.deadline_ms),
        publish_timeout: Duration::from_millis(args.publish_timeout_ms),
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {} (--listen): {e}", args.listen))?;
    tracing::info!(
        listen = %listener.local_addr()?,
        partitions = edge.guard.partitions(),
        "edge ready"
    );
    axum::serve(listener, router(edge, registry))
        .with_graceful_shutdown(stopped())
        .await?;
    Ok(())
}

async fn stopped() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
