//! The repeat rules (`tool.exact_repeat`, `tool.fuzzy_repeat`, polling, side effects)
//! fire exactly at their threshold, and never on the work users do.
mod common;

use common::*;
use loopguard::engine::verdict::{Action, Rule};
use serde_json::json;

#[test]
fn exact_repeat_blocks_the_third_identical_call_not_the_second() {
    let mut s = Script::new("s");
    s.user("fix the build");
    let first = s.round("bash", json!({"cmd": "cargo build", "cwd": "/w"}), None);
    let second = s.round("bash", json!({"cwd": "/w", "cmd": "cargo build"}), None);
    s.new_turn();
    let (third, _) = s.call(
        "bash",
        serde_json::from_str(r#"{ "cwd" : "/w",  "cmd":"cargo build" }"#).unwrap(),
    );
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::ExactRepeat);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].event_id, third);
    assert_eq!(hits[0].action, Action::Block);
    assert_eq!(hits[0].directives.stop_tool_calls, Some(true));
    assert!(v
        .iter()
        .all(|x| x.event_id != first && x.event_id != second));
}

#[test]
fn exact_repeat_counts_only_the_last_six_calls() {
    let mut s = Script::new("s");
    s.user("go");
    s.round("read_file", json!({"path": "a"}), None);
    for i in 0..4 {
        s.round("read_file", json!({"path": format!("other{i}")}), None);
    }
    s.round("read_file", json!({"path": "a"}), None);
    s.round("read_file", json!({"path": "a"}), None);
    let v = run(&s.events);
    // The 7th call's window is calls 2..7, which holds "a" twice (calls 6 and 7): no block.
    assert!(of_rule(&v, Rule::ExactRepeat).is_empty(), "{v:#?}");
}

#[test]
fn polling_tool_is_exempt_forever() {
    let mut s = Script::new("s");
    s.user("wait for the job");
    for _ in 0..14 {
        s.round(
            "check_background_tasks",
            json!({}),
            Some(ev(json!({"effect": "read", "output_hash": "same"}))),
        );
    }
    let v = run(&s.events);
    assert!(strong(&v).is_empty(), "{v:#?}");
    // Across requests too: each user message resets the budget.
    let mut s = Script::new("s2");
    for _ in 0..4 {
        s.user("still waiting?");
        for _ in 0..10 {
            s.round("check_background_tasks", json!({"id": 1}), None);
        }
    }
    assert!(strong(&run(&s.events)).is_empty());
}

#[test]
fn polling_a_job_whose_output_changes_is_not_blocked() {
    let mut s = Script::new("s");
    s.user("deploy");
    for i in 0..6 {
        s.round(
            "job_status",
            json!({"job": "deploy-42"}),
            Some(ev(
                json!({"effect": "read", "output_hash": format!("h{i}")}),
            )),
        );
    }
    assert!(strong(&run(&s.events)).is_empty());
    // ... but the same output again and again is.
    let mut s = Script::new("s");
    s.user("deploy");
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(s.round(
            "job_status",
            json!({"job": "deploy-42"}),
            Some(ev(json!({"effect": "read", "output_hash": "h"}))),
        ));
    }
    let v = run(&s.events);
    assert_eq!(of_rule(&v, Rule::ExactRepeat)[0].event_id, ids[2]);
}

#[test]
fn fuzzy_repeat_blocks_near_identical_long_args() {
    let mut s = Script::new("s");
    s.user("push it");
    let a = "cd /Users/florianm/Desktop/Projects/app && git status -sb";
    let b = "cd /Users/florianm/Desktop/Projects/app&& git status -sb";
    s.round("shell", json!({"command": a}), None);
    s.round("shell", json!({"command": b}), None);
    s.new_turn();
    let (third, _) = s.call(
        "shell",
        json!({"command": "cd  /Users/florianm/Desktop/Projects/app && git status -sb"}),
    );
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::FuzzyRepeat);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].event_id, third);
}

/// Issue 20 (5): a customer-service agent's nine searches for different routes and dates
/// in one response are a plan, not a loop; they were blocked as near-repeats whose results
/// "agreed" before any result had come back.
#[test]
fn similar_calls_in_one_response_are_a_plan() {
    let mut s = Script::new("s");
    s.user("Find me a flight to Denver next week, any day.");
    s.new_turn();
    let calls: Vec<_> = (0..9)
        .map(|d| {
            s.call(
                "search_direct_flight",
                json!({"query": format!("direct flights from JFK to DEN on 2024-05-{:02}, economy, one adult, sorted by price", 14 + d)}),
            )
        })
        .collect();
    s.turn_end();
    for (d, (_, call)) in calls.iter().enumerate() {
        let out = format!("flights-{d}");
        s.result(
            call,
            "search_direct_flight",
            true,
            None,
            Some(ev(json!({"output_hash": out}))),
        );
    }
    let v = run(&s.events);
    assert!(of_rule(&v, Rule::FuzzyRepeat).is_empty(), "{v:#?}");
}

/// Near-identical calls across responses whose results have not come back yet: the rule
/// may not claim "the same result", so it steers rather than blocks.
#[test]
fn near_repeats_before_their_results_steer_not_block() {
    let mut s = Script::new("s");
    s.user("push it");
    for cmd in [
        "cd /Users/florianm/Desktop/Projects/app && git status -sb",
        "cd /Users/florianm/Desktop/Projects/app&& git status -sb",
    ] {
        s.new_turn();
        s.call("shell", json!({"command": cmd}));
        s.turn_end();
    }
    s.new_turn();
    let (third, _) = s.call(
        "shell",
        json!({"command": "cd  /Users/florianm/Desktop/Projects/app && git status -sb"}),
    );
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::FuzzyRepeat);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(
        (hits[0].event_id.as_str(), hits[0].action),
        (third.as_str(), Action::Steer)
    );
    assert_eq!(hits[0].evidence["results_in"], false);
}

/// Issue 20 (7): the same certificate sent three times, a new id back each time and other
/// successful changes in between: a duplicated side effect, the costliest loop there is.
#[test]
fn a_side_effect_repeated_is_blocked_whatever_its_outputs() {
    let mut s = Script::new("s");
    s.user("Send the course certificate to the student.");
    let args = json!({"student_id": "st-1042", "course": "ML-201", "template": "default"});
    let mut sends = Vec::new();
    for n in 0..3 {
        sends.push(s.round(
            "send_certificate",
            args.clone(),
            Some(ev(json!({"output_hash": format!("cert-{n}")}))),
        ));
        s.round(
            "update_student_record",
            json!({"student_id": "st-1042", "note": format!("sent {n}")}),
            None,
        );
    }
    let v = run(&s.events);
    let blocks = of_rule(&v, Rule::ExactRepeat);
    assert_eq!(blocks.len(), 1, "{v:#?}");
    assert_eq!(
        (blocks[0].event_id.as_str(), blocks[0].action),
        (sends[2].as_str(), Action::Block)
    );
    assert_eq!(blocks[0].evidence["repeated_effect"], true);
}

/// The same shell command re-run between edits (staging, building, installing) is work.
#[test]
fn a_shell_command_re_run_between_edits_is_work() {
    let mut s = Script::new("s");
    s.user("Fix the failing tests and stage the changes.");
    for n in 0..4 {
        s.round(
            "edit_file",
            json!({"path": format!("src/m{n}.py"), "old": "x", "new": "y"}),
            None,
        );
        s.round(
            "bash",
            json!({"command": "git add -A"}),
            Some(ev(json!({"effect": "mutation"}))),
        );
    }
    let v = run(&s.events);
    assert!(strong(&v).is_empty(), "{v:#?}");
}

/// Near-identical edits of one file, each failing with output `outputs[i]`; returns the
/// verdicts and the calls' event ids.
fn failing_edits(outputs: &[&str]) -> (Vec<loopguard::engine::verdict::Verdict>, Vec<String>) {
    let mut s = Script::new("s");
    s.user("Fix the handler.");
    let mut ids = Vec::new();
    for (n, out) in outputs.iter().enumerate() {
        s.new_turn();
        let (id, call) = s.call(
            "edit",
            json!({"path": "pydicom/handler.py", "command": format!("edit 287:295\n    required = ['BitsAllocated', 'Rows', 'Columns', 'SamplesPerPixel']\n    if missing:{n}")}),
        );
        s.turn_end();
        s.result(
            &call,
            "edit",
            false,
            Some("Your proposed edit has introduced new syntax error(s)."),
            Some(ev(json!({"output_hash": out}))),
        );
        ids.push(id);
    }
    (run(&s.events), ids)
}

/// Issue 20 (3): one steer per group of similar calls, and none while every try gets an
/// answer of its own.
#[test]
fn a_group_of_similar_calls_gets_one_steer() {
    let (v, ids) = failing_edits(&["a", "b", "b", "c", "d", "e"]);
    let hits = of_rule(&v, Rule::FuzzyRepeat);
    assert_eq!(hits.len(), 1, "{v:#?}");
    // The third edit follows two that got answers of their own: no steer; the fourth
    // follows a repeated answer.
    assert_eq!(
        (hits[0].event_id.as_str(), hits[0].action),
        (ids[3].as_str(), Action::Steer)
    );
    let (v, _) = failing_edits(&["a", "b", "c", "d", "e", "f"]);
    assert!(of_rule(&v, Rule::FuzzyRepeat).is_empty(), "{v:#?}");
}

#[test]
fn paging_through_a_file_is_work() {
    let mut s = Script::new("s");
    s.user("read the log");
    for page in 0..12 {
        s.round(
            "read_file",
            json!({"path": "/var/log/app/server-2026-11-30.log", "offset": page * 200, "limit": 200, "encoding": "utf-8"}),
            Some(ev(json!({"effect": "read", "resource": "/var/log/app/server-2026-11-30.log", "read_range": [page * 200, page * 200 + 200]}))),
        );
    }
    let v = run(&s.events);
    assert!(strong(&v).is_empty(), "{v:#?}");
}

#[test]
fn editing_twenty_files_with_the_same_change_is_work() {
    let mut s = Script::new("s");
    s.user("rename the import everywhere");
    s.new_turn();
    for i in 0..20 {
        let (_, c) = s.call(
            "edit_file",
            json!({"path": format!("src/module_{i}.rs"), "old": "use crate::old_name::Thing;", "new": "use crate::new_name::Thing;"}),
        );
        s.result(&c, "edit_file", true, None, Some(ev(json!({"effect": "mutation", "state_before": format!("a{i}"), "state_after": format!("b{i}")}))));
    }
    s.turn_end();
    let v = run(&s.events);
    assert!(strong(&v).is_empty(), "{v:#?}");
}

#[test]
fn codex_noop_loop_from_the_issue_excerpt_is_blocked() {
    let mut s = Script::new("s");
    s.user("check status");
    s.round("shell", json!({"command": "cd /home/ginis/wastelite-suite/wastelite_frontend && git status --short"}), None);
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(s.round(
            "shell",
            json!({"command": "cd /home/ginis/wastelite-suite/wastelite_frontend && true"}),
            None,
        ));
    }
    let v = run(&s.events);
    let blocks = of_rule(&v, Rule::ExactRepeat);
    assert_eq!(blocks[0].event_id, ids[2]);
    assert_eq!(blocks.len(), 4, "keeps refusing while the model insists");
    assert_eq!(blocks[3].attempt, 4);
}
