//! Golden replays: every `tests/fixtures/NAME.events.jsonl` run through the engine (as
//! `loopguard replay` does) must print exactly `NAME.verdicts.jsonl` (`tests/schemas.rs`
//! checks every line of both against the contract's JSON Schemas).
//!
//! `LOOPGUARD_BLESS=1 cargo test --test golden` rewrites the expected files from the engine's
//! output instead of comparing; read the diff before committing it. The events themselves are
//! written by `scripts/gen_fixtures.py`.

mod fixture_files;

use fixture_files::{cases, errors, root, validator};
use loopguard::engine::policy::PolicySet;
use loopguard::engine::{Engine, Limits};
use loopguard::replay::{self, Summary};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

const MIN_CASES: usize = 12;

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
            ..Default::default()
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
            ..Default::default()
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
