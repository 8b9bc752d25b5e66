//! The edge, the hook commands and their fail-open paths against a real Kafka broker and a
//! real `loopguard serve`: each CLI's recorded hook payloads (tests/fixtures/hooks, written
//! from each CLI's hook documentation, SOURCES.md) run through `loopguard hook` as the CLI
//! would run it, a process per call; the edge's HTTP routes; the guard down.
// Each test holds the SERIAL lock across its awaits on purpose (see `serial`).
#![allow(clippy::await_holding_lock)]

mod edge_env;
mod kafka_env;

use edge_env::*;
use kafka_env::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
