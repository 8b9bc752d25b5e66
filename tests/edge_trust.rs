//! The edge answers only its own user (issue 44): a pinned tenant (`--tenant`) refuses
//! events naming another and fills in its own; with tenants from the writer
//! (`kafka.events_topic_template`) it writes its tenant's own events topic and does not
//! start without one; foreign `Host`s, any `Origin` and non-JSON POSTs are refused; with
//! `--token-file` every route but the open ones needs the token, which the hooks read from
//! the same file. Against a real broker (and guard, for the hooks), as edge_it.
// Each test holds the SERIAL lock across its awaits on purpose (see `serial`).
#![allow(clippy::await_holding_lock)]

mod edge_env;
mod kafka_env;

use edge_env::*;
use kafka_env::*;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TS: i64 = 1_767_225_600_000;

fn event(id: &str, session: &str, tenant: Option<&str>) -> Value {
    let mut e = json!({"v": 1, "event_id": id, "session_id": session, "ts": TS,
        "type": "user_message", "text": "hi"});
    if let Some(t) = tenant {
        e["tenant"] = t.into();
    }
    e
}

fn call(id: &str, session: &str, tenant: Option<&str>) -> Value {
    let mut e = json!({"v": 1, "event_id": id, "session_id": session, "ts": TS,
        "type": "tool_call", "turn_id": "t", "call_id": id, "tool": "bash", "args": {"cmd": "ls"}});
    if let Some(t) = tenant {
        e["tenant"] = t.into();
    }
    e
}

/// One HTTP/1.1 request written by hand, so its `Host`, `Origin` and content type are
/// exactly what a browser or another user would send: (status, JSON body, raw head).
fn raw(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value, String) {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let (head, text) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (
        code,
        serde_json::from_str(text).unwrap_or_else(|_| json!(text)),
        head.to_string(),
    )
}

/// The payloads of every record on `topic`.
fn payloads(env: &Env, topic: &str) -> Vec<Value> {
    env.read_all(topic)
        .into_iter()
        .map(|(_, _, p, _)| serde_json::from_slice(&p.unwrap()).unwrap())
        .collect()
}

async fn create(env: &Env, topics: &[String]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &env.bootstrap)
        .create()
        .unwrap();
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| NewTopic::new(t, PARTITIONS, TopicReplication::Fixed(1)))
        .collect();
    for r in admin
        .create_topics(new.iter(), &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap();
    }
}

/// `loopguard edge` with these flags, which must refuse to start: (exit code, stderr).
fn refused_start(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .arg("edge")
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(args)
        .env_remove("LOOPGUARD_CONFIG")
        .env_remove("LOOPGUARD_EDGE_TENANT")
        .env_remove("LOOPGUARD_EDGE_TOKEN_FILE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_edge_does_not_start_on_a_token_file_others_may_read_nor_without_its_tenant_when_tenants_write_their_own_topic(
) {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("edge.token");
    std::fs::write(&token, "0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o640)).unwrap();
    let t = token.to_str().unwrap();
    let (code, stderr) = refused_start(&["--bootstrap-servers", "127.0.0.1:9", "--token-file", t]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("mode 0640"), "{stderr}");
    assert!(stderr.contains(t), "names the file: {stderr}");

    // The same through the environment, as the hooks read it.
    let out = Command::new(BIN)
        .args(["edge", "--bootstrap-servers", "127.0.0.1:9"])
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .env("LOOPGUARD_EDGE_TOKEN_FILE", t)
        .env_remove("LOOPGUARD_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("0640"));

    let nowhere = dir.path().join("no-such-dir/edge.token");
    let (code, stderr) = refused_start(&[
        "--bootstrap-servers",
        "127.0.0.1:9",
        "--token-file",
        nowhere.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no-such-dir"), "{stderr}");

    // Tenants from the writer: the edge writes one tenant's topic, so it must know which.
    let cfg = dir.path().join("loopguard.toml");
    std::fs::write(
        &cfg,
        "[kafka]\nbootstrap_servers = \"127.0.0.1:9\"\nverdicts_topic_template = \"agent-verdicts.{tenant}\"\nevents_topic_template = \"agent-events.{tenant}\"\n",
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    let (code, stderr) = refused_start(&["--config", c]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--tenant") && stderr.contains("events_topic_template"),
        "{stderr}"
    );
    let (code, stderr) = refused_start(&["--config", c, "--tenant", "a b"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("cannot name a topic"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_edge_refuses_events_of_another_tenant_naming_the_field_and_fills_in_its_own() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "edge-pinned");
    env.create_topics().await;
    env.wait_for_leaders();
    let cfg = env.config("");
    let edge = start_edge_with(&env, &cfg, &["--tenant", "acme"]);

    // Another tenant, in a batch: 400 naming the field and both values, nothing sent.
    let (code, body) = post(
        &format!("{}/v1/events", edge.url),
        &json!([
            event("p-1", "s-p", None),
            event("p-2", "s-p", Some("globex"))
        ]),
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["reason"], "tenant_mismatch", "{body}");
    assert_eq!(body["field"], "tenant");
    assert_eq!(body["tenant"], "globex");
    assert_eq!(body["pinned"], "acme");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("`tenant`") && detail.contains("globex") && detail.contains("acme"),
        "{detail}"
    );
    // And on a check.
    let (code, body) = post(
        &format!("{}/v1/check", edge.url),
        &call("p-3", "s-p", Some("globex")),
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["field"], "tenant");
    assert!(
        payloads(&env, &env.topic("events")).is_empty(),
        "nothing sent"
    );

    // No tenant: the edge's own is filled in; its own: kept.
    let (code, body) = post(
        &format!("{}/v1/events", edge.url),
        &json!([event("p-4", "s-p", None), event("p-5", "s-p", Some("acme"))]),
    );
    assert_eq!((code, body), (202, json!({"accepted": 2})));
    let (code, body) = post(
        &format!("{}/v1/check?deadline_ms=200", edge.url),
        &call("p-6", "s-p", None),
    );
    assert_eq!(code, 200, "{body}");
    let sent = payloads(&env, &env.topic("events"));
    let ids: Vec<&str> = sent
        .iter()
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["p-4", "p-5", "p-6"]);
    for e in &sent {
        assert_eq!(e["tenant"], "acme", "{e}");
    }
    let metrics = get(&format!("{}/metrics", edge.url)).unwrap();
    assert!(
        metrics.contains("loopguard_edge_invalid_events_total{reason=\"tenant_mismatch\"} 2"),
        "{metrics}"
    );
}

/// The data lines of a session's verdict stream, read on a thread until the test ends.
fn stream(url: String) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let resp = agent().get(&url).call().unwrap();
        let _ = tx.send(format!("open {}", resp.status().as_u16()));
        for line in std::io::BufRead::lines(std::io::BufReader::new(resp.into_body().into_reader()))
        {
            let Ok(line) = line else { break };
            if line.starts_with("data:") && tx.send(line).is_err() {
                break;
            }
        }
    });
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        "open 200"
    );
    rx
}

/// Three identical calls of `session` through `edge`, each with its result: the third's
/// answer.
fn three_calls(edge: &Edge, session: &str, tenant: Option<&str>) -> Value {
    let mut last = Value::Null;
    for i in 1..=3 {
        let mut c = call(&format!("{session}-c{i}"), session, tenant);
        c["turn_id"] = format!("t{i}").into();
        let (code, body) = post(&format!("{}/v1/check?deadline_ms=5000", edge.url), &c);
        assert_eq!(code, 200, "{body}");
        last = body;
        let mut r = json!({"v": 1, "event_id": format!("{session}-r{i}"), "session_id": session,
            "ts": TS, "type": "tool_result", "call_id": format!("{session}-c{i}"), "tool": "bash", "status": "ok"});
        if let Some(t) = tenant {
            r["tenant"] = t.into();
        }
        assert_eq!(post(&format!("{}/v1/events", edge.url), &r).0, 202);
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_edge_streams_no_verdict_of_another_tenant() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "edge-stream");
    env.create_topics().await;
    env.wait_for_leaders();
    let cfg = env.config("");
    let _guard = Guard(env.spawn_guard(&cfg, "a"));
    let open = start_edge_with(&env, &cfg, &[]);
    wait_until_judged(&open);
    let acme = start_edge_with(&env, &cfg, &["--tenant", "acme"]);

    // Both read the shared verdicts topic; globex's session asked for on acme's edge.
    let globex_session = format!("gx-{}", std::process::id());
    let acme_session = format!("ax-{}", std::process::id());
    let on_acme_globex = stream(format!(
        "{}/v1/sessions/{globex_session}/verdicts",
        acme.url
    ));
    let on_open_globex = stream(format!(
        "{}/v1/sessions/{globex_session}/verdicts",
        open.url
    ));
    let on_acme_acme = stream(format!("{}/v1/sessions/{acme_session}/verdicts", acme.url));

    let blocked = three_calls(&open, &globex_session, Some("globex"));
    assert_eq!(blocked["verdict"]["action"], "block", "{blocked}");
    let blocked = three_calls(&acme, &acme_session, None);
    assert_eq!(blocked["verdict"]["tenant"], "acme", "{blocked}");

    let own = on_acme_acme.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(own.contains("\"tenant\":\"acme\""), "{own}");
    let theirs = on_open_globex
        .recv_timeout(Duration::from_secs(10))
        .unwrap();
    assert!(theirs.contains("\"tenant\":\"globex\""), "{theirs}");
    // Written before acme's, read by the same reader: had acme's edge passed it on, it
    // would be here by now.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        on_acme_globex.try_recv().is_err(),
        "acme's edge streamed globex's verdict"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tenants_from_the_writer_the_edge_publishes_to_its_tenants_own_events_topic() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "edge-writer");
    env.create_topics().await;
    let own = format!("{}-events.acme", env.name);
    create(&env, &[own.clone(), format!("{}-verdicts.acme", env.name)]).await;
    env.wait_for_leaders();
    let cfg = env.config(&format!(
        "verdicts_topic_template = \"{n}-verdicts.{{tenant}}\"\nevents_topic_template = \"{n}-events.{{tenant}}\"\n",
        n = env.name
    ));
    let edge = start_edge_with(&env, &cfg, &["--tenant", "acme"]);
    let (code, body) = post(
        &format!("{}/v1/events", edge.url),
        &json!([event("w-1", "s-w", None), event("w-2", "s-w", Some("acme"))]),
    );
    assert_eq!(
        (code, &body),
        (202, &json!({"accepted": 2})),
        "{}",
        edge_log(&env)
    );
    let (code, body) = post(
        &format!("{}/v1/events", edge.url),
        &event("w-3", "s-w", Some("globex")),
    );
    assert_eq!((code, &body["field"]), (400, &json!("tenant")), "{body}");

    let written = payloads(&env, &own);
    assert_eq!(written.len(), 2, "{written:?}");
    assert!(written.iter().all(|e| e["tenant"] == "acme"), "{written:?}");
    assert!(
        payloads(&env, &env.topic("events")).is_empty(),
        "the shared events topic is not written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_hosts_origins_and_non_json_posts_are_refused_before_anything_is_sent() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "edge-hosts");
    env.create_topics().await;
    env.wait_for_leaders();
    let cfg = env.config("");
    let edge = start_edge_with(&env, &cfg, &["--allow-host", "edge.internal,node-7"]);
    let port = edge.url.rsplit(':').next().unwrap().to_string();
    let on = |host: &str| format!("{host}:{port}");
    let json_ct = ("Content-Type", "application/json");
    let one = event("h-1", "s-h", None).to_string();
    let check = call("h-2", "s-h", None).to_string();

    // DNS rebinding: the attacker's name in Host, on a check and on the verdict stream.
    let evil = on("evil.example");
    let (code, body, _) = raw(
        &edge.url,
        "POST",
        "/v1/check",
        &[("Host", &evil), json_ct],
        &check,
    );
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["reason"], "host");
    assert_eq!(body["host"], json!(evil));
    assert!(body["detail"].as_str().unwrap().contains(&evil), "{body}");
    let (code, body, _) = raw(
        &edge.url,
        "GET",
        "/v1/sessions/s-h/verdicts",
        &[("Host", &evil)],
        "",
    );
    assert_eq!((code, &body["reason"]), (403, &json!("host")), "{body}");

    // A web page's cross-origin POST.
    let (code, body, _) = raw(
        &edge.url,
        "POST",
        "/v1/events",
        &[
            ("Host", &on("127.0.0.1")),
            json_ct,
            ("Origin", "https://evil.example"),
        ],
        &one,
    );
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["reason"], "origin");
    assert_eq!(body["origin"], "https://evil.example");

    // A form's body type.
    let (code, body, _) = raw(
        &edge.url,
        "POST",
        "/v1/events",
        &[("Host", &on("localhost")), ("Content-Type", "text/plain")],
        &one,
    );
    assert_eq!(code, 415, "{body}");
    assert_eq!(body["reason"], "content_type");
    assert!(
        payloads(&env, &env.topic("events")).is_empty(),
        "nothing sent"
    );

    // Loopback names and the allowed ones are answered; a charset is fine.
    for (i, host) in ["[::1]", "edge.internal", "node-7", "localhost"]
        .iter()
        .enumerate()
    {
        let (code, body, _) = raw(
            &edge.url,
            "POST",
            "/v1/events",
            &[
                ("Host", &on(host)),
                ("Content-Type", "application/json; charset=utf-8"),
            ],
            &event(&format!("ok-{i}"), "s-h", None).to_string(),
        );
        assert_eq!((code, &body), (202, &json!({"accepted": 1})), "{host}");
    }
    assert_eq!(payloads(&env, &env.topic("events")).len(), 4);

    // Prometheus by the pod's IP: /metrics answers; the refusals are counted on their route.
    let (code, text, _) = raw(
        &edge.url,
        "GET",
        "/metrics",
        &[("Host", &on("10.4.0.17"))],
        "",
    );
    assert_eq!(code, 200);
    let text = text.as_str().unwrap();
    for line in [
        "loopguard_edge_requests_total{code=\"403\",route=\"check\"} 1",
        "loopguard_edge_requests_total{code=\"403\",route=\"verdicts\"} 1",
        "loopguard_edge_requests_total{code=\"403\",route=\"events\"} 1",
        "loopguard_edge_requests_total{code=\"415\",route=\"events\"} 1",
        "loopguard_edge_requests_total{code=\"202\",route=\"events\"} 4",
    ] {
        assert!(text.contains(line), "{line} in:\n{text}");
    }
}

/// A hook call with the token file named in the environment, as a CLI's settings would.
fn hook_with_env(cli: &str, edge: &str, payload: &Value, token_file: &str) -> HookRun {
    let started = Instant::now();
    let mut child = Command::new(BIN)
        .args(["hook", cli, "--edge", edge, "--tenant", "acme"])
        .env("LOOPGUARD_EDGE_TOKEN_FILE", token_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    HookRun {
        stdout: serde_json::from_slice(&out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
        took: started.elapsed(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_file_only_its_holders_are_answered_and_the_hooks_read_it() {
    let Some(b) = bootstrap() else { return };
    let _one_at_a_time = serial();
    let env = Env::new(b, "edge-token");
    env.create_topics().await;
    env.wait_for_leaders();
    let cfg = env.config("");
    let mut guard = Guard(env.spawn_guard(&cfg, "a"));
    let path = env.dir.path().join("edge.token");
    let file = path.to_str().unwrap().to_string();
    let edge = start_edge_with(&env, &cfg, &["--token-file", &file]);

    // Created at start: 32 random bytes in hex, the owner's alone.
    let token = std::fs::read_to_string(&path).unwrap().trim().to_string();
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.bytes().all(|c| c.is_ascii_hexdigit()));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");

    let host = edge.url.trim_start_matches("http://").to_string();
    let bearer = format!("Bearer {token}");
    let authorized = [
        ("Host", host.as_str()),
        ("Content-Type", "application/json"),
        ("Authorization", bearer.as_str()),
    ];
    // The guard owns its partitions: a probe on each is judged (with the token).
    for p in 0..PARTITIONS * 4 {
        let probe = call(&format!("probe-{p}"), &format!("probe-{p}"), None).to_string();
        let (code, body, _) = raw(
            &edge.url,
            "POST",
            "/v1/check?deadline_ms=30000",
            &authorized,
            &probe,
        );
        assert_eq!((code, &body["answer"]), (200, &json!("judged")), "{body}");
    }

    // No token, a wrong one: 401, nothing sent.
    let before = payloads(&env, &env.topic("events")).len();
    let one = event("t-1", "s-t", None).to_string();
    let (code, body, head) = raw(&edge.url, "POST", "/v1/events", &authorized[..2], &one);
    assert_eq!(code, 401, "{body}");
    assert_eq!(body["reason"], "token");
    assert!(
        head.to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{head}"
    );
    let wrong = format!("Bearer {}", "0".repeat(64));
    let (code, _, _) = raw(
        &edge.url,
        "POST",
        "/v1/events",
        &[authorized[0], authorized[1], ("Authorization", &wrong)],
        &one,
    );
    assert_eq!(code, 401);
    let (code, _, _) = raw(
        &edge.url,
        "GET",
        "/v1/sessions/s-t/verdicts",
        &authorized[..1],
        "",
    );
    assert_eq!(code, 401, "the verdict stream too");
    assert_eq!(payloads(&env, &env.topic("events")).len(), before);
    // The right one: taken.
    let (code, body, _) = raw(&edge.url, "POST", "/v1/events", &authorized, &one);
    assert_eq!((code, body), (202, json!({"accepted": 1})));
    // Prometheus needs none.
    assert!(get(&format!("{}/metrics", edge.url)).is_some());

    // A hook with the token file (flag, then environment) gets the guard's answers: the
    // third identical call is denied.
    let session = format!("token-{}", std::process::id());
    let mut answers = Vec::new();
    for n in 1..=3 {
        let pre = payload("claude-code", "pre_tool", &session, "make test", n);
        let run = if n == 1 {
            hook("claude-code", &edge.url, &pre, &["--token-file", &file])
        } else {
            hook_with_env("claude-code", &edge.url, &pre, &file)
        };
        assert!(run.stderr.is_empty(), "call {n}: {}", run.stderr);
        assert!(run.took < Duration::from_secs(1), "{:?}", run.took);
        answers.push(run.stdout);
        let post_call = payload("claude-code", "post_tool", &session, "make test", n);
        let run = hook_with_env("claude-code", &edge.url, &post_call, &file);
        assert!(run.stderr.is_empty(), "result {n}: {}", run.stderr);
    }
    assert_eq!(answers[..2], [json!({}), json!({})]);
    assert_eq!(answers[2], denied("claude-code", "Bash"));

    // The MCP proxy with the token file (environment): its third identical call is
    // answered with the block, the server never sees it.
    let server = r#"while IFS= read -r l; do id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9]*\).*/\1/p'); [ -n "$id" ] && printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"ok"}],"isError":false}}\n' "$id"; done"#;
    let mut proxy = Command::new(BIN)
        .args(["mcp-proxy", "--edge", &edge.url, "--session"])
        .arg(format!("mcp-token-{}", std::process::id()))
        .args(["--", "sh", "-c", server])
        .env("LOOPGUARD_EDGE_TOKEN_FILE", &file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_proxy = proxy.stdin.take().unwrap();
    let mut from_proxy = std::io::BufReader::new(proxy.stdout.take().unwrap());
    let mut results = Vec::new();
    for id in 1..=3 {
        let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "job_status", "arguments": {"job": 7}}});
        writeln!(to_proxy, "{req}").unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut from_proxy, &mut line).unwrap();
        let resp: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(resp["id"], id, "{resp}");
        results.push(resp["result"].clone());
    }
    drop(to_proxy);
    let out = proxy.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("unguarded"), "{stderr}");
    assert_eq!(results[0]["content"][0]["text"], "ok", "{results:?}");
    assert_eq!(results[1]["content"][0]["text"], "ok", "{results:?}");
    assert_eq!(results[2]["isError"], true, "{results:?}");
    assert!(
        results[2]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Blocked: `job_status`"),
        "{results:?}"
    );

    // Without the token file: allowed, and it says the edge refused it.
    let run = hook(
        "claude-code",
        &edge.url,
        &payload("claude-code", "pre_tool", "no-token", "ls", 1),
        &[],
    );
    assert_eq!(run.stdout, json!({}));
    assert!(run.stderr.contains("HTTP 401"), "{}", run.stderr);
    // A token file it cannot read: the same, and it names the file.
    let run = hook(
        "claude-code",
        &edge.url,
        &payload("claude-code", "pre_tool", "no-token", "ls", 2),
        &["--token-file", "/nonexistent/edge.token"],
    );
    assert_eq!(run.stdout, json!({}));
    assert!(
        run.stderr.contains("/nonexistent/edge.token"),
        "{}",
        run.stderr
    );
    guard.stop();
}
