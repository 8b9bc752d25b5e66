//! Each CLI's answer to each decision, from its recorded payloads (tests/fixtures/hooks):
//! the shapes its documentation gives (SOURCES.md beside them).

use super::*;
use serde_json::json;

fn fixture(cli: &str, kind: &str) -> Value {
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/hooks/{cli}/{kind}.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

fn read(cli: Cli, kind: &str) -> Payload {
    cli.read(&fixture(cli.name(), kind)).unwrap()
}

fn args(cli: Cli) -> HookArgs {
    HookArgs {
        cli,
        edge: "http://127.0.0.1:9".into(),
        token_file: None,
        tenant: Some("acme".into()),
        agent: None,
        model: None,
        deadline_ms: 100,
    }
}

#[test]
fn every_fixture_reads_as_its_moment_and_becomes_a_valid_event() {
    for cli in [Cli::ClaudeCode, Cli::Codex, Cli::Gemini] {
        for (kind, event_type) in [
            ("pre_tool", "tool_call"),
            ("post_tool", "tool_result"),
            ("prompt", "user_message"),
            ("stop", "turn_end"),
        ] {
            let p = read(cli, kind);
            let event = p.event(&args(cli)).unwrap();
            assert_eq!(event["type"], event_type, "{cli:?} {kind}");
            assert_eq!(event["agent"], cli.name());
            crate::client::Guard::validate(&event)
                .unwrap_or_else(|e| panic!("{cli:?} {kind}: {e}: {event}"));
        }
        // The call and its result share a call id.
        let call = read(cli, "pre_tool").event(&args(cli)).unwrap();
        let result = read(cli, "post_tool").event(&args(cli)).unwrap();
        assert_eq!(call["call_id"], result["call_id"], "{cli:?}");
        assert_eq!(call["args"]["command"], "cargo test");
    }
}

#[test]
fn claude_code_denies_stops_and_adds_context_without_ever_approving() {
    let pre = read(Cli::ClaudeCode, "pre_tool");
    let steer = claude_code::answer(&pre, &Decision::Context("try another way".into()));
    assert_eq!(
        steer,
        json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "try another way"}})
    );
    let stop = claude_code::answer(&pre, &Decision::Stop("over".into()));
    assert_eq!(stop["continue"], false);
    assert_eq!(stop["stopReason"], "over");
    assert_eq!(stop["hookSpecificOutput"]["permissionDecision"], "deny");
    let post = read(Cli::ClaudeCode, "post_tool");
    assert_eq!(
        claude_code::answer(&post, &Decision::Context("same error again".into())),
        json!({"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "same error again"}})
    );
    for d in [Decision::Allow, Decision::Context("x".into())] {
        let a = claude_code::answer(&pre, &d).to_string();
        assert!(
            !a.contains("allow"),
            "an allow never skips the permission prompt: {a}"
        );
    }
}

#[test]
fn codex_answers_carry_only_the_fields_each_event_takes() {
    let pre = read(Cli::Codex, "pre_tool");
    assert_eq!(pre.model.as_deref(), Some("gpt-5-codex"));
    // PreToolUse refuses `continue`: an abort there is a deny.
    let abort = codex::answer(&pre, &Decision::Stop("over".into()));
    assert_eq!(
        abort,
        json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "deny", "permissionDecisionReason": "over"}})
    );
    let post = read(Cli::Codex, "post_tool");
    assert_eq!(
        codex::answer(&post, &Decision::Stop("over".into())),
        json!({"continue": false, "stopReason": "over"})
    );
    let stop = read(Cli::Codex, "stop");
    assert_eq!(
        codex::answer(&stop, &Decision::Allow),
        json!({}),
        "Stop needs JSON"
    );
}

#[test]
fn gemini_carries_a_steer_from_before_the_call_to_its_after_tool() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("XDG_RUNTIME_DIR", dir.path());
    let pre = read(Cli::Gemini, "pre_tool");
    let post = read(Cli::Gemini, "post_tool");
    let before = carry::across_the_call(&pre, Decision::Context("vary the command".into()));
    assert_eq!(before, Decision::Allow);
    assert_eq!(gemini::answer(&pre, &before), json!({}));
    let after = carry::across_the_call(&post, Decision::Allow);
    assert_eq!(
        gemini::answer(&post, &after),
        json!({"hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": "vary the command"}})
    );
    // Read once.
    assert_eq!(
        carry::across_the_call(&post, Decision::Allow),
        Decision::Allow
    );
    let deny = gemini::answer(&pre, &Decision::Deny("no".into()));
    assert_eq!(deny, json!({"decision": "deny", "reason": "no"}));
    let stop = gemini::answer(&pre, &Decision::Stop("over".into()));
    assert_eq!(stop["continue"], false);
    assert_eq!(stop["decision"], "deny");
}

#[test]
fn a_failed_call_is_an_error_result_with_its_text() {
    let mut failed = fixture("claude-code", "post_tool");
    failed["hook_event_name"] = "PostToolUseFailure".into();
    failed["error"] = "Command exited with non-zero status code 101".into();
    let p = claude_code::read(&failed).unwrap();
    let e = p.event(&args(Cli::ClaudeCode)).unwrap();
    assert_eq!(e["status"], "error");
    assert_eq!(e["error"], "Command exited with non-zero status code 101");
    let mut gem = fixture("gemini", "post_tool");
    gem["tool_response"]["error"] = "exit status 1".into();
    let e = gemini::read(&gem)
        .unwrap()
        .event(&args(Cli::Gemini))
        .unwrap();
    assert_eq!(e["status"], "error");
}

#[test]
fn a_payload_without_its_session_or_event_name_is_refused_with_the_field() {
    let mut p = fixture("claude-code", "pre_tool");
    p.as_object_mut().unwrap().remove("session_id");
    assert_eq!(claude_code::read(&p).unwrap_err(), "no `session_id`");
    let edge = crate::edge::EdgeClient::new("http://127.0.0.1:9");
    assert_eq!(
        handle(&args(Cli::Codex), &json!({"x": 1}), &edge),
        json!({})
    );
}
