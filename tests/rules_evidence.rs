//! Issue 34: each rule's evidence matched to what a person calls a loop. Repeated phrasing
//! between steps that find new things, exploration that keeps turning up new things and
//! failing tries that each tell the agent something are work; the same failure over an
//! enumerated argument, a cycle that goes on after its steer, edits undone and redone, and a
//! failure retried across the user's turns are loops, and a loop that ignores its steer is
//! blocked. Each at its threshold, with the healthy shape next to it.
mod common;

use common::*;
use loopguard::engine::event::Evidence;
use loopguard::engine::verdict::{Action, Rule, Verdict};
use serde_json::{json, Value};

fn out(hash: &str) -> Option<Evidence> {
    Some(ev(json!({"output_hash": hash})))
}

/// One response: a thought, one call, its end and its result (`error` when it failed).
fn step(
    s: &mut Script,
    thought: &str,
    tool: &str,
    args: Value,
    error: Option<&str>,
    hash: &str,
) -> String {
    s.new_turn();
    s.reasoning_final(thought);
    let (id, call) = s.call(tool, args);
    s.turn_end();
    s.result(&call, tool, error.is_none(), error, out(hash));
    id
}

/// One step of a household agent with a single `act` tool.
fn act(s: &mut Script, action: &str, error: Option<&str>, hash: &str) -> String {
    step(
        s,
        "Next step.",
        "act",
        json!({ "action": action }),
        error,
        hash,
    )
}

fn rules(v: &[Verdict]) -> Vec<(&str, &str)> {
    v.iter()
        .map(|v| (v.rule.as_str(), v.action.as_str()))
        .collect()
}

#[test]
fn a_formulaic_thought_between_steps_that_find_new_things_is_not_a_reasoning_loop() {
    let thought = "Now I need to find a mug. Next, I will check the next place.";
    let mut s = Script::new("hh");
    s.user("put a clean mug in the coffee machine");
    for i in 1..=8 {
        let args = json!({"action": format!("go to cabinet {i}")});
        step(&mut s, thought, "act", args, None, &format!("cabinet-{i}"));
    }
    assert_eq!(rules(&run(&s.events)), vec![], "each step saw a new place");
    // The same thought while the steps bring back what was already seen: a loop.
    let mut s = Script::new("hh-stuck");
    s.user("put a clean mug in the coffee machine");
    for i in 1..=4 {
        let args = json!({"action": format!("go to cabinet {}", 1 + i % 2)});
        step(
            &mut s,
            thought,
            "act",
            args,
            None,
            &format!("cabinet-{}", 1 + i % 2),
        );
    }
    let v = run(&s.events);
    assert!(
        v.iter().any(|v| v.rule.as_str().starts_with("reasoning.")),
        "{:?}",
        rules(&v)
    );
}

#[test]
fn a_sweep_that_keeps_finding_new_things_is_not_discovery_only() {
    let sweep = |same: bool| {
        let mut s = Script::new("sweep");
        s.user_with_budget("find the keys", 30);
        for i in 1..=12 {
            let hash = if same {
                "empty".to_string()
            } else {
                format!("drawer-{i}")
            };
            s.round(
                "open",
                json!({"target": format!("drawer {i}")}),
                Some(ev(json!({"effect": "read", "output_hash": hash}))),
            );
        }
        run(&s.events)
    };
    assert_eq!(of_rule(&sweep(false), Rule::DiscoveryOnly).len(), 0);
    // Twelve drawers opened, every one answering as the first did: only reading.
    let stale = sweep(true);
    let warned = of_rule(&stale, Rule::DiscoveryOnly);
    assert_eq!(warned.len(), 1, "{:?}", rules(&stale));
    assert_eq!(warned[0].evidence["rounds"], 8);
}

#[test]
fn the_same_error_over_targets_that_each_tell_something_new_is_exploring() {
    let tries = |outputs: [&str; 4]| {
        let mut s = Script::new("qa");
        s.user("who designed the harbour bridge?");
        for (i, o) in outputs.iter().enumerate() {
            let name = ["North", "Old", "Rask", "Port"][i];
            let args = json!({"command": format!("python lookup.py 'Harbour Bridge {name}'")});
            step(
                &mut s,
                "Let me look it up.",
                "bash",
                args,
                Some("Could not find entity."),
                o,
            );
        }
        run(&s.events)
    };
    assert_eq!(
        rules(&tries(["s1", "s2", "s3", "s4"])),
        vec![],
        "each try listed other names"
    );
    let v = tries(["none", "none", "none", "none"]);
    let steers = of_rule(&v, Rule::ErrorRepeat);
    assert_eq!(steers.len(), 1, "{:?}", rules(&v));
    assert_eq!(steers[0].action, Action::Steer);
    // A tool of its own, reworded, each try listing other names: exploring.
    let mut s = Script::new("qa-tool");
    s.user("who designed the harbour bridge?");
    for (i, name) in ["North", "Old", "Rask"].iter().enumerate() {
        let args = json!({"entity": format!("Harbour Bridge {name}")});
        step(
            &mut s,
            "Search.",
            "search",
            args,
            Some("Could not find entity."),
            &format!("s{i}"),
        );
    }
    assert_eq!(rules(&run(&s.events)), vec![]);
    // An error that quotes the call's own value is about that value: an edit retried with
    // other new text for the same missing old text is the same failure, new outputs or not.
    let mut s = Script::new("edit");
    s.user("fix the parser");
    let old = "return parse(tokens, options, args)";
    for i in 0..3 {
        let args = json!({"command": "str_replace", "path": "p.c", "old_str": old, "new_str": format!("return parse2(tokens, {i})")});
        let error =
            format!("No replacement was performed, old_str `{old}` did not appear verbatim");
        step(
            &mut s,
            "Edit.",
            "edit",
            args,
            Some(&error),
            &format!("o{i}"),
        );
    }
    let v = run(&s.events);
    assert_eq!(rules(&v), vec![("tool.error_repeat", "steer")]);
}

#[test]
fn the_same_failing_action_three_times_in_one_response_steers() {
    // A runtime that keeps one response id for its whole loop: each call follows the
    // previous one's result, so each is a try of its own.
    let mut s = Script::new("one-turn");
    s.user("build it");
    s.new_turn();
    let mut results = Vec::new();
    for _ in 0..3 {
        let (_, call) = s.call("build", json!({"target": "app"}));
        results.push(s.result(
            &call,
            "build",
            false,
            Some("Cannot find module 'left-pad'"),
            None,
        ));
    }
    let v = run(&s.events);
    let steer = of_rule(&v, Rule::ErrorRepeat);
    assert_eq!(steer.len(), 1, "{:?}", rules(&v));
    assert_eq!(steer[0].event_id, results[2]);
    // Calls made together, before any came back, are one try (a plan): no verdict.
    let mut s = Script::new("parallel");
    s.user("look these up");
    s.new_turn();
    let calls: Vec<_> = (0..3)
        .map(|i| s.call("lookup", json!({"name": format!("n{i}")})).1)
        .collect();
    s.turn_end();
    for c in &calls {
        s.result(
            c,
            "lookup",
            false,
            Some("Service unavailable, retry later"),
            None,
        );
    }
    assert_eq!(of_rule(&run(&s.events), Rule::ErrorRepeat).len(), 0);
}

#[test]
fn a_failure_over_an_enumerated_argument_is_steered_then_blocked() {
    let mut s = Script::new("knives");
    s.user("put a knife in the drawer");
    let mut calls = Vec::new();
    for i in 1..=8 {
        calls.push(act(
            &mut s,
            &format!("take knife {i} from countertop 1"),
            Some("Nothing happens."),
            "nothing",
        ));
    }
    let v = run(&s.events);
    let hits: Vec<_> = of_rule(&v, Rule::ErrorRepeat)
        .into_iter()
        .map(|v| (v.action, v.event_id.clone()))
        .collect();
    // Steered at the third failure; two more, then each further take is blocked.
    assert_eq!(hits[0].0, Action::Steer);
    assert_eq!(
        hits[1..].to_vec(),
        vec![
            (Action::Block, calls[5].clone()),
            (Action::Block, calls[6].clone()),
            (Action::Block, calls[7].clone())
        ],
        "{hits:?}"
    );
    // Moving elsewhere is never blocked, and a take that works ends the ladder.
    let mut s = Script::new("knives-ok");
    s.user("put a knife in the drawer");
    for i in 1..=5 {
        act(
            &mut s,
            &format!("take knife {i} from countertop 1"),
            Some("Nothing happens."),
            "nothing",
        );
    }
    let go = act(&mut s, "go to countertop 2", None, "ct2");
    let took = act(&mut s, "take knife 1 from countertop 2", None, "took");
    let after = act(
        &mut s,
        "take knife 2 from countertop 2",
        Some("Nothing happens."),
        "nothing",
    );
    let v = run(&s.events);
    for id in [&go, &after] {
        assert!(
            strong(&v).iter().all(|b| &b.event_id != id),
            "{:?}",
            rules(&v)
        );
    }
    assert!(
        strong(&v).iter().any(|b| b.event_id == took),
        "the 6th take was still blocked"
    );
}

#[test]
fn a_cycle_that_goes_on_after_its_steer_is_blocked_unless_its_answers_change() {
    let cycle = |changing: bool| {
        let mut s = Script::new("vase");
        s.user("put the vase on the table");
        let mut ids = Vec::new();
        for round in 0..5 {
            for shelf in [1, 2] {
                let seen = if changing {
                    format!("shelf-{shelf}-{round}")
                } else {
                    format!("shelf-{shelf}")
                };
                ids.push(step(
                    &mut s,
                    "Go.",
                    "go_to",
                    json!({"target": format!("shelf {shelf}")}),
                    None,
                    &seen,
                ));
                let args = json!({"object": "vase 1", "from": format!("shelf {shelf}")});
                let err = if changing {
                    format!("clock-{round}-{shelf}")
                } else {
                    "nothing".into()
                };
                ids.push(step(
                    &mut s,
                    "Take.",
                    "take",
                    args,
                    Some("Nothing happens."),
                    &err,
                ));
            }
        }
        (run(&s.events), ids)
    };
    let (v, ids) = cycle(false);
    let steer = of_rule(&v, Rule::Cycle);
    assert_eq!(steer[0].action, Action::Steer);
    assert_eq!(
        steer[0].event_id, ids[11],
        "the 3rd repetition of the 4-cycle"
    );
    // The 4th repetition goes on: blocked by its end (the failing take by the error's
    // ladder, the cycle's own block on the calls that ladder leaves).
    let upto: Vec<_> = ids[..16].iter().collect();
    assert!(
        strong(&v).iter().any(|b| upto.contains(&&b.event_id)),
        "{:?}",
        rules(&v)
    );
    assert!(
        steer.iter().any(|b| b.action == Action::Block),
        "{:?}",
        rules(&v)
    );
    let (v, _) = cycle(true);
    assert!(
        of_rule(&v, Rule::Cycle)
            .iter()
            .all(|c| c.action == Action::Steer),
        "{:?}",
        rules(&v)
    );
}

#[test]
fn edits_undone_and_redone_return_the_file_to_an_earlier_state() {
    let mut s = Script::new("rounding");
    s.user("fix the rounding");
    let (a, b) = ("return round(x, 2)", "return math.floor(x * 100) / 100");
    let mut edits = Vec::new();
    for i in 0..4 {
        let (old, new) = if i % 2 == 0 { (a, b) } else { (b, a) };
        edits.push(step(
            &mut s,
            "Try this.",
            "Edit",
            json!({"file_path": "calc.py", "old_string": old, "new_string": new}),
            None,
            &format!("edit-{i}"),
        ));
        step(
            &mut s,
            "Test.",
            "Bash",
            json!({"command": format!("pytest tests/test_calc.py -k case{i}")}),
            None,
            &format!("t-{i}"),
        );
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::RevertCycle);
    assert_eq!(hits.len(), 1, "{:?}", rules(&v));
    // The 4th edit's result: the file is back where it started for the 3rd time
    // (after edits 2, 3 and 4: A -> B -> A -> B -> A).
    assert_eq!(hits[0].evidence["kind"], "state");
    // Edits that move on never return.
    let mut s = Script::new("progress");
    s.user("fix the rounding");
    for i in 0..6 {
        let args = json!({"file_path": "calc.py", "old_string": format!("step {i}"), "new_string": format!("step {}", i + 1)});
        step(&mut s, "Next.", "Edit", args, None, &format!("e{i}"));
    }
    assert_eq!(rules(&run(&s.events)), vec![]);
}

#[test]
fn a_failure_retried_across_the_users_turns_steers_at_its_third_try() {
    let mut s = Script::new("cancel");
    let cancel = json!({"order_id": "#W2378156", "reason": "no longer needed"});
    s.user("cancel my order");
    step(
        &mut s,
        "Cancel it.",
        "cancel_pending_order",
        cancel.clone(),
        Some("Error: order is not pending"),
        "np",
    );
    step(
        &mut s,
        "Retry.",
        "cancel_pending_order",
        cancel.clone(),
        Some("Error: order is not pending"),
        "np",
    );
    s.user("please just try again");
    let third = step(
        &mut s,
        "Retry.",
        "cancel_pending_order",
        cancel,
        Some("Error: order is not pending"),
        "np",
    );
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::ErrorRepeat);
    assert!(
        hits.iter()
            .any(|h| h.evidence["scope"] == "session" && h.evidence["requests"] == 2),
        "{:?}",
        rules(&v)
    );
    let _ = third;
}
