//! Rule modes (enforce, observe, off) as the engine applies them: an observe-mode rule says
//! exactly what it would say enforced, with `enforce: false`; an `off` rule says nothing;
//! the policy-wide `mode` is a ceiling per tenant/agent; a live policy change keeps every
//! session's state. `tests/fixtures/policy/NAME.policy.json` with `NAME.verdicts.jsonl` is
//! a golden replay of examples/fleet.events.jsonl under that policy
//! (`LOOPGUARD_BLESS=1` rewrites it; every line matches `verdict.schema.json`).

mod fixture_files;

use loopguard::engine::policy::{Mode, ModeSource, PolicySet};
use loopguard::engine::verdict::Rule;
use loopguard::engine::{Engine, Limits};
use loopguard::replay;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn replay_with(policy: &Value, events: &Path) -> Vec<Value> {
    let set = PolicySet::compile(policy).unwrap_or_else(|e| panic!("{e:?}"));
    let mut engine = Engine::new(set, Limits::default());
    let mut out = Vec::new();
    let input = std::io::BufReader::new(std::fs::File::open(events).unwrap());
    let opts = replay::Options {
        strict: true,
        ..Default::default()
    };
    replay::run(&mut engine, input, &mut out, opts, |_| {}).unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn event_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("tests/fixtures"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".events.jsonl"))
        .collect();
    files.sort();
    files.push(root().join("examples/fleet.events.jsonl"));
    files
}

/// Every verdict with `enforce` and `policy_version` taken out.
fn without_mode(verdicts: &[Value]) -> Vec<Value> {
    verdicts
        .iter()
        .map(|v| {
            let mut v = v.clone();
            let o = v.as_object_mut().unwrap();
            o.remove("enforce");
            o.remove("policy_version");
            v
        })
        .collect()
}

#[test]
fn observing_everything_changes_only_the_enforce_flag() {
    let mut seen = 0;
    for events in event_files() {
        let enforced = replay_with(&Value::Null, &events);
        let observed = replay_with(&json!({"mode": "observe"}), &events);
        assert!(enforced.iter().all(|v| v["enforce"] == true), "{events:?}");
        assert!(observed.iter().all(|v| v["enforce"] == false), "{events:?}");
        assert_eq!(
            without_mode(&enforced),
            without_mode(&observed),
            "{events:?}"
        );
        seen += observed.len();
    }
    assert!(seen >= 40, "only {seen} verdicts over the fixtures");
}

#[test]
fn an_observed_rule_is_marked_and_an_off_rule_is_silent() {
    let fleet = root().join("examples/fleet.events.jsonl");
    let policy = json!({"rules": [
        {"rule": "tool.exact_repeat", "mode": "observe"},
        {"rule": "content.repeat", "mode": "off"}
    ]});
    let all = replay_with(&Value::Null, &fleet);
    let got = replay_with(&policy, &fleet);
    let rules = |vs: &[Value], rule: &str| vs.iter().filter(|v| v["rule"] == rule).count();
    assert_eq!(rules(&all, "content.repeat"), 2);
    assert_eq!(rules(&got, "content.repeat"), 0);
    assert_eq!(rules(&got, "tool.exact_repeat"), 2);
    for v in &got {
        let observed = v["rule"] == "tool.exact_repeat";
        assert_eq!(v["enforce"], !observed, "{v}");
    }
    assert_eq!(got.len(), all.len() - 2);
}

#[test]
fn the_observe_policy_golden_file() {
    let dir = root().join("tests/fixtures/policy");
    let mut cases = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".policy.json"))
        else {
            continue;
        };
        cases += 1;
        let policy: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let verdicts = replay_with(&policy, &root().join("examples/fleet.events.jsonl"));
        let text: String = verdicts.iter().map(|v| format!("{v}\n")).collect();
        let expected = dir.join(format!("{name}.verdicts.jsonl"));
        if std::env::var("LOOPGUARD_BLESS").is_ok_and(|v| v == "1") {
            std::fs::write(&expected, &text).unwrap();
        }
        assert_eq!(
            std::fs::read_to_string(&expected).unwrap(),
            text,
            "{name}: LOOPGUARD_BLESS=1 rewrites it after review"
        );
        let schema = fixture_files::validator("verdict.schema.json");
        for v in &verdicts {
            let errs = fixture_files::errors(&schema, v);
            assert!(errs.is_empty(), "{name}: {v}\n{errs}");
        }
        assert!(
            verdicts.iter().any(|v| v["enforce"] == false)
                && verdicts.iter().any(|v| v["enforce"] == true),
            "{name}: the case shows both modes"
        );
    }
    assert!(cases >= 1);
}

#[test]
fn the_mode_and_where_it_came_from() {
    let mut set = PolicySet::compile(&json!({
        "rules": [{"rule": "tool.cycle", "mode": "observe"}],
        "overrides": [
            {"tenant": "acme", "set": {"mode": "observe"}},
            {"agent": "coder", "set": {"rules": [{"rule": "tool.cycle", "enabled": false}]}},
            {"tenant": "acme", "agent": "coder", "set": {"rules": [{"rule": "tool.exact_repeat", "mode": "off"}]}}
        ]
    }))
    .unwrap();
    use Mode::*;
    use ModeSource as S;
    let mut at = |t: Option<&str>, a: Option<&str>, r: Rule| set.mode_of(t, a, r);
    assert_eq!(at(None, None, Rule::ExactRepeat), (Enforce, S::Default));
    assert_eq!(at(None, None, Rule::Cycle), (Observe, S::Policy));
    assert_eq!(
        at(Some("acme"), None, Rule::ExactRepeat),
        (Observe, S::Tenant)
    );
    assert_eq!(
        at(Some("other"), Some("coder"), Rule::Cycle),
        (Off, S::Agent)
    );
    assert_eq!(
        at(Some("acme"), Some("coder"), Rule::ExactRepeat),
        (Off, S::TenantAgent)
    );
    assert_eq!(
        at(Some("acme"), Some("coder"), Rule::Cycle),
        (Off, S::Agent)
    );
}

#[test]
fn a_mode_that_contradicts_enabled_is_refused_with_its_key() {
    let errs = PolicySet::compile(&json!({
        "rules": [{"rule": "tool.cycle", "enabled": false, "mode": "observe"}]
    }))
    .unwrap_err();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].contains("tool.cycle") && errs[0].contains("mode"),
        "{errs:?}"
    );
    let errs = PolicySet::compile(&json!({"mode": "watch"})).unwrap_err();
    assert!(errs[0].starts_with("policy.mode:"), "{errs:?}");
    let errs = PolicySet::compile(&json!({
        "overrides": [{"tenant": "a", "set": {"rules": [{"rule": "tool.cycle", "mode": 3}]}}]
    }))
    .unwrap_err();
    assert!(
        errs[0].starts_with("policy.overrides[0].set.rules[0].mode:"),
        "{errs:?}"
    );
}

#[test]
fn modes_change_the_version_and_enforce_spelled_out_does_not() {
    let version = |v: Value| PolicySet::compile(&v).unwrap().version().to_string();
    let default = version(Value::Null);
    assert_eq!(version(json!({"mode": "enforce"})), default);
    assert_ne!(version(json!({"mode": "observe"})), default);
    assert_ne!(
        version(json!({"rules": [{"rule": "tool.cycle", "mode": "observe"}]})),
        default
    );
}

/// A policy switched mid-stream (thresholds, modes) keeps every session's state: from the
/// switch on, verdicts carry the new version; a switch to the same policy changes nothing.
#[test]
fn a_live_policy_change_keeps_sessions_and_stamps_the_new_version() {
    let observe = PolicySet::compile(&json!({"mode": "observe", "tool": {"window": 8}})).unwrap();
    for events in event_files() {
        let text = std::fs::read_to_string(&events).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let run = |switch_at: Option<usize>, to: &PolicySet| {
            let mut engine = Engine::new(PolicySet::default(), Limits::default());
            let mut out = Vec::new();
            for (i, line) in lines.iter().enumerate() {
                if switch_at == Some(i) {
                    engine.set_policies(to.clone());
                }
                let event = loopguard::engine::event::Event::decode(line.as_bytes()).unwrap();
                let before = out.len();
                engine.handle_event(event, &mut out);
                for v in &out[before..] {
                    assert_eq!(v.policy_version, engine.policy_version());
                    assert_eq!(
                        v.enforce,
                        engine.policy_version() == PolicySet::default().version()
                    );
                }
            }
            out
        };
        let half = lines.len() / 2;
        assert_eq!(run(None, &observe).len(), run(None, &observe).len());
        assert_eq!(
            run(Some(half), &PolicySet::default()),
            run(None, &PolicySet::default()),
            "{events:?}"
        );
        run(Some(half), &observe);
        run(Some(1), &observe);
    }
}
