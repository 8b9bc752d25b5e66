//! `loopguard edge`: a long-lived local process (a sidecar per pod, a daemon per host) that
//! holds one `client::Guard` and serves it over HTTP on loopback, for runtimes without a
//! Kafka client and for the per-call hook commands and the MCP proxy (docs/integration.md,
//! "The edge").

mod client;
mod metrics;
mod routes;
pub mod trust;

pub use client::{EdgeAnswer, EdgeClient, DEFAULT_URL};
pub use metrics::EdgeMetrics;
pub use routes::router;
pub use trust::Trust;

use crate::client::{Guard, GuardSettings};
use crate::config::Config;
use std::net::SocketAddr;
use std::path::PathBuf;
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
    /// The tenant whose agents this edge serves, and only them: an event naming another
    /// tenant is refused (400 naming `tenant`), one naming none gets this one. With tenant
    /// isolation (`kafka.verdicts_topic_template`) it reads that tenant's verdicts topic
    /// only; with tenants from the writer (`kafka.events_topic_template`, then required) it
    /// writes that tenant's own events topic.
    #[arg(long, env = "LOOPGUARD_EDGE_TENANT")]
    pub tenant: Option<String>,
    /// A `Host` name requests may carry besides the loopback ones (127.0.0.1, localhost,
    /// [::1]) and the --listen address: e.g. the node's IP a DaemonSet's agents dial.
    /// Repeatable; the environment takes a comma-separated list.
    #[arg(
        long = "allow-host",
        value_name = "NAME",
        env = "LOOPGUARD_EDGE_ALLOW_HOSTS",
        value_delimiter = ','
    )]
    pub allow_hosts: Vec<String>,
    /// A shared host: every request but /metrics, /livez and /readyz must carry
    /// `Authorization: Bearer <the file's token>`. Created (32 random bytes in hex, mode
    /// 0600) when missing; refused when group or others may read it. The hooks and the MCP
    /// proxy read the same file (the same flag and variable).
    #[arg(long, value_name = "PATH", env = "LOOPGUARD_EDGE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
}

/// What every request handler shares.
pub struct Edge {
    pub guard: Guard,
    pub metrics: EdgeMetrics,
    pub deadline: Duration,
    pub publish_timeout: Duration,
    /// The one tenant this edge serves (`--tenant`), filled into events without one.
    pub tenant: Option<String>,
}

/// The edge's flags checked against its configuration before anything runs (invalid
/// input: exit 2): the Kafka settings, who may talk to it, its tenant.
pub struct Setup {
    pub settings: GuardSettings,
    pub trust: Trust,
    pub tenant: Option<String>,
}

impl Setup {
    pub fn new(args: &EdgeArgs, cfg: &Config) -> anyhow::Result<Setup> {
        let settings = settings(args, cfg)?;
        let token = match &args.token_file {
            Some(path) => Some(trust::load_or_create_token(path)?),
            None => None,
        };
        Ok(Setup {
            settings,
            trust: Trust::new(&args.allow_hosts, Some(args.listen), token),
            tenant: args.tenant.clone(),
        })
    }
}

/// The edge's settings from its flags and the configuration.
pub fn settings(args: &EdgeArgs, cfg: &Config) -> anyhow::Result<GuardSettings> {
    let mut s = GuardSettings::from_config(cfg);
    if let Some(b) = &args.bootstrap_servers {
        s.bootstrap_servers.clone_from(b);
    }
    s.read_uncommitted = args.read_uncommitted;
    let unnameable = |t: &str| {
        anyhow::anyhow!("--tenant `{t}` cannot name a topic (ASCII letters, digits, `.`, `_`, `-`)")
    };
    if let Some(t) = &args.tenant {
        s.verdicts_topic = cfg
            .kafka
            .verdicts_topic_for(Some(t))
            .ok_or_else(|| unnameable(t))?;
    }
    // Tenants from the writer: the tenant is the topic written, so the edge writes one.
    if cfg.kafka.tenants_from_topics() {
        let Some(t) = &args.tenant else {
            anyhow::bail!(
                "kafka.events_topic_template is set (`{}`): each tenant writes its own events topic, so the edge needs --tenant (LOOPGUARD_EDGE_TENANT) to know which one",
                cfg.kafka.events_topic_template
            );
        };
        s.events_topic = cfg.kafka.events_topic_for(t).ok_or_else(|| unnameable(t))?;
    }
    Ok(s)
}

/// Connects to the broker, then serves until SIGINT or SIGTERM.
pub async fn run(args: EdgeArgs, setup: Setup) -> anyhow::Result<()> {
    let Setup {
        settings,
        trust,
        tenant,
    } = setup;
    if settings.bootstrap_servers.is_empty() {
        anyhow::bail!(
            "the edge needs a broker: --bootstrap-servers or kafka.bootstrap_servers (`loopguard demo` serves one at 127.0.0.1:9192)"
        );
    }
    let events_topic = settings.events_topic.clone();
    let guard = tokio::task::spawn_blocking(move || Guard::connect(settings)).await??;
    let registry = prometheus::Registry::new();
    let edge = Arc::new(Edge {
        guard,
        metrics: EdgeMetrics::new(&registry)?,
        deadline: Duration::from_millis(args.deadline_ms),
        publish_timeout: Duration::from_millis(args.publish_timeout_ms),
        tenant,
    });
    let trust = Arc::new(trust.counting(edge.metrics.requests.clone()));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {} (--listen): {e}", args.listen))?;
    tracing::info!(
        listen = %listener.local_addr()?,
        partitions = edge.guard.partitions(),
        events_topic = %events_topic,
        tenant = edge.tenant.as_deref().unwrap_or(""),
        token = trust.requires_token(),
        "edge ready"
    );
    axum::serve(listener, router(edge, registry, trust))
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
