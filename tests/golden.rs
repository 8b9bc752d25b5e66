//! Golden replays: every `tests/fixtures/NAME.events.jsonl` run through the engine (as
//! `loopguard replay` does) must print exactly `NAME.verdicts.jsonl`, and every line of both
//! must match the contract's JSON Schemas in `docs/schema/`.
//!
//! `LOOPGUARD_BLESS=1 cargo test --test golden` rewrites the expected files from the engine's
//! output instead of comparing; read the diff before committing it. The events themselves are
//! written by `scripts/gen_fixtures.py`.

use jsonschema::Validator;
use loopguard::engine::event::{Event, EVENT_TYPES};
use loopguard::engine::policy::PolicySet;
use loopguard::engine::verdict::{Action, Rule};
use loopguard::engine::{Engine, Limits};
use loopguard::replay::{self, Summary};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const MIN_CASES: usize = 12;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The fixture cases, sorted by name: (name, events file, expected verdicts file).
fn cases() -> Vec<(String, PathBuf, PathBuf)> {
    let dir = root().join("tests/fixtures");
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let name = path
                .file_name()?
                .to_str()?
                .strip_suffix(".events.jsonl")?
                .to_string();
            let expected = dir.join(format!("{name}.verdicts.jsonl"));
            Some((name, path, expected))
        })
        .collect();
    out.sort();
    out
}

/// Runs one fixture through a fresh engine with the default policy, as `loopguard replay`.
fn replay_file(events: &Path) -> (String, Summary) {
    let input = std::fs::File::open(events).expect("open fixture");
    let mut engine = Engine::new(PolicySet::default(), Limits::default());
    let mut out = Vec::new();
    let summary = replay::run(
        &mut engine,
        std::io::BufReader::new(input),
        &mut out,
        replay::Options {
            strict: true,
            judged: false,
        },
        |_| {},
    )
    .unwrap_or_else(|e| panic!("{}: {e}", events.display()));
    (String::from_utf8(out).expect("verdicts are UTF-8"), summary)
}

fn bless() -> bool {
    std::env::var("LOOPGUARD_BLESS").is_ok_and(|v| v == "1")
}

/// A readable account of how `actual` differs from `expected`, line by line; for a line
/// present on both sides, the top-level fields that differ.
fn diff(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let mut out = String::new();
    for i in 0..e.len().max(a.len()) {
        match (e.get(i), a.get(i)) {
            (Some(x), Some(y)) if x == y => {}
            (Some(x), Some(y)) => {
                let _ = writeln!(out, "  line {}: differs", i + 1);
                match (
                    serde_json::from_str::<Value>(x),
                    serde_json::from_str::<Value>(y),
                ) {
                    (Ok(Value::Object(x)), Ok(Value::Object(y))) => {
                        let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                        keys.sort();
                        keys.dedup();
                        for k in keys {
                            if x.get(k) != y.get(k) {
                                let show = |v: Option<&Value>| {
                                    v.map_or("(absent)".to_string(), |v| v.to_string())
                                };
                                let _ = writeln!(
                                    out,
                                    "    {k}:\n      expected {}\n      actual   {}",
                                    show(x.get(k)),
                                    show(y.get(k))
                                );
                            }
                        }
                    }
                    _ => {
                        let _ = writeln!(out, "    expected {x}\n    actual   {y}");
                    }
                }
            }
            (Some(x), None) => {
                let _ = writeln!(
                    out,
                    "  line {}: missing from the output\n    expected {x}",
                    i + 1
                );
            }
            (None, Some(y)) => {
                let _ = writeln!(out, "  line {}: unexpected\n    actual   {y}", i + 1);
            }
            (None, None) => {}
        }
    }
    out
}

#[test]
fn fixtures_replay_to_their_golden_verdicts() {
    let cases = cases();
    assert!(
        cases.len() >= MIN_CASES,
        "tests/fixtures holds {} cases; at least {MIN_CASES} are required",
        cases.len()
    );
    let mut failures = String::new();
    for (name, events, expected_path) in &cases {
        let (actual, summary) = replay_file(events);
        assert!(summary.events > 0, "{name}: no event replayed");
        if bless() {
            std::fs::write(expected_path, &actual).expect("write verdicts");
            continue;
        }
        let expected = std::fs::read_to_string(expected_path).unwrap_or_else(|_| {
            panic!(
                "{name}: {} is missing (LOOPGUARD_BLESS=1 writes it)",
                expected_path.display()
            )
        });
        if expected != actual {
            let _ = writeln!(failures, "{name}:\n{}", diff(&expected, &actual));
        }
    }
    assert!(
        failures.is_empty(),
        "replay output differs from the golden files (LOOPGUARD_BLESS=1 rewrites them after \
         review):\n{failures}"
    );
}

#[test]
fn replaying_twice_gives_the_same_bytes() {
    for (name, events, _) in cases() {
        assert_eq!(replay_file(&events).0, replay_file(&events).0, "{name}");
    }
}

#[test]
fn retries_and_unknown_types_are_counted_not_judged() {
    let dir = root().join("tests/fixtures");
    let (out, s) = replay_file(&dir.join("duplicate_event_id.events.jsonl"));
    assert_eq!((s.duplicates, out.as_str()), (2, ""), "producer retries");
    let (_, s) = replay_file(&dir.join("unknown_type.events.jsonl"));
    assert_eq!(s.unknown_types, 6);
    let (_, s) = replay_file(&dir.join("mixed_sessions.events.jsonl"));
    assert_eq!(s.sessions.len(), 3);
}

fn validator(name: &str) -> Validator {
    let path = root().join("docs/schema").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        jsonschema::draft202012::meta::is_valid(&schema),
        "{name} is not a valid draft 2020-12 schema"
    );
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every error of `instance` against `v`, one per line (empty when valid).
fn errors(v: &Validator, instance: &Value) -> String {
    v.iter_errors(instance)
        .map(|e| format!("    at `{}`: {e}\n", e.instance_path))
        .collect()
}

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

/// The fleet example of examples/README.md: verdicts for the four looping sessions only.
#[test]
fn fleet_example_flags_only_the_looping_sessions() {
    let (out, summary) = replay_file(&root().join("examples/fleet.events.jsonl"));
    assert_eq!(summary.sessions.len(), 10);
    let mut flagged: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["session_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    flagged.sort();
    flagged.dedup();
    assert_eq!(
        flagged,
        [
            "loop-chant",
            "loop-portfolio",
            "loop-reasoning",
            "loop-tools"
        ]
    );
    assert_eq!(
        summary.total_verdicts(),
        10,
        "update examples/README.md with the new summary"
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
        } else if v.get("verdict_id").is_some() {
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

/// `replay --judged`: after each event line its verdicts, then a marker covering it; no
/// verdict comes after the marker that covers its event; with the markers taken out, exactly
/// the golden verdicts. `exact_repeat.judged.jsonl` is one fixture's whole expected output,
/// and every marker matches `judged.schema.json`.
#[test]
fn judged_markers_follow_the_verdicts_they_cover() {
    let marker_schema = validator("judged.schema.json");
    let mut failures = String::new();
    for (name, events, expected) in cases() {
        let mut engine = Engine::new(PolicySet::default(), Limits::default());
        let mut out = Vec::new();
        let opts = replay::Options {
            strict: true,
            judged: true,
        };
        let input = std::io::BufReader::new(std::fs::File::open(&events).unwrap());
        replay::run(&mut engine, input, &mut out, opts, |_| {}).unwrap();
        let out = String::from_utf8(out).unwrap();
        let text = std::fs::read_to_string(&events).unwrap();
        // The line (from 1) of each event id, and the numbers of the event lines.
        let mut line_of = std::collections::HashMap::new();
        let mut event_lines = Vec::new();
        for (i, l) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let e: Value = serde_json::from_str(l).unwrap();
            line_of
                .entry(e["event_id"].as_str().unwrap().to_string())
                .or_insert(i + 1);
            event_lines.push(i + 1);
        }
        let (mut markers, mut verdicts) = (Vec::<usize>::new(), String::new());
        for line in out.lines() {
            let value: Value = serde_json::from_str(line).unwrap();
            if value["kind"] == "judged" {
                let errs = errors(&marker_schema, &value);
                assert!(errs.is_empty(), "{name}: {line}\n{errs}");
                markers.push(value["through_offset"].as_u64().unwrap() as usize);
                continue;
            }
            let covered = markers.last().copied().unwrap_or(0);
            let event = value["event_id"].as_str().unwrap();
            if line_of.get(event).is_some_and(|&l| l <= covered) {
                let _ = writeln!(
                    failures,
                    "{name}: a verdict after the marker covering its event: {line}"
                );
            }
            verdicts.push_str(line);
            verdicts.push('\n');
        }
        assert_eq!(
            markers, event_lines,
            "{name}: one marker after each event line"
        );
        assert_eq!(
            verdicts,
            std::fs::read_to_string(&expected).unwrap(),
            "{name}"
        );
        if name == "exact_repeat" {
            let golden = root().join("tests/fixtures/exact_repeat.judged.jsonl");
            if bless() {
                std::fs::write(&golden, &out).unwrap();
            }
            let want = std::fs::read_to_string(&golden).unwrap();
            assert_eq!(out, want, "{name}: the whole output");
        }
    }
    assert!(failures.is_empty(), "{failures}");
}
