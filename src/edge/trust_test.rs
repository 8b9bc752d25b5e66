//! The checks of who may talk to the edge, each alone and through the middleware on a
//! router (no broker needed).

use super::*;
use axum::body::Body;
use axum::http::Request as HttpRequest;
use axum::routing::{get, post};
use axum::Router;
use http_body_util::BodyExt;
use std::os::unix::fs::PermissionsExt;
use tower::ServiceExt;

fn trust() -> Trust {
    Trust::new(&[], Some("127.0.0.1:9465".parse().unwrap()), None)
}

#[test]
fn loopback_names_with_or_without_a_port_are_the_only_hosts_by_default() {
    let t = trust();
    for ok in [
        "127.0.0.1",
        "127.0.0.1:9465",
        "localhost",
        "LocalHost:80",
        "[::1]",
        "[::1]:9465",
    ] {
        assert!(t.host_allowed(ok), "{ok}");
    }
    for refused in [
        "evil.example",
        "evil.example:9465",
        "127.0.0.1.nip.io:9465",
        "localhost.evil.example",
        "10.0.0.5:9465",
        "127.0.0.2",
        "",
        ":9465",
        "localhost:",
        "localhost:x",
        "[::1]x",
        "[]:9465",
    ] {
        assert!(!t.host_allowed(refused), "{refused}");
    }
}

#[test]
fn allowed_names_and_a_specific_listen_address_are_accepted_too() {
    let t = Trust::new(
        &[
            "edge.internal".into(),
            "10.0.0.7:9465".into(),
            "FD00::5".into(),
            " ".into(),
        ],
        Some("10.1.2.3:9465".parse().unwrap()),
        None,
    );
    for ok in [
        "edge.internal:9465",
        "EDGE.internal",
        "10.0.0.7:9465",
        "10.0.0.7",
        "[fd00::5]:9465",
        "10.1.2.3:9465",
        "localhost:9465",
    ] {
        assert!(t.host_allowed(ok), "{ok}");
    }
    assert!(!t.host_allowed("evil.example"));
    // 0.0.0.0 is where the edge listens, never a name a request may carry.
    let any = Trust::new(&[], Some("0.0.0.0:9465".parse().unwrap()), None);
    assert!(!any.host_allowed("0.0.0.0:9465"));
}

#[test]
fn json_is_application_json_with_or_without_parameters() {
    let ct = |s: &str| HeaderValue::from_str(s).unwrap();
    assert!(is_json(Some(&ct("application/json"))));
    assert!(is_json(Some(&ct("application/json; charset=utf-8"))));
    assert!(is_json(Some(&ct("Application/JSON;charset=UTF-8"))));
    assert!(!is_json(None));
    assert!(!is_json(Some(&ct("text/plain"))));
    assert!(!is_json(Some(&ct("application/x-www-form-urlencoded"))));
    assert!(!is_json(Some(&ct("multipart/form-data; boundary=x"))));
    assert!(!is_json(Some(&ct("application/jsonx"))));
}

#[test]
fn tokens_compare_whole() {
    assert!(same(b"abc123", b"abc123"));
    assert!(!same(b"abc123", b"abc124"));
    assert!(!same(b"abc123", b"abc12"));
    assert!(!same(b"", b"a"));
}

#[test]
fn a_pinned_tenant_is_filled_in_or_refused_naming_the_field_and_both_values() {
    let mut e = json!({"v": 1, "type": "user_message"});
    pin_tenant(&mut e, "acme").unwrap();
    assert_eq!(e["tenant"], "acme");
    let mut null = json!({"tenant": null});
    pin_tenant(&mut null, "acme").unwrap();
    assert_eq!(null["tenant"], "acme");
    let mut same_one = json!({"tenant": "acme"});
    pin_tenant(&mut same_one, "acme").unwrap();
    assert_eq!(same_one, json!({"tenant": "acme"}));

    let refused = pin_tenant(&mut json!({"tenant": "globex"}), "acme").unwrap_err();
    assert_eq!(refused.code, StatusCode::BAD_REQUEST);
    assert_eq!(refused.body["field"], "tenant");
    assert_eq!(refused.body["reason"], "tenant_mismatch");
    assert_eq!(refused.body["tenant"], "globex");
    assert_eq!(refused.body["pinned"], "acme");
    let detail = refused.body["detail"].as_str().unwrap();
    assert!(
        detail.contains("`tenant`") && detail.contains("globex") && detail.contains("acme"),
        "{detail}"
    );
    let wrong_type = pin_tenant(&mut json!({"tenant": 7}), "acme").unwrap_err();
    assert_eq!(wrong_type.body["tenant"], 7);
    // Not an object: left to the contract's validation.
    pin_tenant(&mut json!([1]), "acme").unwrap();
}

#[test]
fn a_pinned_edge_passes_on_its_own_tenants_verdicts_and_those_without_one() {
    let v = |t: Value| json!({"verdict_id": "v", "tenant": t});
    assert!(belongs_to(&v(json!("acme")), Some("acme")));
    assert!(!belongs_to(&v(json!("globex")), Some("acme")));
    assert!(belongs_to(&json!({"verdict_id": "v"}), Some("acme")));
    assert!(belongs_to(&v(json!("globex")), None));
}

/// A router with the middleware in front of two routes that always answer.
fn app(t: Trust) -> Router {
    Router::new()
        .route("/v1/events", post(|| async { StatusCode::ACCEPTED }))
        .route("/v1/sessions/:id/verdicts", get(|| async { "stream" }))
        .route("/metrics", get(|| async { "metrics" }))
        .route("/readyz", get(|| async { "ok" }))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(t),
            guard_requests,
        ))
}

async fn send(app: &Router, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut req = HttpRequest::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = if method == "POST" { "{}" } else { "" };
    let resp = app
        .clone()
        .oneshot(req.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        code,
        serde_json::from_slice(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes))),
    )
}

const LOCAL: (&str, &str) = ("host", "127.0.0.1:9465");
const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test]
async fn the_middleware_refuses_foreign_hosts_origins_and_non_json_posts() {
    let app = app(trust());
    assert_eq!(
        send(&app, "POST", "/v1/events", &[LOCAL, JSON]).await.0,
        202
    );
    assert_eq!(
        send(
            &app,
            "POST",
            "/v1/events",
            &[LOCAL, ("content-type", "application/json; charset=utf-8")]
        )
        .await
        .0,
        202
    );

    // DNS rebinding: the page's own name in Host, on a POST and on the stream.
    let evil = ("host", "evil.example:9465");
    let (code, body) = send(&app, "POST", "/v1/events", &[evil, JSON]).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["reason"], "host");
    assert_eq!(body["host"], "evil.example:9465");
    assert!(body["detail"]
        .as_str()
        .unwrap()
        .contains("evil.example:9465"));
    let (code, body) = send(&app, "GET", "/v1/sessions/s1/verdicts", &[evil]).await;
    assert_eq!((code, &body["reason"]), (403, &json!("host")));
    assert_eq!(
        send(&app, "GET", "/v1/sessions/s1/verdicts", &[]).await.0,
        403
    );

    // A browser's cross-origin request.
    let (code, body) = send(
        &app,
        "POST",
        "/v1/events",
        &[LOCAL, JSON, ("origin", "https://evil.example")],
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(body["reason"], "origin");
    assert_eq!(body["origin"], "https://evil.example");
    assert_eq!(
        send(&app, "GET", "/metrics", &[LOCAL, ("origin", "null")])
            .await
            .0,
        403
    );

    // A form post, or no content type at all.
    let (code, body) = send(
        &app,
        "POST",
        "/v1/events",
        &[LOCAL, ("content-type", "text/plain")],
    )
    .await;
    assert_eq!(code, 415);
    assert_eq!(body["reason"], "content_type");
    assert_eq!(body["content_type"], "text/plain");
    assert_eq!(send(&app, "POST", "/v1/events", &[LOCAL]).await.0, 415);

    // The request target's authority counts too (HTTP/2's `:authority`, an absolute-form
    // HTTP/1.1 target, which a server must prefer to Host).
    let (code, body) = send(
        &app,
        "POST",
        "http://evil.example/v1/events",
        &[LOCAL, JSON],
    )
    .await;
    assert_eq!(
        (code, &body["host"]),
        (403, &json!("evil.example")),
        "{body}"
    );
    assert_eq!(
        send(&app, "POST", "http://127.0.0.1:9465/v1/events", &[JSON])
            .await
            .0,
        202,
        "an HTTP/2 request names its authority, not a Host header"
    );

    // Prometheus and the kubelet by the pod's IP.
    let pod = ("host", "10.4.0.17:9465");
    assert_eq!(send(&app, "GET", "/metrics", &[pod]).await.0, 200);
    assert_eq!(send(&app, "GET", "/readyz", &[pod]).await.0, 200);
    assert_eq!(send(&app, "POST", "/v1/events", &[pod, JSON]).await.0, 403);
}

#[tokio::test]
async fn with_a_token_every_route_but_the_open_ones_needs_the_bearer() {
    let app = app(Trust::new(&[], None, Some("s3cret-token".into())));
    let (code, body) = send(&app, "POST", "/v1/events", &[LOCAL, JSON]).await;
    assert_eq!(code, 401, "{body}");
    assert_eq!(body["reason"], "token");
    let wrong = ("authorization", "Bearer s3cret-tokeN");
    assert_eq!(
        send(&app, "POST", "/v1/events", &[LOCAL, JSON, wrong])
            .await
            .0,
        401
    );
    let basic = ("authorization", "Basic s3cret-token");
    assert_eq!(
        send(&app, "POST", "/v1/events", &[LOCAL, JSON, basic])
            .await
            .0,
        401
    );
    let right = ("authorization", "Bearer s3cret-token");
    assert_eq!(
        send(&app, "POST", "/v1/events", &[LOCAL, JSON, right])
            .await
            .0,
        202
    );
    assert_eq!(
        send(
            &app,
            "POST",
            "/v1/events",
            &[LOCAL, JSON, ("authorization", "bearer  s3cret-token ")]
        )
        .await
        .0,
        202
    );
    assert_eq!(
        send(&app, "GET", "/v1/sessions/s/verdicts", &[LOCAL])
            .await
            .0,
        401
    );
    assert_eq!(
        send(&app, "GET", "/v1/sessions/s/verdicts", &[LOCAL, right])
            .await
            .0,
        200
    );
    assert_eq!(send(&app, "GET", "/metrics", &[LOCAL]).await.0, 200);
    // The Host check comes first: a rebound page learns nothing of the token.
    assert_eq!(
        send(
            &app,
            "POST",
            "/v1/events",
            &[("host", "evil.example"), JSON, right]
        )
        .await
        .0,
        403
    );
}

#[test]
fn a_missing_token_file_is_created_owner_only_and_read_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edge.token");
    let token = load_or_create_token(&path).unwrap();
    assert_eq!(token.len(), 64);
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(load_or_create_token(&path).unwrap(), token);
    assert_eq!(read_token(&path).unwrap(), token);
    let other = dir.path().join("other.token");
    assert_ne!(load_or_create_token(&other).unwrap(), token, "random");
}

#[test]
fn a_token_file_others_may_read_is_refused_naming_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edge.token");
    std::fs::write(&path, "abc\n").unwrap();
    for mode in [0o640, 0o604, 0o660] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = load_or_create_token(&path).unwrap_err().to_string();
        assert!(e.contains(&format!("{mode:04o}")), "{e}");
        assert!(e.contains("chmod 600"), "{e}");
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    assert_eq!(load_or_create_token(&path).unwrap(), "abc");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&path, "\n").unwrap();
    assert!(load_or_create_token(&path)
        .unwrap_err()
        .to_string()
        .contains("empty"));
    assert!(read_token(&dir.path().join("missing"))
        .unwrap_err()
        .contains("cannot read"));
    assert!(load_or_create_token(&dir.path().join("no/such/dir/t")).is_err());
}

#[test]
fn allowed_hosts_come_from_repeated_flags_or_a_comma_separated_variable() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        edge: crate::edge::EdgeArgs,
    }
    let args = Cli::try_parse_from(["edge", "--allow-host", "a.internal", "--allow-host", "b,c"])
        .unwrap()
        .edge;
    assert_eq!(args.allow_hosts, ["a.internal", "b", "c"]);
    // No other test reads this variable.
    std::env::set_var("LOOPGUARD_EDGE_ALLOW_HOSTS", "10.0.0.7,edge.internal");
    let args = Cli::try_parse_from(["edge"]).unwrap().edge;
    std::env::remove_var("LOOPGUARD_EDGE_ALLOW_HOSTS");
    assert_eq!(args.allow_hosts, ["10.0.0.7", "edge.internal"]);
    let t = Trust::new(&args.allow_hosts, None, None);
    assert!(t.host_allowed("10.0.0.7:9465") && t.host_allowed("edge.internal"));
}
