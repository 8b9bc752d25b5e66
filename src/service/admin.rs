//! Admin HTTP: `/livez`, `/readyz`, `/metrics`, `/v1/policy` (the policy version in force
//! per stream thread and partition), and `/v1/sessions/{id}` (counters and window summaries
//! only, never text; off unless a bearer token is configured).

use super::shared::{PartitionStatus, Shared};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The admin listener could not be opened; names the address and its setting once.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} (admin.listen): {why}")]
pub struct BindError {
    pub addr: std::net::SocketAddr,
    pub why: std::io::Error,
}

/// Opens the admin listener at `admin.listen`.
pub async fn bind(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, BindError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|why| BindError { addr, why })
}

/// The admin router; tests call it without a socket.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/sessions/:id", get(session))
        .route("/v1/policy", get(policy))
        .with_state(shared)
}

/// The policy in force on this instance: per stream thread the version it applies, per
/// owned partition the version and the offset it took effect at, the last refused
/// publication (`loopguard policy show` reads it). Versions only, never the policy itself.
async fn policy(State(s): State<Arc<Shared>>) -> Response {
    let feed = &s.policy;
    let threads: std::collections::BTreeMap<String, serde_json::Value> = feed
        .threads
        .iter()
        .map(|t| {
            let (seq, version) = t.value();
            (
                t.key().clone(),
                serde_json::json!({"seq": seq, "version": version}),
            )
        })
        .collect();
    let partitions: std::collections::BTreeMap<String, serde_json::Value> = feed
        .partitions
        .iter()
        .map(|p| {
            let (seq, version, from) = p.value();
            (
                p.key().to_string(),
                serde_json::json!({"seq": seq, "version": version, "from_offset": from}),
            )
        })
        .collect();
    let refused = feed
        .last_refused
        .read()
        .ok()
        .and_then(|r| r.clone())
        .map(|(offset, problems)| serde_json::json!({"offset": offset, "problems": problems}));
    Json(serde_json::json!({
        "instance": crate::service::kafka::settings::instance_id(),
        "latest_published": feed.latest().map(|l| serde_json::json!({"seq": l.seq, "version": l.version()})),
        "threads": threads,
        "partitions": partitions,
        "last_refused": refused,
    }))
    .into_response()
}

async fn readyz(State(s): State<Arc<Shared>>) -> Response {
    s.refresh_ready();
    if s.is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        if let Some(denied) = s.access_denied.lock().ok().and_then(|d| d.clone()) {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {denied}\n"),
            )
                .into_response();
        }
        let count = |status| s.partitions.iter().filter(|p| *p.value() == status).count();
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: joined={}, restoring partitions={}, stuck partitions={}\n",
                s.joined.load(Ordering::Acquire),
                count(PartitionStatus::Restoring),
                count(PartitionStatus::Stuck),
            ),
        )
            .into_response()
    }
}

async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    s.refresh_ready();
    (
        [("content-type", "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
        .into_response()
}

async fn session(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(token) = s.debug_token.as_deref() else {
        return (
            StatusCode::NOT_FOUND,
            "debug view disabled: set admin.debug_token\n",
        )
            .into_response();
    };
    let given = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given != Some(token) {
        return (StatusCode::UNAUTHORIZED, "bearer token required\n").into_response();
    }
    match s.sessions.get(&id) {
        Some(entry) => {
            let (partition, summary) = entry.value().clone();
            Json(serde_json::json!({"session_id": id, "tenant": partition.tenant.as_deref(), "partition": partition.partition, "summary": summary}))
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "no such session on this instance\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::metrics::Metrics;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_taken_address_is_named_with_its_setting() {
        let taken = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = taken.local_addr().unwrap();
        let e = bind(addr).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("cannot listen on {addr} (admin.listen): Address already in use (os error 98)")
        );
    }

    fn shared(token: &str) -> Arc<Shared> {
        let cfg = crate::config::load_with_env(None, std::iter::empty()).unwrap();
        Shared::new(
            Metrics::new(prometheus::Registry::new(), &cfg.metrics).unwrap(),
            token,
        )
    }

    async fn get(app: Router, uri: &str, auth: Option<&str>) -> (StatusCode, String) {
        let mut req = Request::builder().uri(uri);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = app.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn readiness_follows_restores() {
        let s = shared("");
        assert_eq!(
            get(router(s.clone()), "/livez", None).await.0,
            StatusCode::OK
        );
        assert_eq!(
            get(router(s.clone()), "/readyz", None).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        s.joined.store(true, Ordering::Release);
        s.partitions.insert(
            crate::service::shared::PartKey::new(&None, 0),
            PartitionStatus::Restoring,
        );
        assert_eq!(
            get(router(s.clone()), "/readyz", None).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        s.partitions.insert(
            crate::service::shared::PartKey::new(&None, 0),
            PartitionStatus::Active,
        );
        assert_eq!(
            get(router(s.clone()), "/readyz", None).await.0,
            StatusCode::OK
        );
        let (_, body) = get(router(s), "/metrics", None).await;
        assert!(body.contains("loopguard_ready 1"), "{body}");
        assert!(body.contains("loopguard_build_info"));
    }

    #[tokio::test]
    async fn ready_only_once_every_stream_thread_has_joined() {
        let s = shared("");
        s.expect_joins(2);
        s.thread_joined();
        assert!(!s.is_ready(), "one of two threads joined");
        s.thread_joined();
        assert!(s.is_ready());
        s.thread_joined();
        assert!(s.is_ready(), "a later assignment changes nothing");
    }

    #[tokio::test]
    async fn a_stuck_partition_makes_the_instance_unready() {
        let s = shared("");
        s.joined.store(true, Ordering::Release);
        s.partitions.insert(
            crate::service::shared::PartKey::new(&None, 0),
            PartitionStatus::Active,
        );
        s.partitions.insert(
            crate::service::shared::PartKey::new(&None, 1),
            PartitionStatus::Stuck,
        );
        let (status, body) = get(router(s.clone()), "/readyz", None).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("stuck partitions=1"), "{body}");
        let (_, body) = get(router(s.clone()), "/metrics", None).await;
        assert!(body.contains("loopguard_ready 0"), "{body}");
        assert!(
            body.contains("loopguard_records_given_up_total 0"),
            "{body}"
        );
        s.partitions.insert(
            crate::service::shared::PartKey::new(&None, 1),
            PartitionStatus::Active,
        );
        assert_eq!(get(router(s), "/readyz", None).await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn session_view_needs_a_token() {
        let off = shared("");
        assert_eq!(
            get(router(off), "/v1/sessions/x", None).await.0,
            StatusCode::NOT_FOUND
        );
        let on = shared("s3cret");
        assert_eq!(
            get(router(on.clone()), "/v1/sessions/x", None).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            get(router(on.clone()), "/v1/sessions/x", Some("Bearer s3cret"))
                .await
                .0,
            StatusCode::NOT_FOUND
        );
        let summary = crate::engine::rules::SessionState::default().summary();
        on.sessions.insert(
            "x".into(),
            (crate::service::shared::PartKey::new(&None, 3), summary),
        );
        let (status, body) = get(router(on), "/v1/sessions/x", Some("Bearer s3cret")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("\"partition\":3"), "{body}");
    }
}
