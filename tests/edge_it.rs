//! The edge, the hook commands and their fail-open paths against a real Kafka broker and a
//! real `loopguard serve`: each CLI's recorded hook payloads (tests/fixtures/hooks, written
//! from each CLI's hook documentation, SOURCES.md) run through `loopguard hook` as the CLI
//! would run it, a process per call; the edge's HTTP routes; the guard down.
// Each test holds the SERIAL lock across its awaits on purpose (see `serial`).
#![allow(clippy::await_holding_lock)]

mod kafka_env;

use kafka_env::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_loopguard");

/// A guard process killed with the test, passed or failed.
struct Guard(Child);

impl Guard {
    fn stop(&mut self) {
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
struct Edge {
    child: Child,
    url: String,
}

impl Drop for Edge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_edge(env: &Env, config: &str) -> Edge {
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

fn edge_log(env: &Env) -> String {
    std::fs::read_to_string(env.dir.path().join("edge.log")).unwrap_or_default()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

fn get(url: &str) -> Option<String> {
    let mut r = agent().get(url).call().ok()?;
    (r.status() == 200).then(|| r.body_mut().read_to_string().unwrap())
}

fn post(url: &str, body: &Value) -> (u16, Value) {
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
struct HookRun {
    stdout: Value,
    stderr: String,
    took: Duration,
}

fn hook(cli: &str, edge: &str, payload: &Value, extra: &[&str]) -> HookRun {
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

fn fixture(cli: &str, kind: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/hooks/{cli}/{kind}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A fixture for `session`, with its tool input's command and call id replaced.
fn payload(cli: &str, kind: &str, session: &str, command: &str, call: usize) -> Value {
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

const BLOCKED: &str = "Blocked: `{tool}` was called with the same arguments 3 times in the last 6 calls. It will not give a different answer; change approach or report what you have.";

/// The deny each CLI documents, exactly.
fn denied(cli: &str, tool: &str) -> Value {
    let reason = BLOCKED.replace("{tool}", tool);
    match cli {
        "gemini" => json!({"decision": "deny", "reason": reason}),
        _ => json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "deny", "permissionDecisionReason": reason}}),
    }
}

async fn guarded_env(test: &str, policy: &str) -> (Env, Guard, Edge) {
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
fn wait_until_judged(edge: &Edge) {
    for p in 0..PARTITIONS * 4 {
        let probe = json!({"v": 1, "event_id": format!("probe-{p}"), "session_id": format!("probe-{p}"),
            "ts": 1_767_225_600_000_i64, "type": "tool_call", "turn_id": "t", "call_id": "c",
            "tool": "probe", "args": {}});
        let (_, body) = post(&format!("{}/v1/check?deadline_ms=30000", edge.url), &probe);
        assert_eq!(body["answer"], "judged", "the guard did not start: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cli_hook_denies_the_third_identical_call_in_its_own_format_and_allows_healthy_work() {
    if bootstrap().is_none() {
        return;
    }
    let _one_at_a_time = serial();
    let (_env, mut guard, edge) = guarded_env("hooks", "").await;
    for (cli, tool) in [
        ("claude-code", "Bash"),
        ("codex", "Bash"),
        ("gemini", "run_shell_command"),
    ] {
        // A looping session: the prompt, then the same test run again and again.
        let looping = format!("loop-{cli}-{}", std::process::id());
        let run = hook(
            cli,
            &edge.url,
            &payload(cli, "prompt", &looping, "", 0),
            &[],
        );
        assert_eq!(
            run.stdout,
            json!({}),
            "{cli}: a prompt is recorded, nothing said"
        );
        let mut answers = Vec::new();
        for call in 1..=3 {
            let pre = hook(
                cli,
                &edge.url,
                &payload(cli, "pre_tool", &looping, "cargo test", call),
                &[],
            );
            assert!(pre.stderr.is_empty(), "{cli}: no fail-open: {}", pre.stderr);
            answers.push(pre.stdout);
            if call < 3 {
                let post = hook(
                    cli,
                    &edge.url,
                    &payload(cli, "post_tool", &looping, "cargo test", call),
                    &[],
                );
                assert!(post.stderr.is_empty(), "{cli}: {}", post.stderr);
            }
        }
        assert_eq!(answers[0], json!({}), "{cli}: the first call runs");
        assert_eq!(answers[1], json!({}), "{cli}: the second call runs");
        assert_eq!(
            answers[2],
            denied(cli, tool),
            "{cli}: the third identical call is denied"
        );

        // A healthy session: different commands, each run once, then the agent stops.
        let healthy = format!("ok-{cli}-{}", std::process::id());
        for (call, command) in ["cargo build", "cargo test", "git diff", "cargo clippy"]
            .iter()
            .enumerate()
        {
            let pre = hook(
                cli,
                &edge.url,
                &payload(cli, "pre_tool", &healthy, command, call),
                &[],
            );
            assert_eq!(pre.stdout, json!({}), "{cli}: healthy call {call} runs");
            assert!(pre.stderr.is_empty(), "{cli}: {}", pre.stderr);
            assert!(
                pre.took < Duration::from_secs(1),
                "{cli}: answered, not timed out: {:?}",
                pre.took
            );
            let post = hook(
                cli,
                &edge.url,
                &payload(cli, "post_tool", &healthy, command, call),
                &[],
            );
            assert_eq!(post.stdout, json!({}));
        }
        let stop = hook(cli, &edge.url, &payload(cli, "stop", &healthy, "", 0), &[]);
        assert_eq!(
            stop.stdout,
            json!({}),
            "{cli}: the stop is recorded, the agent stops"
        );
        assert!(stop.stderr.is_empty(), "{cli}: {}", stop.stderr);
    }
    let metrics = get(&format!("{}/metrics", edge.url)).unwrap();
    assert!(
        metrics.contains("loopguard_edge_answers_total{answer=\"block\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("loopguard_edge_fail_open_total{reason=\"deadline\"} 0"),
        "{metrics}"
    );
    guard.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_stops_the_agent_in_each_cli_format() {
    if bootstrap().is_none() {
        return;
    }
    let _one_at_a_time = serial();
    // The operator's policy turns the exact repeat into an abort.
    let policy = "[[policy.rules]]\nrule = \"tool.exact_repeat\"\naction = \"abort\"\n";
    let (_env, mut guard, edge) = guarded_env("hook-abort", policy).await;
    for cli in ["claude-code", "codex", "gemini"] {
        let session = format!("abort-{cli}-{}", std::process::id());
        let mut last = Value::Null;
        for call in 1..=3 {
            last = hook(
                cli,
                &edge.url,
                &payload(cli, "pre_tool", &session, "make poll", call),
                &[],
            )
            .stdout;
        }
        let reason = last
            .pointer("/hookSpecificOutput/permissionDecisionReason")
            .or_else(|| last.get("reason"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        assert!(!reason.is_empty(), "{cli}: the call is refused: {last}");
        match cli {
            // Codex refuses `continue` on PreToolUse: the call is denied, the run ends later.
            "codex" => assert!(last.get("continue").is_none(), "{last}"),
            _ => {
                assert_eq!(last["continue"], json!(false), "{cli}: {last}");
                assert_eq!(last["stopReason"], json!(reason), "{cli}");
            }
        }
        // Codex stops at the call's PostToolUse.
        if cli == "codex" {
            let mut post = payload(cli, "post_tool", &session, "make poll", 3);
            post["tool_response"] = "polling...".into();
            let _ = hook(cli, &edge.url, &post, &[]);
        }
    }
    guard.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_checks_publishes_streams_verdicts_and_refuses_invalid_events_naming_the_field() {
    if bootstrap().is_none() {
        return;
    }
    let _one_at_a_time = serial();
    let (env, mut guard, edge) = guarded_env("edge-http", "").await;
    let session = format!("http-{}", std::process::id());
    let ts = 1_767_225_600_000_i64;
    let ev = |id: &str, kind: &str, extra: Value| {
        let mut e = json!({"v": 1, "event_id": id, "session_id": session, "ts": ts, "type": kind});
        e.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        e
    };

    // Invalid: 400 naming the field, and nothing sent (not even the valid first event).
    let before = env.read_all(&env.topic("events")).len();
    let (code, body) = post(
        &format!("{}/v1/events", edge.url),
        &json!([
            ev("h-0", "user_message", json!({"text": "hi"})),
            ev(
                "h-bad",
                "tool_call",
                json!({"turn_id": "t", "call_id": "c", "args": {}})
            )
        ]),
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["reason"], "missing_field");
    assert!(
        body["detail"].as_str().unwrap().contains("`tool`"),
        "{body}"
    );
    let (code, body) = post(
        &format!("{}/v1/check", edge.url),
        &json!({"v": 1, "type": "tool_call"}),
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        env.read_all(&env.topic("events")).len(),
        before,
        "nothing sent"
    );

    // Valid: 202 once acknowledged.
    let (code, body) = post(
        &format!("{}/v1/events", edge.url),
        &json!([ev("h-1", "user_message", json!({"text": "check the job"}))]),
    );
    assert_eq!((code, body), (202, json!({"accepted": 1})));

    // The session's verdicts as Server-Sent Events, read on a thread.
    let url = format!("{}/v1/sessions/{session}/verdicts", edge.url);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let resp = ureq::get(&url).call().unwrap();
        let _ = tx.send(String::from("open"));
        for line in BufReader::new(resp.into_body().into_reader()).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), "open");

    let mut answers = Vec::new();
    for i in 1..=3 {
        let call = ev(
            &format!("h-call-{i}"),
            "tool_call",
            json!({"turn_id": format!("t{i}"), "call_id": format!("c{i}"), "tool": "job_status", "args": {"job": 7}}),
        );
        let started = Instant::now();
        let (code, body) = post(&format!("{}/v1/check", edge.url), &call);
        assert_eq!(code, 200, "{body}");
        assert!(
            started.elapsed() < Duration::from_millis(900),
            "answered before the deadline"
        );
        answers.push(body);
        let result = ev(
            &format!("h-res-{i}"),
            "tool_result",
            json!({"call_id": format!("c{i}"), "tool": "job_status", "status": "ok"}),
        );
        assert_eq!(post(&format!("{}/v1/events", edge.url), &result).0, 202);
    }
    assert_eq!(answers[0], json!({"verdict": null, "answer": "judged"}));
    assert_eq!(answers[1], json!({"verdict": null, "answer": "judged"}));
    let verdict = &answers[2]["verdict"];
    assert_eq!(verdict["action"], "block", "{}", answers[2]);
    assert_eq!(verdict["event_id"], "h-call-3");

    // The same verdict on the stream, with its id.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut streamed = Vec::new();
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                streamed.push(line.clone());
                if line.starts_with("data:") {
                    break;
                }
            }
            Err(_) => continue,
        }
    }
    let data = streamed
        .iter()
        .find_map(|l| l.strip_prefix("data:"))
        .expect("a verdict streamed");
    let streamed_verdict: Value = serde_json::from_str(data.trim()).unwrap();
    assert_eq!(streamed_verdict["verdict_id"], verdict["verdict_id"]);
    assert!(
        streamed.iter().any(|l| l == "event: verdict"),
        "{streamed:?}"
    );

    let metrics = get(&format!("{}/metrics", edge.url)).unwrap();
    for line in [
        "loopguard_edge_answers_total{answer=\"none\"} 18",
        "loopguard_edge_answers_total{answer=\"block\"} 1",
        "loopguard_edge_invalid_events_total{reason=\"missing_field\"} 2",
        "loopguard_edge_events_published_total{route=\"events\"} 4",
        "loopguard_edge_events_published_total{route=\"check\"} 19",
        "loopguard_edge_check_seconds_count{answer=\"block\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }
    guard.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_guard_or_the_edge_down_every_path_allows_within_its_deadline_and_says_so() {
    if bootstrap().is_none() {
        return;
    }
    let _one_at_a_time = serial();
    let (env, mut guard, edge) = guarded_env("edge-down", "").await;
    guard.stop();

    // The guard down: the edge answers fail-open at the deadline asked for.
    let call = json!({"v": 1, "event_id": "d-1", "session_id": "down-1", "ts": 1_767_225_600_000_i64,
        "type": "tool_call", "turn_id": "t", "call_id": "c", "tool": "bash", "args": {"cmd": "ls"}});
    let started = Instant::now();
    let (code, body) = post(&format!("{}/v1/check?deadline_ms=300", edge.url), &call);
    let took = started.elapsed();
    assert_eq!(code, 200);
    assert_eq!(body["answer"], "fail_open", "{body}");
    assert_eq!(body["fail_open"]["reason"], "deadline");
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_millis(800),
        "{took:?}"
    );

    // A hook with the guard down: allowed by its own deadline, said once on stderr.
    for cli in ["claude-code", "codex", "gemini"] {
        let run = hook(
            cli,
            &edge.url,
            &payload(cli, "pre_tool", "down-2", "ls", 1),
            &["--deadline-ms", "400"],
        );
        assert_eq!(run.stdout, json!({}), "{cli}");
        assert!(
            run.stderr.contains("allowed unguarded"),
            "{cli}: {}",
            run.stderr
        );
        assert!(
            run.took < Duration::from_millis(1000),
            "{cli}: {:?}",
            run.took
        );
    }
    let metrics = get(&format!("{}/metrics", edge.url)).unwrap();
    assert!(
        metrics.contains("loopguard_edge_fail_open_total{reason=\"deadline\"} 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("loopguard_edge_answers_total{answer=\"fail_open\"} 4"),
        "{metrics}"
    );

    // The edge down too: the hook allows at once, and says why.
    let gone = format!("http://127.0.0.1:{}", free_port());
    drop(edge);
    for cli in ["claude-code", "codex", "gemini"] {
        let run = hook(
            cli,
            &gone,
            &payload(cli, "pre_tool", "down-3", "ls", 1),
            &[],
        );
        assert_eq!(run.stdout, json!({}), "{cli}");
        assert!(
            run.stderr.contains("did not answer"),
            "{cli}: {}",
            run.stderr
        );
        assert!(
            run.took < Duration::from_millis(1000),
            "{cli}: {:?}",
            run.took
        );
        // A payload it cannot read: allowed, said, never a crash.
        let mut child = Command::new(BIN)
            .args(["hook", cli, "--edge", &gone])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"{not json").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "{}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the hook payload"));
    }
    let _ = env;
}

/// The fenced blocks of a markdown file: (language, text).
fn blocks(markdown: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in markdown.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), String::new())),
            (Some(_), Some("")) => out.extend(open.take()),
            (Some((_, text)), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// A recorded payload for a CLI's hook event of that name.
fn payload_for(cli: &str, event: &str, session: &str) -> Value {
    let kind = match event {
        "PreToolUse" | "BeforeTool" => "pre_tool",
        "PostToolUse" | "PostToolUseFailure" | "AfterTool" => "post_tool",
        "UserPromptSubmit" | "BeforeAgent" => "prompt",
        "Stop" | "AfterAgent" => "stop",
        other => panic!("docs/edge.md registers {other}, which no fixture covers"),
    };
    let mut p = payload(cli, kind, session, "ls", 1);
    p["hook_event_name"] = event.into();
    p
}

fn published(edge: &Edge) -> u64 {
    get(&format!("{}/metrics", edge.url))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("loopguard_edge_events_published_total"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// Runs the command a settings block registers for `event`, as the CLI would: the command
/// is this CLI's hook, and the event is one it records (an event reaches the broker).
fn registered(edge: &Edge, cli: &str, event: &str, command: &str) {
    assert_eq!(command, format!("loopguard hook {cli}"), "{event}");
    let before = published(edge);
    let run = hook(
        cli,
        &edge.url,
        &payload_for(cli, event, &format!("doc-{cli}")),
        &[],
    );
    assert!(run.stderr.is_empty(), "{cli} {event}: {}", run.stderr);
    assert_eq!(published(edge), before + 1, "{cli} {event}: recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_block_of_docs_edge_md_works_as_written() {
    if bootstrap().is_none() {
        return;
    }
    let _one_at_a_time = serial();
    let (_env, _guard, edge) = guarded_env("edge-doc", "").await;
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/edge.md")).unwrap();
    let mut seen = Vec::new();
    for (lang, text) in blocks(&doc) {
        match lang.as_str() {
            // The settings of Claude Code, Gemini CLI, an MCP client: JSON as written.
            "jsonc" => {
                let v: Value =
                    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
                if let Some(servers) = v.get("mcpServers") {
                    for s in servers.as_object().unwrap().values() {
                        assert_eq!(s["command"], "loopguard");
                        let args: Vec<&str> = s["args"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|a| a.as_str().unwrap())
                            .collect();
                        assert_eq!(args[0], "mcp-proxy");
                        assert!(args.contains(&"--"), "{args:?}");
                    }
                    seen.push("mcp".to_string());
                    continue;
                }
                let cli = if text.contains("BeforeTool") {
                    "gemini"
                } else {
                    "claude-code"
                };
                for (event, groups) in v["hooks"].as_object().unwrap() {
                    for hook_def in groups
                        .as_array()
                        .unwrap()
                        .iter()
                        .flat_map(|g| g["hooks"].as_array().unwrap())
                    {
                        assert_eq!(hook_def["type"], "command");
                        registered(&edge, cli, event, hook_def["command"].as_str().unwrap());
                    }
                }
                seen.push(cli.to_string());
            }
            // Codex's config.toml.
            "toml" => {
                let v: toml::Value = toml::from_str(&text).unwrap();
                for (event, groups) in v["hooks"].as_table().unwrap() {
                    for group in groups.as_array().unwrap() {
                        for hook_def in group["hooks"].as_array().unwrap() {
                            registered(
                                &edge,
                                "codex",
                                event,
                                hook_def["command"].as_str().unwrap(),
                            );
                        }
                    }
                }
                seen.push("codex".to_string());
            }
            // The shell examples: each curl run against this edge, its answer the comment's.
            "bash" => {
                let lines: Vec<&str> = text.lines().collect();
                for (i, line) in lines.iter().enumerate() {
                    if !line.starts_with("curl ") {
                        continue;
                    }
                    let host = edge.url.trim_start_matches("http://");
                    let out = Command::new("sh")
                        .args(["-c", &line.replace("127.0.0.1:9465", host)])
                        .output()
                        .unwrap();
                    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
                    let want: Value =
                        serde_json::from_str(lines[i + 1].trim_start_matches("# ")).unwrap();
                    assert_eq!(got, want, "{line}");
                    seen.push("curl".to_string());
                }
            }
            other => panic!("docs/edge.md: a `{other}` block this test does not check"),
        }
    }
    seen.sort();
    assert_eq!(seen, ["claude-code", "codex", "curl", "gemini", "mcp"]);
}
