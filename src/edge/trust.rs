//! Who can talk to the edge (docs/edge.md, "Who can talk to the edge"): every request is
//! checked before its route sees it.
//!
//! - An `Origin` header is refused (403): browsers send one on every cross-origin POST, a
//!   CLI, a hook, the MCP proxy, curl and Prometheus never do.
//! - A `Host` that is neither a loopback name nor one the operator allowed (`--allow-host`)
//!   is refused (403): a page whose DNS name was rebound to 127.0.0.1 names its own host, so
//!   it cannot read `GET /v1/sessions/{id}/verdicts`.
//! - With a token file (`--token-file`), a request without `Authorization: Bearer <token>`
//!   is refused (401): other users of a shared host cannot write or read sessions.
//! - A POST whose body is not declared `application/json` is refused (415): an HTML form
//!   cannot send that without a CORS preflight, which the edge never answers.
//!
//! `/metrics`, `/livez` and `/readyz` are read-only and say nothing about a session: they
//! skip the Host check and the token (Prometheus and the kubelet reach them by the pod's
//! IP), never the Origin refusal.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use prometheus::IntCounterVec;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

/// The names a loopback client's `Host` carries (lowercase, IPv6 without brackets).
const LOOPBACK: [&str; 3] = ["127.0.0.1", "localhost", "::1"];

/// Routes anyone who reaches the port may read: no session data, and what Prometheus and
/// the kubelet call by the pod's IP.
pub const OPEN_ROUTES: [&str; 3] = ["/metrics", "/livez", "/readyz"];

/// What the edge accepts a request from.
pub struct Trust {
    /// The `Host` names accepted (normalised by `host_name`).
    hosts: Vec<String>,
    /// The bearer token every request but the open routes must carry.
    token: Option<String>,
    /// `loopguard_edge_requests_total`, to count refusals on the route they tried.
    requests: Option<IntCounterVec>,
}

/// A request refused: its status and JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub code: StatusCode,
    pub body: Value,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut r = (self.code, Json(self.body)).into_response();
        if self.code == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

fn refusal(code: StatusCode, reason: &str, detail: String, extra: (&str, Value)) -> Refusal {
    let mut body = json!({"error": "refused", "reason": reason, "detail": detail});
    if !extra.0.is_empty() {
        body[extra.0] = extra.1;
    }
    Refusal { code, body }
}

impl Trust {
    /// Loopback names, the address the edge listens on when it is a specific one (an IP
    /// literal cannot be rebound), and `allow` (`--allow-host`); `token` from the token file.
    pub fn new(allow: &[String], listen: Option<SocketAddr>, token: Option<String>) -> Self {
        let mut hosts: Vec<String> = LOOPBACK.iter().map(|h| h.to_string()).collect();
        if let Some(a) = listen.filter(|a| !a.ip().is_unspecified()) {
            hosts.push(a.ip().to_string());
        }
        hosts.extend(
            allow
                .iter()
                .map(|h| h.trim())
                .filter(|h| !h.is_empty())
                .filter_map(host_name),
        );
        hosts.sort();
        hosts.dedup();
        Trust {
            hosts,
            token,
            requests: None,
        }
    }

    /// Counts each refusal in `loopguard_edge_requests_total{route, code}`.
    pub fn counting(mut self, requests: IntCounterVec) -> Self {
        self.requests = Some(requests);
        self
    }

    pub fn requires_token(&self) -> bool {
        self.token.is_some()
    }

    /// True when a request naming `host` (a `Host` header's value) may be answered.
    pub fn host_allowed(&self, host: &str) -> bool {
        host_name(host).is_some_and(|h| self.hosts.contains(&h))
    }

    /// The checks, in order: Origin, Host, token, content type. `authority` is the request
    /// target's, when it has one (HTTP/2's `:authority`, an absolute-form HTTP/1.1 target):
    /// it must be allowed too.
    pub fn check(
        &self,
        method: &Method,
        path: &str,
        authority: Option<&str>,
        headers: &HeaderMap,
    ) -> Result<(), Refusal> {
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
            return Err(refusal(
                StatusCode::FORBIDDEN,
                "origin",
                format!("a request with an Origin header (`{origin}`) comes from a web page; the edge answers local programs only"),
                ("origin", origin.into()),
            ));
        }
        let open = OPEN_ROUTES.contains(&path);
        if !open {
            let named: Vec<String> = authority
                .map(str::to_string)
                .into_iter()
                .chain(
                    headers
                        .get_all(header::HOST)
                        .iter()
                        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned()),
                )
                .collect();
            let foreign = named.iter().find(|h| !self.host_allowed(h));
            if foreign.is_some() || named.is_empty() {
                let host = foreign.cloned();
                let shown = host.clone().unwrap_or_default();
                return Err(refusal(
                    StatusCode::FORBIDDEN,
                    "host",
                    match &host {
                        Some(h) => format!("Host `{h}` is not a loopback name or one allowed with --allow-host (LOOPGUARD_EDGE_ALLOW_HOSTS)"),
                        None => "a request without a Host header".to_string(),
                    },
                    ("host", shown.into()),
                ));
            }
            if let Some(token) = &self.token {
                if !bearer(headers).is_some_and(|t| same(t.as_bytes(), token.as_bytes())) {
                    let why = if headers.contains_key(header::AUTHORIZATION) {
                        "the Authorization header does not carry the edge's token"
                    } else {
                        "no `Authorization: Bearer <token>` header"
                    };
                    return Err(refusal(
                        StatusCode::UNAUTHORIZED,
                        "token",
                        format!("{why}: this edge answers the holders of its token file (--token-file, LOOPGUARD_EDGE_TOKEN_FILE) only"),
                        ("", Value::Null),
                    ));
                }
            }
        }
        if method == Method::POST && !is_json(headers.get(header::CONTENT_TYPE)) {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default();
            return Err(refusal(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "content_type",
                format!(
                    "a POST's body must be declared `Content-Type: application/json`, not `{ct}`"
                ),
                ("content_type", ct.into()),
            ));
        }
        Ok(())
    }
}

/// The middleware: a refused request never reaches its route.
pub async fn guard_requests(State(trust): State<Arc<Trust>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let authority = req.uri().authority().map(|a| a.as_str());
    match trust.check(req.method(), path, authority, req.headers()) {
        Ok(()) => next.run(req).await,
        Err(refused) => {
            if let (Some(requests), Some(route)) = (&trust.requests, route_of(path)) {
                requests
                    .with_label_values(&[route, refused.code.as_str()])
                    .inc();
            }
            refused.into_response()
        }
    }
}

/// The route label of a path (`None` for the open routes and unknown paths).
fn route_of(path: &str) -> Option<&'static str> {
    match path {
        "/v1/events" => Some("events"),
        "/v1/check" => Some("check"),
        p if p.starts_with("/v1/sessions/") => Some("verdicts"),
        _ => None,
    }
}

/// A `Host` value (or an `--allow-host` name) without its port, lowercase, an IPv6 address
/// without brackets; `None` when it is not one.
pub fn host_name(host: &str) -> Option<String> {
    let h = host.trim().to_ascii_lowercase();
    let port_ok = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = h.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        let ok = after.is_empty() || after.strip_prefix(':').is_some_and(port_ok);
        return (ok && !ip.is_empty()).then(|| ip.to_string());
    }
    match h.matches(':').count() {
        0 => (!h.is_empty()).then_some(h),
        1 => {
            let (name, port) = h.split_once(':')?;
            (!name.is_empty() && port_ok(port)).then(|| name.to_string())
        }
        // A bare IPv6 address, as one writes it in --allow-host.
        _ => Some(h),
    }
}

/// `application/json`, parameters allowed (`; charset=utf-8`).
pub fn is_json(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Equal, in a time that does not depend on where they differ.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a
        .iter()
        .zip(b)
        .fold(0u8, |acc, (x, y)| std::hint::black_box(acc | (x ^ y)));
    diff == 0
}

/// Why a token file cannot be used: the edge does not start.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("the token file {path} has mode {mode:04o}: group or others may read it; `chmod 600 {path}` (or remove it and the edge writes a new one)")]
    Exposed { path: String, mode: u32 },
    #[error("the token file {path} is not a regular file")]
    NotAFile { path: String },
    #[error("the token file {path} is empty")]
    Empty { path: String },
    #[error("the token file {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// The edge's token: read from `path` (which only its owner may read), or, when there is no
/// such file, 32 random bytes in hex written there with mode 0600.
pub fn load_or_create_token(path: &Path) -> Result<String, TokenFileError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let shown = path.display().to_string();
    let io = |source| TokenFileError::Io {
        path: shown.clone(),
        source,
    };
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut f) => {
            let token = new_token();
            // The mode given at creation is masked by the umask; set it exactly.
            f.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(io)?;
            f.write_all(format!("{token}\n").as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
            return Ok(token);
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(TokenFileError::NotAFile { path: shown });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(TokenFileError::Exposed { path: shown, mode });
    }
    let token = std::fs::read_to_string(path)
        .map_err(io)?
        .trim()
        .to_string();
    if token.is_empty() {
        return Err(TokenFileError::Empty { path: shown });
    }
    Ok(token)
}

/// 32 random bytes from the operating system, in hex.
fn new_token() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The edge's token from its token file, as the hooks and the MCP proxy read it.
pub fn read_token(path: &Path) -> Result<String, String> {
    let token = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the edge's token file {}: {e}", path.display()))?;
    let token = token.trim();
    if token.is_empty() {
        return Err(format!("the edge's token file {} is empty", path.display()));
    }
    Ok(token.to_string())
}

/// An event for an edge that serves one tenant: its `tenant` filled in when missing; a
/// refusal (400) naming the field and both values when it names another.
pub fn pin_tenant(event: &mut Value, pinned: &str) -> Result<(), Refusal> {
    let Some(fields) = event.as_object_mut() else {
        // Not an event at all: the contract's validation says why.
        return Ok(());
    };
    match fields.get("tenant") {
        None | Some(Value::Null) => {
            fields.insert("tenant".into(), pinned.into());
            Ok(())
        }
        Some(Value::String(t)) if t == pinned => Ok(()),
        Some(other) => {
            let given = match other {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            Err(Refusal {
                code: StatusCode::BAD_REQUEST,
                body: json!({
                    "error": "invalid_event",
                    "reason": "tenant_mismatch",
                    "field": "tenant",
                    "detail": format!("field `tenant` is `{given}`, but this edge serves tenant `{pinned}` (--tenant) only"),
                    "tenant": other,
                    "pinned": pinned,
                }),
            })
        }
    }
}

/// True when a verdict (or event) may go to the user of an edge pinned to `pinned`: no pin,
/// no `tenant` on it (the guard copies the event's), or the same one.
pub fn belongs_to(v: &Value, pinned: Option<&str>) -> bool {
    match (pinned, v.get("tenant").and_then(Value::as_str)) {
        (Some(p), Some(t)) => p == t,
        _ => true,
    }
}

#[cfg(test)]
#[path = "trust_test.rs"]
mod trust_test;
