//! The edge tests' harness: a guard and an edge on a test's private topics (killed with the
//! test), HTTP helpers, and `loopguard hook` run as a CLI runs it, on the recorded payloads.
// Two test binaries (edge_it, edge_doc_it) each use a part of it.
#![allow(dead_code)]

use super::kafka_env::*;
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_loopguard");

/// A guard process killed with the test, passed or failed.
pub struct Guard(pub Child);

impl Guard {
    pub fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A running `loopguard edge` on a free loopback port.
pub struct Edge {
    child: Child,
    pub url: String,
}

impl Drop for Edge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn start_edge(env: &Env, config: &str) -> Edge {
    start_edge_with(env, config, &[])
}

/// `start_edge` with more flags (`--tenant`, `--token-file`, `--allow-host`).
pub fn start_edge_with(env: &Env, config: &str, extra: &[&str]) -> Edge {
    let port = free_port();
    let log = std::fs::File::create(env.dir.path().join("edge.log")).unwrap();
    let child = Command::new(BIN)
        .args([
            "edge",
            "--config",
            config,
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args(extra)
        .env_remove("LOOPGUARD_EDGE_TENANT")
        .env_remove("LOOPGUARD_EDGE_TOKEN_FILE")
        .env_remove("LOOPGUARD_EDGE_ALLOW_HOSTS")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let edge = Edge {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(&format!("{}/readyz", edge.url)).is_none() {
        assert!(
            Instant::now() < deadline,
            "the edge did not start: {}",
            edge_log(env)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    edge
}

pub fn edge_log(env: &Env) -> String {
    std::fs::read_to_string(env.dir.path().join("edge.log")).unwrap_or_default()
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

pub fn get(url: &str) -> Option<String> {
    let mut r = agent().get(url).call().ok()?;
    (r.status() == 200).then(|| r.body_mut().read_to_string().unwrap())
}

pub fn post(url: &str, body: &Value) -> (u16, Value) {
    let mut r = agent()
        .post(url)
        .header("content-type", "application/json")
        .send(body.to_string())
        .unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// One hook call as the CLI makes it: a new process, the payload on stdin.
pub struct HookRun {
    pub stdout: Value,
    pub stderr: String,
    pub took: Duration,
}

pub fn hook(cli: &str, edge: &str, payload: &Value, extra: &[&str]) -> HookRun {
    let started = Instant::now();
    let mut child = Command::new(BIN)
        .args(["hook", cli, "--edge", edge, "--tenant", "acme"])
        .args(extra)
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
    assert!(out.status.success(), "a hook never fails its CLI");
    let text = String::from_utf8(out.stdout).unwrap();
    HookRun {
        stdout: serde_json::from_str(text.trim())
            .unwrap_or_else(|e| panic!("{cli} hook printed no JSON ({e}): {text:?}")),
        stderr: String::from_utf8(out.stderr).unwrap(),
        took: started.elapsed(),
    }
}

pub fn fixture(cli: &str, kind: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/hooks/{cli}/{kind}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A fixture for `session`, with its tool input's command and call id replaced.
pub fn payload(cli: &str, kind: &str, session: &str, command: &str, call: usize) -> Value {
    let mut p = fixture(cli, kind);
    p["session_id"] = session.into();
    if p.get("tool_input").is_some() {
        p["tool_input"]["command"] = command.into();
    }
    if p.get("tool_use_id").is_some() {
        p["tool_use_id"] = format!("call-{session}-{call}").into();
    }
    p
}

pub const BLOCKED: &str = "Blocked: `{tool}` was called with the same arguments 3 times in the last 6 calls. It will not give a different answer; change approach or report what you have.";

/// The deny each CLI documents, exactly.
pub fn denied(cli: &str, tool: &str) -> Value {
    let reason = BLOCKED.replace("{tool}", tool);
    match cli {
        "gemini" => json!({"decision": "deny", "reason": reason}),
        _ => json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "deny", "permissionDecisionReason": reason}}),
    }
}

pub async fn guarded_env(test: &str, policy: &str) -> (Env, Guard, Edge) {
    let b = bootstrap().expect("checked by the caller");
    let env = Env::new(b, test);
    env.create_topics().await;
    env.wait_for_leaders();
    let cfg = env.config(policy);
    let guard = Guard(env.spawn_guard(&cfg, "a"));
    let edge = start_edge(&env, &cfg);
    wait_until_judged(&edge);
    (env, guard, edge)
}

/// Waits until the guard owns its partitions: a probe call on each is judged.
pub fn wait_until_judged(edge: &Edge) {
    for p in 0..PARTITIONS * 4 {
        let probe = json!({"v": 1, "event_id": format!("probe-{p}"), "session_id": format!("probe-{p}"),
            "ts": 1_767_225_600_000_i64, "type": "tool_call", "turn_id": "t", "call_id": "c",
            "tool": "probe", "args": {}});
        let (_, body) = post(&format!("{}/v1/check?deadline_ms=30000", edge.url), &probe);
        assert_eq!(body["answer"], "judged", "the guard did not start: {body}");
    }
}
