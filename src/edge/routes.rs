//! The edge's HTTP routes: `POST /v1/events`, `POST /v1/check`, `GET
//! /v1/sessions/{id}/verdicts` (Server-Sent Events), and `/livez`, `/readyz`, `/metrics`;
//! every one behind the checks of who may talk to the edge (`trust`).

use super::trust::{self, Trust};
use super::Edge;
use crate::client::{Answer, ClientError};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use prometheus::{Encoder, Registry, TextEncoder};
use serde::Deserialize;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast::error::RecvError;

/// The longest deadline a request may ask for.
const MAX_DEADLINE: Duration = Duration::from_secs(30);

pub fn router(edge: Arc<Edge>, registry: Registry, trust: Arc<Trust>) -> Router {
    Router::new()
        .route("/v1/events", post(events))
        .route("/v1/check", post(check))
        .route("/v1/sessions/:id/verdicts", get(verdicts))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(|| async { "ok\n" }))
        .route(
            "/metrics",
            get(move || {
                let registry = registry.clone();
                async move { metrics_text(&registry) }
            }),
        )
        .with_state(edge)
        .layer(axum::middleware::from_fn_with_state(
            trust,
            trust::guard_requests,
        ))
}

fn metrics_text(registry: &Registry) -> Response {
    let mut buf = Vec::new();
    let encoder = TextEncoder::new();
    if let Err(e) = encoder.encode(&registry.gather(), &mut buf) {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    (
        [(header::CONTENT_TYPE, encoder.format_type().to_string())],
        buf,
    )
        .into_response()
}

/// A JSON error body: `{"error": kind, "reason": ..., "detail": ...}`.
fn refuse(code: StatusCode, kind: &str, reason: &str, detail: &str) -> Response {
    (
        code,
        Json(json!({"error": kind, "reason": reason, "detail": detail})),
    )
        .into_response()
}

fn parse(body: &Bytes) -> Result<Value, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_event",
            "invalid_json",
            &format!("the body is not JSON: {e}"),
        ))
    })
}

/// Events for an edge pinned to a tenant: each without `tenant` gets it; the first naming
/// another tenant refuses them all (400 naming the field, nothing sent).
fn pin_tenant(edge: &Edge, events: &mut [Value]) -> Result<(), Box<Response>> {
    let Some(pinned) = &edge.tenant else {
        return Ok(());
    };
    for e in events.iter_mut() {
        if let Err(refused) = trust::pin_tenant(e, pinned) {
            edge.metrics
                .invalid
                .with_label_values(&["tenant_mismatch"])
                .inc();
            return Err(Box::new(refused.into_response()));
        }
    }
    Ok(())
}

fn client_error(edge: &Edge, e: &ClientError) -> Response {
    match e {
        ClientError::InvalidEvent { reason, detail } => {
            edge.metrics.invalid.with_label_values(&[reason]).inc();
            refuse(StatusCode::BAD_REQUEST, "invalid_event", reason, detail)
        }
        other => refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "unacknowledged",
            "kafka",
            &other.to_string(),
        ),
    }
}

fn count(edge: &Edge, route: &str, r: Response) -> Response {
    edge.metrics
        .requests
        .with_label_values(&[route, r.status().as_str()])
        .inc();
    r
}

/// One event or a JSON array of them, exactly the contract's event JSON: 202 once the broker
/// acknowledged every one; 400 naming the field of the first invalid one (nothing sent).
async fn events(State(edge): State<Arc<Edge>>, body: Bytes) -> Response {
    let r = async {
        let mut events = match parse(&body).map_err(|r| *r)? {
            Value::Array(a) => a,
            one => vec![one],
        };
        pin_tenant(&edge, &mut events).map_err(|r| *r)?;
        edge.guard
            .publish(&events, edge.publish_timeout)
            .await
            .map_err(|e| client_error(&edge, &e))?;
        edge.metrics
            .events
            .with_label_values(&["events"])
            .inc_by(events.len() as u64);
        Ok::<_, Response>(
            (
                StatusCode::ACCEPTED,
                Json(json!({"accepted": events.len()})),
            )
                .into_response(),
        )
    }
    .await;
    count(&edge, "events", r.unwrap_or_else(|e| e))
}

#[derive(Deserialize)]
struct CheckQuery {
    deadline_ms: Option<u64>,
}

/// One event, usually a `tool_call`: 200 with `{"verdict": {...}}` (act on it), `{"verdict":
/// null}` as soon as the guard judged it with nothing to say, or `{"verdict": null,
/// "fail_open": {...}}` at the deadline. `answer` names which. Any other type is answered
/// the same way (a `tool_result`'s steer on a repeated error).
async fn check(
    State(edge): State<Arc<Edge>>,
    Query(q): Query<CheckQuery>,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let deadline = q
        .deadline_ms
        .map_or(edge.deadline, Duration::from_millis)
        .min(MAX_DEADLINE);
    let r = async {
        let mut event = parse(&body).map_err(|r| *r)?;
        pin_tenant(&edge, std::slice::from_mut(&mut event)).map_err(|r| *r)?;
        let answer = edge
            .guard
            .check(&event, deadline)
            .await
            .map_err(|e| client_error(&edge, &e))?;
        let (kind, body) = match &answer {
            Answer::Verdict(v) => (
                v.action.as_str(),
                json!({"verdict": v.raw, "answer": "verdict"}),
            ),
            Answer::NoVerdict => ("none", json!({"verdict": null, "answer": "judged"})),
            Answer::FailOpen(f) => {
                edge.metrics.fail_opens.with_label_values(&[f.reason]).inc();
                (
                    "fail_open",
                    json!({"verdict": null, "answer": "fail_open",
                           "fail_open": {"reason": f.reason, "detail": f.detail}}),
                )
            }
        };
        if !matches!(answer, Answer::FailOpen(ref f) if f.reason == "unacknowledged") {
            edge.metrics.events.with_label_values(&["check"]).inc();
        }
        edge.metrics.answers.with_label_values(&[kind]).inc();
        edge.metrics
            .check_seconds
            .with_label_values(&[kind])
            .observe(started.elapsed().as_secs_f64());
        Ok::<_, Response>(Json(body).into_response())
    }
    .await;
    count(&edge, "check", r.unwrap_or_else(|e| e))
}

/// Every verdict of the session from now on, as Server-Sent Events (`event: verdict`, the
/// verdict JSON as data, its id as the event id), observed ones included: act only on
/// `"enforce": true`. A reader too slow for 256 verdicts gets `event: lagged`. An edge
/// pinned to a tenant streams none of another tenant's (a session id is no secret).
async fn verdicts(State(edge): State<Arc<Edge>>, Path(session_id): Path<String>) -> Response {
    let rx = edge.guard.subscribe(&session_id);
    let pinned = edge.tenant.clone();
    let stream = futures_util::stream::unfold(rx, move |mut rx| {
        let pinned = pinned.clone();
        async move {
            let event = loop {
                match rx.recv().await {
                    Ok(v) if !trust::belongs_to(&v.raw, pinned.as_deref()) => continue,
                    Ok(v) => {
                        break SseEvent::default()
                            .event("verdict")
                            .id(v.verdict_id.clone())
                            .data(v.raw.to_string())
                    }
                    Err(RecvError::Lagged(n)) => {
                        break SseEvent::default()
                            .event("lagged")
                            .data(json!({"missed": n}).to_string())
                    }
                    Err(RecvError::Closed) => return None,
                }
            };
            Some((Ok::<_, Infallible>(event), rx))
        }
    });
    count(
        &edge,
        "verdicts",
        Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response(),
    )
}
