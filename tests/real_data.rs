//! Real runs: three OpenHands runs (MIT, see data/real/README.md) converted to the
//! contract's events, a healthy control that gets no block on work; and the 24 labelled
//! agent sessions of data/real/agent-traces, every one judged against its label
//! (`agent_traces`).
#[path = "real_data/agent_traces.rs"]
mod agent_traces;
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
        let ts_ms = chrono::NaiveDateTime::parse_from_str(ts, "%Y-%m-%dT%H:%M:%S%.f")
            .unwrap()
            .and_utc()
            .timestamp_millis();
        let meta = Meta {
            event_id: format!("{session}-{n}"),
            session_id: session.into(),
            ts_ms,
            seq: None,
            tenant: None,
            agent: Some("openhands".into()),
            model: None,
        };
        out.push(Event { meta, body });
    };
    for e in record["history"].as_array().unwrap() {
        let ts = e["timestamp"].as_str().unwrap();
        let id = e["id"].to_string();
        match (
            e["source"].as_str(),
            e.get("action").and_then(Value::as_str),
            e.get("observation").and_then(Value::as_str),
        ) {
            (Some("user"), Some("message"), _) => push(
                ts,
                Body::UserMessage {
                    text: e["message"].as_str().unwrap_or("").into(),
                    limits: Default::default(),
                },
                &mut out,
            ),
            (Some("agent"), Some(action), _)
                if !["system", "message", "recall", "finish"].contains(&action) =>
            {
                let tool = e["tool_call_metadata"]["function_name"]
                    .as_str()
                    .unwrap_or(action)
                    .to_string();
                let mut args = e["args"].clone();
                if let Some(o) = args.as_object_mut() {
                    o.remove("thought");
                }
                let turn_id = format!("turn-{id}");
                push(
                    ts,
                    Body::ToolCall {
                        turn_id: turn_id.clone(),
                        call_id: id.clone(),
                        tool,
                        args,
                    },
                    &mut out,
                );
                push(
                    ts,
                    Body::TurnEnd {
                        turn_id,
                        usage: None,
                    },
                    &mut out,
                );
            }
            (_, _, Some(obs)) if e.get("cause").is_some() && obs != "recall" => {
                let call_id = e["cause"].to_string();
                let failed = obs == "error";
                let status = if failed {
                    ToolStatus::Error
                } else {
                    ToolStatus::Ok
                };
                let content = e["content"].as_str().unwrap_or("");
                // What a runtime would report: failures from the tool's own error prefix, and
                // a hash of the observation so polling that sees change is recognised.
                let failed = failed || content.starts_with("ERROR:");
                let status = if failed { ToolStatus::Error } else { status };
                let error = failed.then(|| content.chars().take(300).collect());
                let evidence = serde_json::from_value(serde_json::json!({"output_hash": format!("{:016x}", loopguard::engine::canon::hash64(content.as_bytes()))})).ok();
                push(
                    ts,
                    Body::ToolResult {
                        call_id,
                        tool: obs.into(),
                        status,
                        error,
                        evidence,
                    },
                    &mut out,
                );
            }
            _ => {}
        }
    }
    out
}

/// The OpenHands runs have no tight loop (at most 2 identical actions in a row), and the
/// guard must not block their work: exploring directories, distinct searches, paging with
/// `view_range`, edits. It does block two calls, each the third identical try, in an
/// unchanged file, of a call whose earlier tries failed with the same error or returned
/// the very same output: seed 000's doom loop ("3 times in the last 6 calls"), which the
/// sample's note does not count because the repeats are not back to back. Two more, which
/// came after a successful edit of the file, are steered instead of blocked (decisions.md,
/// (c) and (z)).
#[test]
fn openhands_runs_get_no_tool_block_on_work() {
    let text =
        std::fs::read_to_string("tests/data/real/openhands/multi_swe_bench_example_output.jsonl")
            .unwrap();
    let mut blocked = Vec::new();
    let mut steered = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let record: Value = serde_json::from_str(line).unwrap();
        let events = openhands_events(&record, &format!("oh{i}"));
        assert!(events.len() > 20, "converted {} events", events.len());
        let v = run(&events);
        // Steers, by the call they concern (a result's call, or the call itself).
        for x in v.iter().filter(|v| v.action == Action::Steer) {
            let call = events
                .iter()
                .find(|e| e.meta.event_id == x.event_id)
                .and_then(|e| match &e.body {
                    Body::ToolCall { call_id, .. } | Body::ToolResult { call_id, .. } => {
                        Some(call_id.clone())
                    }
                    _ => None,
                })
                .unwrap_or_default();
            steered.push(format!("{i}:{call}:{}", x.rule.as_str()));
        }
        for b in v.iter().filter(|v| {
            v.rule.as_str().starts_with("tool.")
                && matches!(v.action, Action::Block | Action::Abort)
        }) {
            let at = events
                .iter()
                .position(|e| e.meta.event_id == b.event_id)
                .unwrap();
            let Body::ToolCall {
                call_id,
                tool,
                args,
                ..
            } = &events[at].body
            else {
                panic!("block on a non-call")
            };
            // The earlier tries of this call in the window of 6: the same args, or for a fuzzy
            // match the same tool, command and path.
            let same = |a: &Value| {
                if b.rule.as_str() == "tool.exact_repeat" {
                    a == args
                } else {
                    a["command"] == args["command"] && a["path"] == args["path"]
                }
            };
            let earlier: Vec<&str> = events[..at]
                .iter()
                .rev()
                .filter_map(|e| match &e.body {
                    Body::ToolCall { call_id, .. } => Some((call_id.as_str(), &e.body)),
                    _ => None,
                })
                .take(5)
                .filter_map(|(c, body)| match body {
                    Body::ToolCall {
                        tool: t, args: a, ..
                    } if t == tool && same(a) => Some(c),
                    _ => None,
                })
                .take(2)
                .collect();
            assert_eq!(earlier.len(), 2, "run {i}: call {call_id}");
            let outcomes: Vec<String> = earlier
                .iter()
                .map(|c| {
                    events
                        .iter()
                        .find_map(|e| match &e.body {
                            Body::ToolResult {
                                call_id,
                                status: ToolStatus::Error,
                                error,
                                ..
                            } if call_id == c => {
                                Some(format!("error:{}", error.clone().unwrap_or_default()))
                            }
                            Body::ToolResult {
                                call_id, evidence, ..
                            } if call_id == c => Some(format!(
                                "ok:{:?}",
                                evidence.as_ref().and_then(|x| x.output_hash.clone())
                            )),
                            _ => None,
                        })
                        .unwrap()
                })
                .collect();
            let no_new_information = outcomes.iter().all(|o| o.starts_with("error:"))
                || outcomes.windows(2).all(|w| w[0] == w[1]);
            // Run 2's fuzzy block (call 51) ends an edit that oscillates: call 43 inserts an
            // `if (ast_id(pattern_type) == TK_ISO)` line, 45 removes it, 47 and 51 try to put
            // it back (47 failed). The tries differ, so only exact repeats are held to this.
            assert!(
                no_new_information || b.rule.as_str() == "tool.fuzzy_repeat",
                "run {i}: call {call_id} blocked although earlier tries differed: {outcomes:?}"
            );
            blocked.push(format!("{i}:{call_id}:{}", b.rule.as_str()));
        }
    }
    assert_eq!(
        blocked,
        ["0:21:tool.exact_repeat", "1:48:tool.exact_repeat"]
    );
    // Run 1's str_replace of calls 60, 66 and 68 fails the same way each time; an insert
    // (64) succeeded between 60 and 66, so 68 is no longer the third try in an unchanged
    // file (no block), and the failure is steered once (below). 48's
    // failure is the third in a row (its call was blocked too: the recorded run ran it).
    // 60, a third near-identical str_replace after two whose errors differed, was steered
    // before issue 20: each earlier try got an answer of its own, so it is not (item 3).
    // Since issue 20's items 1 and 4 the same failure with the arguments varying counts:
    // run 1's steer comes at 66, the third str_replace whose `old_str` "did not appear
    // verbatim" (the old_str echoed in the error aside), and 68 says nothing more (one steer
    // per failure); run 2's at 47, the third str_replace rejected for an `old_str` that is
    // not unique, each time a different one.
    assert_eq!(
        steered,
        [
            "1:48:tool.error_repeat",
            "1:66:tool.error_repeat",
            "2:47:tool.error_repeat"
        ]
    );
}

#[test]
fn issue_excerpts_name_genuine_loops() {
    // The excerpts are prose; this checks they are present and labelled, so the synthetic
    // cases built from them in rules_tools.rs keep their provenance.
    let text = std::fs::read_to_string("tests/data/real/issue-excerpts/issue_loop_excerpts.jsonl")
        .unwrap();
    let genuine = text
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).unwrap()["genuine_loop"] == true)
        .count();
    assert!(genuine >= 5);
}
