//! The other tool-call rules (cycles, repeated errors, near-duplicates, no change, progress,
//! budgets, policy switches) fire exactly at their threshold, and never on the work users do.
mod common;

use common::*;
use loopguard::engine::verdict::{Action, Rule};
use serde_json::json;

/// Issue 20 (8): a short, fixed error text the tool keeps returning for different actions is
/// one failure, not three unrelated ones.
#[test]
fn a_short_fixed_error_for_different_actions_is_the_same_failure() {
    let mut s = Script::new("s");
    s.user("Buy the cheapest red mug.");
    let mut results = Vec::new();
    for action in ["click[Buy Now]", "click[buy now]", "click[Add to cart]"] {
        s.new_turn();
        let (_, call) = s.call("webshop", json!({"action": action}));
        s.turn_end();
        results.push(s.result(&call, "webshop", false, Some("Invalid action!"), None));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::ErrorRepeat);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(
        (hits[0].event_id.as_str(), hits[0].action),
        (results[2].as_str(), Action::Steer)
    );
}

#[test]
fn cycle_of_three_is_steered_at_the_ninth_call() {
    let mut s = Script::new("s");
    s.user("make tests pass");
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(s.round("edit_file", json!({"path": "a.rs", "patch": "x"}), None));
        ids.push(s.round("run_tests", json!({}), None));
        ids.push(s.round("git_diff", json!({}), None));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::Cycle);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].event_id, ids[8]);
    assert_eq!(hits[0].action, Action::Steer);
    assert!(
        of_rule(&v, Rule::ExactRepeat).is_empty(),
        "window of 6 cannot see a period of 3"
    );
}

#[test]
fn error_repeat_steers_at_the_third_identical_failure() {
    let mut s = Script::new("s");
    s.user("build");
    let mut results = Vec::new();
    for i in 0..3 {
        s.new_turn();
        let (_, c) = s.call("bash", json!({"cmd": format!("make -j{i}")}));
        s.turn_end();
        results.push(s.result(
            &c,
            "bash",
            false,
            Some("error: linker `cc` not found"),
            None,
        ));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::ErrorRepeat);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].event_id, results[2]);
}

#[test]
fn near_duplicate_warns_once_at_six() {
    let mut s = Script::new("s");
    s.user("query");
    let mut ids = Vec::new();
    for i in 0..9 {
        ids.push(s.round(
            "api",
            json!({"q": "x", "request_id": format!("r{i}")}),
            None,
        ));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::NearDuplicate);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].event_id, ids[5]);
    assert_eq!(hits[0].action, Action::Warn);
}

#[test]
fn no_change_steers_at_three_rounds_and_aborts_at_five() {
    // Three calls per round keep the identical call under exact_repeat's window.
    let mut s = Script::new("s");
    s.user("apply the migration");
    let mut last_results = Vec::new();
    for r in 0..5 {
        s.new_turn();
        let (_, c1) = s.call("apply_migration", json!({"name": "m1"}));
        let (_, c2) = s.call("read_file", json!({"path": format!("notes{r}")}));
        let (_, c3) = s.call("list_dir", json!({"path": format!("d{r}")}));
        s.turn_end();
        s.result(&c2, "read_file", true, None, None);
        s.result(&c3, "list_dir", true, None, None);
        last_results.push(s.result(
            &c1,
            "apply_migration",
            true,
            None,
            Some(ev(
                json!({"effect": "mutation", "state_before": "h", "state_after": "h"}),
            )),
        ));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::NoChange);
    assert_eq!(hits.len(), 2, "{v:#?}");
    assert_eq!(
        (hits[0].event_id.as_str(), hits[0].action),
        (last_results[2].as_str(), Action::Steer)
    );
    assert_eq!(
        (hits[1].event_id.as_str(), hits[1].action, hits[1].attempt),
        (last_results[4].as_str(), Action::Abort, 2)
    );
    assert!(of_rule(&v, Rule::ExactRepeat).is_empty());
}

#[test]
fn no_change_needs_evidence_unknown_never_counts() {
    let mut s = Script::new("s");
    s.user("x");
    for r in 0..5 {
        s.new_turn();
        let (_, c1) = s.call("apply_migration", json!({"name": "m1"}));
        let (_, c2) = s.call("read_file", json!({"path": format!("n{r}")}));
        let (_, c3) = s.call("list_dir", json!({"path": format!("d{r}")}));
        s.turn_end();
        s.result(
            &c1,
            "apply_migration",
            true,
            None,
            Some(evidence("unknown")),
        );
        s.result(&c2, "read_file", true, None, None);
        s.result(&c3, "list_dir", true, None, None);
    }
    let v = run(&s.events);
    assert!(of_rule(&v, Rule::NoChange).is_empty());
    assert!(
        of_rule(&v, Rule::NoProgress).is_empty(),
        "unknown rounds never count as no progress"
    );
}

#[test]
fn no_progress_warns_once_after_two_empty_rounds() {
    let mut s = Script::new("s");
    s.user("find the bug");
    let mut closing = Vec::new();
    for i in 0..4 {
        s.new_turn();
        let (_, c) = s.call("search", json!({"q": format!("term{i}")}));
        s.turn_end();
        closing.push(s.result(
            &c,
            "search",
            true,
            None,
            Some(ev(json!({"effect": "read", "new_info": false}))),
        ));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::NoProgress);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].event_id, closing[1]);
}

#[test]
fn discovery_only_warns_at_the_eighth_round() {
    // Seed 004's 8 rounds, in a request whose runtime announces seed 000's 15-round budget
    // (with the fleet default of 250 the streak needed is 25: tests/rules_real_traffic.rs).
    let mut s = Script::new("s");
    s.user_with_budget("understand the codebase", 15);
    let mut closing = Vec::new();
    for i in 0..10 {
        s.new_turn();
        let (_, c) = s.call("read_file", json!({"path": format!("src/f{i}.rs")}));
        s.turn_end();
        closing.push(s.result(&c, "read_file", true, None, None));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::DiscoveryOnly);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].event_id, closing[7]);
}

#[test]
fn budget_aborts_the_sixteenth_round_and_warns_at_twelve() {
    // Seed 000's behaviour when its runtime announces its own 15 rounds.
    let mut s = Script::new("s");
    s.user_with_budget("big task", 15);
    let mut calls = Vec::new();
    for i in 0..16 {
        calls.push(s.round(
            if i % 2 == 0 { "edit_file" } else { "run_tests" },
            json!({"step": i}),
            None,
        ));
    }
    let v = run(&s.events);
    let abort = of_rule(&v, Rule::ToolRounds);
    assert_eq!(abort.len(), 1);
    assert_eq!(abort[0].event_id, calls[15]);
    assert_eq!(abort[0].action, Action::Abort);
    let near = of_rule(&v, Rule::NearLimit);
    assert_eq!(near.len(), 1);
    assert_eq!(near[0].event_id, calls[11]);
}

#[test]
fn healthy_fourteen_round_request_is_never_blocked() {
    let mut s = Script::new("s");
    s.user("implement the feature");
    for i in 0..14 {
        let tool = ["read_file", "edit_file", "run_tests"][i % 3];
        let e = if tool == "edit_file" {
            ev(
                json!({"effect": "mutation", "state_before": format!("a{i}"), "state_after": format!("b{i}")}),
            )
        } else {
            ev(json!({"effect": "read", "resource": format!("r{i}")}))
        };
        s.round(tool, json!({"path": format!("src/f{i}.rs")}), Some(e));
    }
    let v = run(&s.events);
    assert!(strong(&v).is_empty(), "{v:#?}");
}

#[test]
fn a_new_user_message_resets_the_budget() {
    let mut s = Script::new("s");
    for req in 0..3 {
        s.user(&format!("request {req}"));
        for i in 0..11 {
            s.round("edit_file", json!({"path": format!("f{req}_{i}")}), None);
        }
    }
    let v = run(&s.events);
    assert!(of_rule(&v, Rule::ToolRounds).is_empty());
    assert!(of_rule(&v, Rule::NearLimit).is_empty());
}

#[test]
fn slow_convergence_warns_once() {
    let mut s = Script::new("s");
    s.user("long task");
    let mut closing = Vec::new();
    for i in 0..10 {
        s.advance(60_000);
        s.new_turn();
        let (_, c) = s.call("search", json!({"q": i}));
        s.turn_end();
        let e = if i < 5 {
            ev(json!({"effect": "read", "new_info": true}))
        } else {
            ev(json!({"effect": "read", "new_info": false}))
        };
        closing.push(s.result(&c, "search", true, None, Some(e)));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::SlowConvergence);
    assert_eq!(hits.len(), 1, "{v:#?}");
    // Round 8 closes 480.2 s into the request (> 8 min), with rounds 6..8 quiet: fires there,
    // not at round 7 (only 7 rounds, 420 s).
    assert_eq!(hits[0].event_id, closing[7]);
}

#[test]
fn compaction_churn_warns_at_two_compactions_and_three_quarters() {
    let mut s = Script::new("s");
    s.user_with_budget("task", 15);
    s.compaction();
    let mut calls = Vec::new();
    for i in 0..13 {
        calls.push(s.round("edit_file", json!({"i": i}), None));
        if i == 5 {
            s.compaction();
        }
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::CompactionChurn);
    assert_eq!(hits.len(), 1);
    assert_eq!(
        hits[0].event_id, calls[11],
        "12 rounds = 75 % of 15, rounded up"
    );
}

#[test]
fn rules_can_be_disabled_or_change_action() {
    let mut s = Script::new("s");
    s.user("x");
    for _ in 0..3 {
        s.round("bash", json!({"cmd": "ls"}), None);
    }
    let off = run_with(
        &json!({"rules": [{"rule": "tool.exact_repeat", "enabled": false}]}),
        &s.events,
    );
    assert!(of_rule(&off, Rule::ExactRepeat).is_empty());
    let warn = run_with(
        &json!({"rules": [{"rule": "tool.exact_repeat", "action": "warn"}]}),
        &s.events,
    );
    assert_eq!(of_rule(&warn, Rule::ExactRepeat)[0].action, Action::Warn);
    let tenant = run_with(
        &json!({"overrides": [{"tenant": "acme", "set": {"tool": {"repeat_threshold": 4}}}]}),
        &s.events,
    );
    assert!(
        of_rule(&tenant, Rule::ExactRepeat).is_empty(),
        "tenant acme needs 4"
    );
}
