//! The policy's validation, layering and version.

use super::*;
use serde_json::{json, Value};

#[test]
fn defaults_follow_the_seeds() {
    let p = PolicySet::default().global().clone();
    assert_eq!(
        (
            p.tool.window,
            p.tool.repeat_threshold,
            p.tool.fuzzy_min_chars
        ),
        (6, 3, 50)
    );
    assert_eq!(p.budget.max_tool_rounds, 250);
    assert_eq!(p.reasoning.repeat_span_min, 24);
    assert_eq!(p.reasoning.reasoning_char_limit, 20_000);
    assert_eq!(p.expect.max_retries, 2);
    assert!(p.enabled(Rule::Cycle));
}

#[test]
fn the_policy_version_is_the_effective_policys() {
    let version = |raw: Value| PolicySet::compile(&raw).unwrap().version().to_string();
    let default = version(Value::Null);
    assert_eq!(default.len(), "sha256:".len() + 12, "{default}");
    assert!(default.starts_with("sha256:"));
    assert!(default[7..]
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    // Defaults spelled out, or in another key order, are the same policy.
    assert_eq!(version(json!({})), default);
    assert_eq!(
        version(json!({"budget": {"max_tool_rounds": 250}, "tool": {"window": 6}})),
        default
    );
    assert_eq!(
        version(json!({"tool": {"window": 8, "repeat_threshold": 4}})),
        version(json!({"tool": {"repeat_threshold": 4, "window": 8}}))
    );
    // Any effective change is another version: a threshold, a switch, an override.
    let changed = [
        version(json!({"tool": {"window": 8}})),
        version(json!({"rules": [{"rule": "tool.cycle", "enabled": false}]})),
        version(json!({"overrides": [{"tenant": "acme", "set": {"tool": {"window": 8}}}]})),
        version(json!({"overrides": [{"agent": "acme", "set": {"tool": {"window": 8}}}]})),
    ];
    for (i, v) in changed.iter().enumerate() {
        assert_ne!(*v, default);
        assert!(changed[..i].iter().all(|w| w != v), "{changed:?}");
    }
}

#[test]
fn every_problem_is_reported() {
    let raw = json!({"tool": {"window": 0, "bogus": 1}, "budget": {"near_limit_ratio": 3.0}, "rules": [{"rule": "tool.nope"}]});
    let errs = PolicySet::compile(&raw).unwrap_err();
    assert!(errs.iter().any(|e| e.contains("bogus")), "{errs:?}");
    let raw = json!({"tool": {"window": 0}, "budget": {"near_limit_ratio": 3.0}, "rules": [{"rule": "tool.nope"}]});
    let errs = PolicySet::compile(&raw).unwrap_err();
    assert_eq!(errs.len(), 4, "{errs:?}");
}

#[test]
fn a_tenant_and_an_agent_override_that_clash_together_are_refused() {
    // Valid one by one: window 3 with the default threshold 3, threshold 5 with the
    // default window 6; a session of tenant acme and agent coder would get 5 in 3.
    let raw = json!({
        "overrides": [
            {"tenant": "acme", "set": {"tool": {"window": 3}}},
            {"agent": "coder", "set": {"tool": {"repeat_threshold": 5}}}
        ]
    });
    let errs = PolicySet::compile(&raw).unwrap_err();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].contains("tenant `acme` with agent `coder`")
            && errs[0].contains("repeat_threshold"),
        "{errs:?}"
    );
}

#[test]
fn overrides_apply_by_tenant_then_agent() {
    let raw = json!({
        "budget": {"max_tool_rounds": 20},
        "overrides": [
            {"tenant": "acme", "set": {"budget": {"max_tool_rounds": 30}, "rules": [{"rule": "tool.cycle", "enabled": false}]}},
            {"agent": "coder", "set": {"budget": {"max_tool_rounds": 40}}},
            {"tenant": "acme", "agent": "coder", "set": {"rules": [{"rule": "tool.exact_repeat", "action": "warn"}]}}
        ]
    });
    let mut set = PolicySet::compile(&raw).unwrap();
    assert_eq!(set.resolve(None, None).budget.max_tool_rounds, 20);
    let acme = set.resolve(Some("acme"), None);
    assert_eq!(acme.budget.max_tool_rounds, 30);
    assert!(!acme.enabled(Rule::Cycle));
    let both = set.resolve(Some("acme"), Some("coder"));
    assert_eq!(both.budget.max_tool_rounds, 40);
    assert!(!both.enabled(Rule::Cycle));
    assert_eq!(both.action(Rule::ExactRepeat, Action::Block), Action::Warn);
    assert_eq!(set.resolve(Some("other"), None).budget.max_tool_rounds, 20);
}
