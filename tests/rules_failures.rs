//! Real traffic, second pass (issue 20): failures that come back while the agent varies its
//! call (across user requests, reworded), parallel calls of one response, navigation, and
//! restores however they are spelled.
mod common;

use common::*;
use loopguard::engine::verdict::{Action, Rule};
use serde_json::json;

/// Where the event `id` is in the script.
fn position(s: &Script, id: &str) -> usize {
    s.events.iter().position(|e| e.meta.event_id == id).unwrap()
}

/// One request in which `tool` is called once with `args` and fails with `error`.
fn failing_request(s: &mut Script, tool: &str, args: serde_json::Value, error: &str) -> String {
    s.user("Please try again.");
    s.new_turn();
    let (id, call) = s.call(tool, args);
    s.turn_end();
    s.result(&call, tool, false, Some(error), None);
    s.new_turn();
    s.content("Sorry, that did not work.");
    s.turn_end();
    id
}

#[test]
fn a_refusal_with_one_field_changed_in_three_requests_is_steered_once() {
    let mut s = Script::new("s");
    let mut ids = Vec::new();
    for day in ["03", "04", "05", "06"] {
        let args = json!({"reservation_id": "ZFA04Y", "flight": "SK4411", "date": format!("2026-02-{day}")});
        let error = format!("flight SK4411 not available on 2026-02-{day}");
        ids.push(failing_request(&mut s, "update_reservation", args, &error));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::ErrorRepeat);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].action, Action::Steer);
    assert_eq!(hits[0].evidence["scope"], "session");
    assert_eq!(hits[0].evidence["args"], "vary");
    assert_eq!(hits[0].evidence["count"], 3);
}

#[test]
fn a_refusal_of_a_different_request_each_time_is_not_a_loop() {
    // Two fields change each time (another flight on another day): the user asks for
    // different things, and each is refused.
    let mut s = Script::new("s");
    for (flight, day) in [("SK1", "03"), ("SK2", "04"), ("SK3", "05")] {
        let args = json!({"reservation_id": "ZFA04Y", "flight": flight, "date": day});
        failing_request(&mut s, "update_reservation", args, "not available");
    }
    let v = run(&s.events);
    assert!(of_rule(&v, Rule::ErrorRepeat).is_empty(), "{v:#?}");
}

#[test]
fn the_same_call_failing_in_four_requests_is_steered_whatever_its_error_says() {
    let mut s = Script::new("s");
    let errors = [
        "not found",
        "still not found",
        "another error",
        "not found again",
    ];
    let mut ids = Vec::new();
    for error in errors {
        ids.push(failing_request(
            &mut s,
            "bash",
            json!({"command": "./deploy.sh"}),
            error,
        ));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::ErrorRepeat);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].evidence["errors"], "vary");
    assert_eq!(hits[0].evidence["count"], 4);
    // On the 4th failure, the result of the 4th call.
    assert!(position(&s, &hits[0].event_id) > position(&s, &ids[3]));
}

#[test]
fn a_reworded_search_failing_alike_is_steered_at_the_third_response() {
    let mut s = Script::new("s");
    s.user("who wrote it?");
    for q in [
        "Blue Skies album",
        "Blue Skies (album)",
        "Blue Skies record",
    ] {
        s.new_turn();
        let (_, c) = s.call("search", json!({"query": q}));
        s.turn_end();
        s.result(
            &c,
            "search",
            false,
            Some(&format!("Could not find {q}.")),
            None,
        );
        s.round("lookup", json!({"keyword": q}), None);
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::ErrorRepeat);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].evidence["scope"], "request");
    assert_eq!(hits[0].evidence["args"], "vary");
}

#[test]
fn a_shell_running_different_commands_that_fail_alike_is_not_one_failure() {
    // One shell tool runs every kind of command: the same text from different commands
    // (a missing file each time) is not one failure retried.
    let mut s = Script::new("s");
    s.user("look around");
    for f in ["a.py", "b.py", "c.py"] {
        s.new_turn();
        let (_, c) = s.call("bash", json!({"command": format!("cat {f}")}));
        s.turn_end();
        s.result(&c, "bash", false, Some("No such file or directory"), None);
        s.round("bash", json!({"command": format!("ls {f}.d")}), None);
    }
    let v = run(&s.events);
    assert!(of_rule(&v, Rule::ErrorRepeat).is_empty(), "{v:#?}");
}

#[test]
fn parallel_calls_of_one_response_failing_alike_are_one_try() {
    let mut s = Script::new("s");
    s.user("find any flight");
    let response = |s: &mut Script, n: usize| {
        s.new_turn();
        let calls: Vec<_> = (0..n)
            .map(|i| {
                s.call("search_flights", json!({"to": format!("X{i}"), "n": n}))
                    .1
            })
            .collect();
        s.turn_end();
        for c in calls {
            s.result(
                &c,
                "search_flights",
                false,
                Some("no flights on this route"),
                None,
            );
        }
    };
    response(&mut s, 6);
    assert!(of_rule(&run(&s.events), Rule::ErrorRepeat).is_empty());
    response(&mut s, 3);
    response(&mut s, 2);
    let v = run(&s.events);
    // The third response failing alike: one steer (the in-a-row form, which spoke first).
    let hits = of_rule(&v, Rule::ErrorRepeat);
    assert_eq!(hits.len(), 1, "{v:#?}");
}

#[test]
fn a_shell_command_rerun_between_new_reads_is_still_a_repeat() {
    // Navigation is judged for tools other than shells: re-running an unchanged test while
    // reading other files in between stays a repeat.
    let mut s = Script::new("s");
    s.user("fix it");
    for f in ["a.py", "b.py", "c.py"] {
        s.round(
            "bash",
            json!({"command": "python test.py"}),
            Some(ev(json!({"effect": "read", "output_hash": "1 failed"}))),
        );
        if f != "c.py" {
            s.round(
                "bash",
                json!({"command": format!("cat {f}")}),
                Some(ev(json!({"effect": "read", "output_hash": f}))),
            );
        }
    }
    let v = run(&s.events);
    assert_eq!(of_rule(&v, Rule::ExactRepeat).len(), 1, "{v:#?}");
}

#[test]
fn back_to_the_same_page_without_opening_anything_new_is_a_repeat() {
    // The items opened in between were all seen before: nothing new, so it repeats.
    let mut s = Script::new("s");
    s.user("find a scarf");
    let page = |h: &str| Some(ev(json!({"effect": "read", "output_hash": h})));
    s.round("click", json!({"target": "item A"}), page("A"));
    for _ in 0..3 {
        s.round("click", json!({"target": "< Prev"}), page("list"));
        s.round("click", json!({"target": "item A"}), page("A"));
    }
    let v = run(&s.events);
    assert!(
        of_rule(&v, Rule::ExactRepeat)
            .iter()
            .any(|x| x.action == Action::Block),
        "{v:#?}"
    );
}

#[test]
fn an_editors_undo_of_the_same_file_three_times_is_steered() {
    let mut s = Script::new("s");
    s.user("fix the parser");
    let mut undos = Vec::new();
    for i in 0..3 {
        let edit = json!({"command": "str_replace", "path": "/r/p.py", "old_str": "a", "new_str": format!("b{i}")});
        s.round("str_replace_editor", edit, None);
        s.round("bash", json!({"command": "pytest -q"}), None);
        undos.push(s.round(
            "str_replace_editor",
            json!({"command": "undo_edit", "path": "/r/p.py"}),
            None,
        ));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::RevertCycle);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].event_id, undos[2]);
}

#[test]
fn one_failure_gets_one_steer_whichever_forms_come_due() {
    // The same call failing alike five times in a row: the in-a-row, same-call and reworded
    // forms all come due at the third; one steer, and none after it.
    let mut s = Script::new("s");
    s.user("cancel it");
    for _ in 0..5 {
        s.new_turn();
        let (_, c) = s.call("cancel_order", json!({"order_id": "#W1"}));
        s.turn_end();
        s.result(
            &c,
            "cancel_order",
            false,
            Some("order #W1 is already delivered"),
            None,
        );
    }
    let v = run(&s.events);
    assert_eq!(of_rule(&v, Rule::ErrorRepeat).len(), 1, "{v:#?}");
}

#[test]
fn a_file_written_whole_back_to_an_earlier_content_the_third_time_is_steered() {
    // Version A, B, A, B, A of one file, a test run after each: the third return to an
    // earlier content (the fifth write) is steered, by the content the calls wrote.
    let mut s = Script::new("s");
    s.user("fix the parser");
    let mut writes = Vec::new();
    for (i, body) in ["A", "B", "A", "B", "A"].iter().enumerate() {
        let text = format!("def parse(x):\n    return {body}\n");
        writes.push(s.round(
            "str_replace_editor",
            json!({"command": "create", "path": "/r/parse.py", "file_text": text}),
            None,
        ));
        s.round(
            "bash",
            json!({"command": format!("pytest -q -k case{i}")}),
            None,
        );
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::RevertCycle);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].evidence["kind"], "state");
    assert_eq!(hits[0].evidence["count"], 3);
    // On the fifth write's result.
    let (fifth, at) = (position(&s, &writes[4]), position(&s, &hits[0].event_id));
    assert!(at > fifth && at <= fifth + 2);
}

#[test]
fn a_heredoc_written_again_as_it_already_was_is_not_a_return() {
    // The same heredoc three times in a row changes nothing (counted as returns, the last
    // write would be the third); then B, A: one return, no steer.
    let mut s = Script::new("s");
    s.user("write the script");
    let write = |body: &str| json!({"command": format!("cat > run.sh <<'EOF'\n{body}\nEOF")});
    for body in ["echo a", "echo a", "echo a", "echo b", "echo a"] {
        s.round("bash", write(body), None);
    }
    let v = run(&s.events);
    assert!(of_rule(&v, Rule::RevertCycle).is_empty(), "{v:#?}");
}
