//! Real runs as a healthy control: three OpenHands runs (MIT, see data/real/README.md)
//! converted to the contract's events must get no `tool.*` block or abort.
mod common;

use common::*;
use loopguard::engine::event::{Body, Event, Meta, ToolStatus};
use loopguard::engine::verdict::Action;
use serde_json::Value;

/// Converts one OpenHands record's history into contract events.
fn openhands_events(record: &Value, session: &str) -> Vec<Event> {
    let mut out = Vec::new();
    let mut n = 0;
    let mut push = |ts: &str, body: Body, out: &mut Vec<Event>| {
        n += 1;
        let ts_ms = chrono::NaiveDateTime::parse_from_str(ts, "%Y-%m-%dT%H:%M:%S%.f").unwrap().and_utc().timestamp_millis();
        let meta = Meta { event_id: format!("{session}-{n}"), session_id: session.into(), ts_ms, seq: None, tenant: None, agent: Some("openhands".into()), model: None };
        out.push(Event { meta, body });
    };
    for e in record["history"].as_array().unwrap() {
        let ts = e["timestamp"].as_str().unwrap();
        let id = e["id"].to_string();
        match (e["source"].as_str(), e.get("action").and_then(Value::as_str), e.get("observation").and_then(Value::as_str)) {
            (Some("user"), Some("message"), _) => push(ts, Body::UserMessage { text: e["message"].as_str().unwrap_or("").into() }, &mut out),
            (Some("agent"), Some(action), _) if !["system", "message", "recall", "finish"].contains(&action) => {
                let tool = e["tool_call_metadata"]["function_name"].as_str().unwrap_or(action).to_string();
                let mut args = e["args"].clone();
                if let Some(o) = args.as_object_mut() {
                    o.remove("thought");
                }
                let turn_id = format!("turn-{id}");
                push(ts, Body::ToolCall { turn_id: turn_id.clone(), call_id: id.clone(), tool, args }, &mut out);
                push(ts, Body::TurnEnd { turn_id }, &mut out);
            }
            (_, _, Some(obs)) if e.get("cause").is_some() && obs != "recall" => {
                let call_id = e["cause"].to_string();
                let failed = obs == "error";
                let status = if failed { ToolStatus::Error } else { ToolStatus::Ok };
                let error = failed.then(|| e["content"].as_str().unwrap_or("").chars().take(300).collect());
                push(ts, Body::ToolResult { call_id, tool: obs.into(), status, error, evidence: None }, &mut out);
            }
            _ => {}
        }
    }
    out
}

#[test]
fn openhands_runs_get_no_tool_block() {
    let text = std::fs::read_to_string("tests/data/real/openhands/multi_swe_bench_example_output.jsonl").unwrap();
    let mut runs = 0;
    for (i, line) in text.lines().enumerate() {
        let record: Value = serde_json::from_str(line).unwrap();
        let events = openhands_events(&record, &format!("oh{i}"));
        assert!(events.len() > 20, "converted {} events", events.len());
        let v = run(&events);
        let bad: Vec<_> = v.iter().filter(|v| v.rule.as_str().starts_with("tool.") && matches!(v.action, Action::Block | Action::Abort)).collect();
        assert!(bad.is_empty(), "run {i}: {bad:#?}");
        runs += 1;
    }
    assert_eq!(runs, 3);
}

#[test]
fn issue_excerpts_name_genuine_loops() {
    // The excerpts are prose; this checks they are present and labelled, so the synthetic
    // cases built from them in rules_tools.rs keep their provenance.
    let text = std::fs::read_to_string("tests/data/real/issue-excerpts/issue_loop_excerpts.jsonl").unwrap();
    let genuine = text.lines().filter(|l| serde_json::from_str::<Value>(l).unwrap()["genuine_loop"] == true).count();
    assert!(genuine >= 5);
}
