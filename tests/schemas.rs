//! The contract's JSON Schemas (`docs/schema/`) against what the project writes and shows:
//! every line of the golden fixtures, malformed events and verdicts (refused), the engine's
//! enums of rules, actions and event types, and the JSON examples of docs/contract.md.

mod fixture_files;

use fixture_files::{cases, errors, root, validator};
use jsonschema::Validator;
use loopguard::engine::event::{Event, EVENT_TYPES};
use loopguard::engine::verdict::{Action, Rule};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;

fn validate_lines(v: &Validator, path: &Path, failures: &mut String) -> usize {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut n = 0;
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        n += 1;
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        match serde_json::from_str::<Value>(line) {
            Ok(value) => {
                let errs = errors(v, &value);
                if !errs.is_empty() {
                    let _ = write!(failures, "  {file}:{}:\n{errs}", i + 1);
                }
            }
            Err(e) => {
                let _ = writeln!(failures, "  {file}:{}: not JSON: {e}", i + 1);
            }
        }
    }
    n
}

#[test]
fn fixture_lines_match_the_schemas() {
    let events = validator("event.schema.json");
    let verdicts = validator("verdict.schema.json");
    let mut failures = String::new();
    let (mut n_events, mut n_verdicts) = (0, 0);
    for (_, events_path, verdicts_path) in cases() {
        n_events += validate_lines(&events, &events_path, &mut failures);
        n_verdicts += validate_lines(&verdicts, &verdicts_path, &mut failures);
    }
    let example = root().join("examples/fleet.events.jsonl");
    if example.exists() {
        n_events += validate_lines(&events, &example, &mut failures);
    }
    assert!(failures.is_empty(), "schema violations:\n{failures}");
    assert!(
        n_events > 100 && n_verdicts > 10,
        "{n_events} events, {n_verdicts} verdicts"
    );
}

/// Valid events pass the schema; malformed ones (a missing `turn_id`, a wrong `v`, …) do not.
/// Each case also records whether the engine's decoder refuses it: where it does not, the
/// schema is stricter on purpose (docs/decisions.md, "The schema is stricter").
#[test]
fn schema_rejects_malformed_events() {
    let v = validator("event.schema.json");
    let base = json!({"v": 1, "event_id": "e1", "session_id": "s1", "ts": 1767225600000i64});
    // The base event with `fields` set; a `null` removes the field instead.
    let with = |fields: Value| {
        let mut e = base.clone();
        for (k, x) in fields.as_object().unwrap() {
            if x.is_null() {
                e.as_object_mut().unwrap().remove(k);
            } else {
                e[k] = x.clone();
            }
        }
        e
    };
    let call = with(
        json!({"type": "tool_call", "turn_id": "t1", "call_id": "c1", "tool": "read_file", "args": {"path": "a"}}),
    );
    let accepted = [
        call.clone(),
        with(
            json!({"type": "content", "turn_id": "t1", "text": "hi", "ts": "2026-01-01T08:00:00.5+08:00"}),
        ),
        with(json!({"type": "telemetry"})),
        with(json!({"type": "telemetry", "anything": [1, 2]})),
        with(json!({"type": "compaction"})),
        with(json!({"type": "reasoning", "turn_id": "t", "text": "x", "final": true})),
        with(
            json!({"type": "tool_result", "call_id": "c1", "tool": "t", "status": "ok", "evidence": {"effect": "read", "read_range": [0, 10], "new_info": false}}),
        ),
        with(
            json!({"type": "turn_end", "turn_id": "t1", "usage": {"input_tokens": 1200, "output_tokens": 0, "cost": 0.004}}),
        ),
        with(json!({"type": "turn_end", "turn_id": "t1", "usage": {}})),
        with(
            json!({"type": "assistant_message", "turn_id": "t1", "text": "ok", "usage": {"output_tokens": 100000000, "cost": 1000000}}),
        ),
    ];
    for e in &accepted {
        assert_eq!(errors(&v, e), "", "should pass: {e}");
        assert!(
            Event::decode(e.to_string().as_bytes()).is_ok(),
            "decoder refuses {e}"
        );
    }
    // (event, why it is wrong, whether the engine's decoder also refuses it)
    let rejected = [
        (
            with(json!({"type": "tool_call", "call_id": "c1", "tool": "t", "args": {}})),
            "tool_call without turn_id",
            true,
        ),
        (
            with(json!({"type": "reasoning", "text": "x"})),
            "reasoning without turn_id",
            true,
        ),
        (
            with(json!({"type": "turn_end"})),
            "turn_end without turn_id",
            true,
        ),
        (
            with(json!({"type": "content", "turn_id": "t"})),
            "content without text",
            true,
        ),
        (
            with(json!({"type": "tool_result", "call_id": "c", "tool": "t"})),
            "tool_result without status",
            true,
        ),
        (
            with(json!({"type": "tool_result", "call_id": "c", "tool": "t", "status": "maybe"})),
            "unknown status",
            true,
        ),
        (
            with(json!({"type": "user_message"})),
            "user_message without text",
            true,
        ),
        (
            with(json!({"type": "compaction", "v": 2})),
            "wrong contract version",
            true,
        ),
        (
            with(json!({"type": "compaction", "v": "1"})),
            "version as a string",
            true,
        ),
        (
            with(json!({"type": "compaction", "v": null})),
            "no version",
            true,
        ),
        (
            with(json!({"type": "compaction", "event_id": ""})),
            "empty event_id",
            true,
        ),
        (
            with(json!({"type": "compaction", "event_id": "x".repeat(129)})),
            "event_id over 128 chars",
            true,
        ),
        (
            with(json!({"type": "compaction", "session_id": null})),
            "no session_id",
            true,
        ),
        (
            with(json!({"type": "compaction", "ts": "yesterday"})),
            "ts not RFC 3339",
            true,
        ),
        (
            with(json!({"type": "compaction", "ts": 1.5})),
            "ts not an integer",
            true,
        ),
        (with(json!({"type": null})), "no type", true),
        (
            with(
                json!({"type": "tool_call", "turn_id": "t", "call_id": "c", "tool": "", "args": {}}),
            ),
            "empty tool name",
            true,
        ),
        (
            with(json!({"type": "turn_end", "turn_id": "t", "usage": {"input_tokens": -1}})),
            "negative input_tokens",
            true,
        ),
        (
            with(
                json!({"type": "turn_end", "turn_id": "t", "usage": {"output_tokens": 100000001}}),
            ),
            "output_tokens over 100,000,000",
            true,
        ),
        (
            with(json!({"type": "turn_end", "turn_id": "t", "usage": {"output_tokens": 1.5}})),
            "fractional output_tokens",
            true,
        ),
        (
            with(
                json!({"type": "assistant_message", "turn_id": "t", "text": "x", "usage": {"cost": "0.1"}}),
            ),
            "cost as a string",
            true,
        ),
        (
            with(
                json!({"type": "assistant_message", "turn_id": "t", "text": "x", "usage": {"cost": -0.01}}),
            ),
            "negative cost",
            true,
        ),
        (
            with(json!({"type": "turn_end", "turn_id": "t", "usage": [1, 2]})),
            "usage not an object",
            true,
        ),
        // The schema is stricter than the decoder here (docs/decisions.md).
        (
            with(json!({"type": "tool_call", "turn_id": "t", "call_id": "c", "tool": "t"})),
            "tool_call without args",
            false,
        ),
        (
            with(json!({"type": "assistant_message", "turn_id": "t"})),
            "assistant_message without text",
            false,
        ),
        (
            with(
                json!({"type": "tool_result", "call_id": "c", "tool": "t", "status": "ok", "evidence": {"effect": "teleport"}}),
            ),
            "unknown effect",
            false,
        ),
    ];
    for (e, why, decoder_refuses) in &rejected {
        assert!(!v.is_valid(e), "schema accepts {why}: {e}");
        assert_eq!(
            Event::decode(e.to_string().as_bytes()).is_err(),
            *decoder_refuses,
            "decoder disagrees on {why}"
        );
    }
}

#[test]
fn schema_rejects_malformed_verdicts() {
    let v = validator("verdict.schema.json");
    let good = json!({
        "v": 1, "verdict_id": "0123456789abcdef0123456789abcdef", "session_id": "s", "turn_id": "t3",
        "event_id": "e9", "ts": "2026-01-01T00:00:01.000Z", "emitted_at": "2026-01-01T00:00:01.020Z",
        "action": "block", "rule": "tool.exact_repeat", "message": "Blocked.",
        "directives": {"stop_tool_calls": true}, "attempt": 1,
        "evidence": {"tool": "bash", "count": 3, "window": 6, "args_hash": "00ff00ff00ff00ff"},
        "enforce": true, "policy_version": "sha256:0123456789ab"
    });
    assert_eq!(errors(&v, &good), "");
    let mut observed = good.clone();
    observed["enforce"] = json!(false);
    observed["loop_cost"] = json!({"tokens": 48000, "seconds": 12.5, "cost": 0.31});
    assert_eq!(errors(&v, &observed), "");
    let mut bad = Vec::new();
    for (k, x) in [
        ("rule", json!("tool.bogus")),
        ("action", json!("kill")),
        ("attempt", json!(0)),
        ("verdict_id", json!("not-hex")),
        ("ts", json!(1767225601000i64)),
        ("directives", json!({})),
        ("directives", json!({"stop_tool_calls": false})),
        ("evidence", json!({"count": 3})),
        ("surprise", json!(1)),
        ("enforce", json!("yes")),
        ("policy_version", json!("v1")),
        ("loop_cost", json!({"tokens": -1})),
        ("loop_cost", json!({"dollars": 1})),
    ] {
        let mut x2 = good.clone();
        x2[k] = x;
        bad.push(x2);
    }
    for field in ["message", "enforce", "policy_version"] {
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove(field);
        bad.push(missing);
    }
    for b in &bad {
        assert!(!v.is_valid(b), "schema accepts {b}");
    }
}

/// The schemas' enums are the engine's: a rule, action or event type added to one must be
/// added to the other.
#[test]
fn schema_enums_match_the_engine() {
    let read = |name: &str| -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(root().join("docs/schema").join(name)).unwrap(),
        )
        .unwrap()
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let verdict = read("verdict.schema.json");
    let rules: Vec<String> = Rule::ALL.iter().map(|r| r.as_str().to_string()).collect();
    assert_eq!(strings(&verdict["properties"]["rule"]["enum"]), rules);
    let actions: Vec<String> = Action::ALL.iter().map(|a| a.as_str().to_string()).collect();
    assert_eq!(strings(&verdict["properties"]["action"]["enum"]), actions);
    let event = read("event.schema.json");
    assert_eq!(
        strings(&event["$defs"]["known_type"]["enum"]),
        EVENT_TYPES.to_vec()
    );
}

/// The JSON examples of docs/contract.md are valid events and verdicts, and each verdict's
/// id is the one the engine derives.
#[test]
fn contract_doc_examples_match_the_schemas() {
    let events = validator("event.schema.json");
    let verdicts = validator("verdict.schema.json");
    let doc = std::fs::read_to_string(root().join("docs/contract.md")).unwrap();
    let mut values = Vec::new();
    for block in doc.split("```json\n").skip(1) {
        let block = block.split("\n```").next().unwrap_or_default();
        match serde_json::from_str::<Value>(block) {
            Ok(v) => values.push(v),
            Err(_) => {
                values.extend(block.lines().map(|l| {
                    serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"))
                }))
            }
        }
    }
    let markers = validator("judged.schema.json");
    let mut failures = String::new();
    let (mut n_events, mut n_verdicts, mut n_markers) = (0, 0, 0);
    for v in &values {
        if v.get("kind").is_some_and(|k| k == "judged") {
            n_markers += 1;
            let _ = write!(failures, "{}", errors(&markers, v));
        } else if v.get("verdict_id").is_some() && v.get("type").is_none() {
            n_verdicts += 1;
            let _ = write!(failures, "{}", errors(&verdicts, v));
            let rule = Rule::from_name(v["rule"].as_str().unwrap()).unwrap();
            let id = loopguard::engine::verdict::verdict_id(
                v["session_id"].as_str().unwrap(),
                v["event_id"].as_str().unwrap(),
                rule,
                v["attempt"].as_u64().unwrap() as u32,
            );
            assert_eq!(v["verdict_id"], id, "verdict id in the doc");
        } else {
            n_events += 1;
            let _ = write!(failures, "{}", errors(&events, v));
            assert!(
                Event::decode(v.to_string().as_bytes()).is_ok(),
                "decoder refuses {v}"
            );
        }
    }
    assert!(
        failures.is_empty(),
        "docs/contract.md examples:\n{failures}"
    );
    assert!(
        n_events >= 10 && n_verdicts >= 3 && n_markers >= 1,
        "{n_events} events, {n_verdicts} verdicts, {n_markers} markers"
    );
}
