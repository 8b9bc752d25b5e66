//! The rules added or changed for real traffic (issue 7): work in a changing world is not a
//! repeat, loops longer than the window and across requests are, and response boundaries
//! and code blocks are respected by the text rules. Each rule at its threshold, and the
//! healthy shape next to it.
mod common;

use common::*;
use loopguard::engine::event::Evidence;
use loopguard::engine::verdict::{Action, Rule};
use serde_json::json;

fn with_output(effect: &str, output: &str) -> Option<Evidence> {
    serde_json::from_value(json!({"effect": effect, "output_hash": output})).ok()
}

#[test]
fn a_read_after_a_successful_edit_is_not_a_repeat_but_a_third_unchanged_one_is() {
    let mut s = Script::new("s");
    s.user("fix the pager");
    let read = json!({"command": "cat src/pager.py"});
    s.round("bash", read.clone(), with_output("read", "a"));
    s.round(
        "edit",
        json!({"path": "src/pager.py", "old": "<=", "new": "<"}),
        None,
    );
    s.round("bash", read.clone(), with_output("read", "b"));
    s.round(
        "edit",
        json!({"path": "src/pager.py", "old": "x", "new": "y"}),
        None,
    );
    let third = s.round("bash", read.clone(), with_output("read", "c"));
    assert!(
        strong(&run(&s.events)).is_empty(),
        "each read follows an edit"
    );
    s.round("bash", read.clone(), with_output("read", "c"));
    let blocked = s.round("bash", read, with_output("read", "c"));
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::ExactRepeat);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].event_id, blocked);
    assert_ne!(hits[0].event_id, third);
}

#[test]
fn a_failed_edit_changes_nothing_and_identical_writes_still_repeat() {
    // A failed mutation is no change: the read after it still counts.
    let mut s = Script::new("s");
    s.user("fix it");
    let read = json!({"command": "cat a.py"});
    s.round("bash", read.clone(), None);
    s.new_turn();
    let (_, c) = s.call("edit", json!({"path": "a.py", "old": "x", "new": "y"}));
    s.turn_end();
    s.result(
        &c,
        "edit",
        false,
        Some("no match for `x`"),
        Some(evidence("mutation")),
    );
    s.round("bash", read.clone(), None);
    let blocked = s.round("bash", read, None);
    assert_eq!(
        of_rule(&run(&s.events), Rule::ExactRepeat)[0].event_id,
        blocked
    );
    // The same file written with the same content again and again: the write's own success
    // is not a change that excuses its repeat.
    let mut s = Script::new("w");
    s.user("write the patch");
    let write = json!({"command": "cat > fix.patch << 'EOF'\n--- a/x\n+++ b/x\nEOF"});
    s.round("bash", write.clone(), with_output("mutation", "e3b0"));
    s.round("bash", write.clone(), with_output("mutation", "e3b0"));
    let blocked = s.round("bash", write, with_output("mutation", "e3b0"));
    let v = run(&s.events);
    assert_eq!(
        of_rule(&v, Rule::ExactRepeat)[0].event_id,
        blocked,
        "{v:#?}"
    );
}

#[test]
fn shell_commands_that_write_or_run_different_files_are_not_similar() {
    let mut s = Script::new("s");
    s.user("reproduce");
    let body = "import app\nprint(app.parse('2024-01-01T00:00:00Z', strict=True))\n";
    for name in ["t1.py", "t2.py", "t3.py", "t4.py"] {
        s.round(
            "bash",
            json!({"command": format!("cat > {name} << 'EOF'\n{body}EOF")}),
            None,
        );
        s.round("bash", json!({"command": format!("python {name}")}), None);
    }
    let v = run(&s.events);
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn fuzzy_repeats_block_only_when_the_results_do_not_change() {
    let q = |i: usize| json!({"query": format!("where are the http client retry settings configured{}", "?".repeat(i))});
    // The results each call got; what the last call gets. Every try with an answer of its
    // own gets nothing (issue 20, item 3: each changed what the agent knows); an answer
    // seen again among changing ones, a steer; the same answer every time, a block.
    for (outputs, action) in [
        (&["a", "a", "a"][..], Some(Action::Block)),
        (&["a", "b", "c"][..], None),
        (&["a", "b", "b", "c"][..], Some(Action::Steer)),
    ] {
        let mut s = Script::new("s");
        s.user("find it");
        let mut last = String::new();
        for (i, out) in outputs.iter().enumerate() {
            last = s.round("search", q(i), with_output("read", out));
        }
        let v = run(&s.events);
        let hits = of_rule(&v, Rule::FuzzyRepeat);
        let got: Vec<_> = hits
            .iter()
            .map(|h| (h.event_id.as_str(), h.action))
            .collect();
        let want: Vec<_> = action.map(|a| (last.as_str(), a)).into_iter().collect();
        assert_eq!(got, want, "{outputs:?}: {v:#?}");
    }
}

#[test]
fn the_third_restore_of_the_same_backup_is_steered() {
    let mut s = Script::new("s");
    s.user("make the test pass");
    let mut restores = Vec::new();
    for i in 0..3 {
        s.round(
            "bash",
            json!({"command": format!("python fix_{i}.py")}),
            Some(evidence("mutation")),
        );
        s.round("bash", json!({"command": "pytest -q"}), None);
        restores.push(s.round("bash", json!({"command": "cp a.py.orig a.py"}), None));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::RevertCycle);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(
        (hits[0].event_id.as_str(), hits[0].action),
        (restores[2].as_str(), Action::Steer)
    );
    assert!(strong(&v).is_empty(), "{v:#?}");
}

#[test]
fn a_file_back_to_an_earlier_state_three_times_is_steered() {
    let mut s = Script::new("s");
    s.user("fix");
    let states = ["h0", "h1", "h0", "h2", "h0", "h3", "h0"];
    let mut ids = Vec::new();
    for w in states.windows(2) {
        s.new_turn();
        let (_, c) = s.call(
            "edit",
            json!({"path": "a.py", "patch": format!("{}->{}", w[0], w[1])}),
        );
        s.turn_end();
        let ev = serde_json::from_value(json!({"effect": "mutation", "resource": "a.py", "state_before": w[0], "state_after": w[1]})).ok();
        ids.push(s.result(&c, "edit", true, None, ev));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::RevertCycle);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].event_id, ids[5], "the third return to h0");
}

#[test]
fn the_same_refusal_three_times_over_the_users_turns_is_steered_once() {
    // Issue 34 (docs/decisions.md (gd)): counted per try across the session once the tries
    // span two requests; before it, once per request (a third request was needed).
    let fail = |s: &mut Script| {
        s.new_turn();
        let (_, c) = s.call("book", json!({"flight": "SK 4411", "name": "Kim"}));
        s.turn_end();
        s.result(&c, "book", false, Some("fare class sold out"), None)
    };
    let mut s = Script::new("s");
    s.user("book it");
    fail(&mut s);
    s.round("search_flights", json!({"to": "OSL"}), None);
    fail(&mut s);
    assert!(
        of_rule(&run(&s.events), Rule::ErrorRepeat).is_empty(),
        "two tries in one request"
    );
    s.user("try again");
    let third = fail(&mut s);
    s.user("please try again");
    fail(&mut s);
    s.user("again");
    fail(&mut s);
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::ErrorRepeat);
    assert_eq!(hits[0].event_id, third, "{v:#?}");
    assert_eq!(hits[0].evidence["scope"], "session");
    assert_eq!(hits[0].evidence["requests"], 2);
    // Steered once; the ladder of a later request blocks only after a steer in it.
    assert!(
        hits.iter().skip(1).all(|h| h.action != Action::Steer),
        "{v:#?}"
    );
}

#[test]
fn the_same_answer_three_times_in_a_row_is_steered_unless_work_happens_between() {
    let mut s = Script::new("s");
    for text in ["hi", "where is it?", "and now?"] {
        s.user(text);
        s.assistant("Let me check that for you.");
    }
    let v = run(&s.events);
    assert_eq!(of_rule(&v, Rule::AnswerRepeat).len(), 1, "{v:#?}");
    let mut s = Script::new("s");
    for (i, text) in ["hi", "where is it?", "and now?"].iter().enumerate() {
        s.user(text);
        s.assistant("Let me check that for you.");
        s.round("track_parcel", json!({"id": i}), None);
    }
    assert!(run(&s.events).is_empty());
}

#[test]
fn compactions_in_a_row_without_a_round_are_a_storm() {
    let mut s = Script::new("s");
    s.user("summarise");
    s.round("read_file", json!({"path": "log"}), None);
    s.compaction();
    s.round("read_file", json!({"path": "log2"}), None);
    s.compaction();
    s.compaction();
    assert!(
        run(&s.events).is_empty(),
        "two in a row, one before the round"
    );
    let storm = s.compaction();
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::CompactionChurn);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(
        (hits[0].event_id.as_str(), hits[0].action),
        (storm.as_str(), Action::Warn)
    );
}

#[test]
fn thoughts_of_separate_responses_are_not_glued_into_one_passage() {
    // Each response ends with the same 60 chars and the next starts with the same 60: glued
    // together they made a 120-char window seen in every response boundary.
    let end = "Now I will run the reproduction script again to check the fix";
    let start = "The script output shows the behaviour I expected from the patch";
    let mut s = Script::new("s");
    s.user("fix");
    for i in 0..4 {
        s.new_turn();
        s.reasoning_final(&format!(
            "{start}. Step {i} looks at module number {i}. {end}."
        ));
        s.turn_end();
    }
    let v = run(&s.events);
    assert!(of_rule(&v, Rule::BlockRepeat).is_empty(), "{v:#?}");
}

#[test]
fn repeated_lines_inside_a_code_block_are_code_but_a_whole_block_again_is_a_repeat() {
    let line =
        "assert is_even(value) is expected, f'unexpected result for {value!r}: {expected}'\n";
    let block = format!("```python\n{}```\n", line.repeat(8));
    let mut s = Script::new("s");
    s.user("write tests");
    s.new_turn();
    s.content(&format!(
        "Here are the tests:\n\n{block}Run them with pytest.\n"
    ));
    assert!(run(&s.events).is_empty());
    s.content(&format!("Again:\n{block}"));
    let v = run(&s.events);
    assert_eq!(of_rule(&v, Rule::ContentRepeat).len(), 1, "{v:#?}");
}

#[test]
fn a_long_customer_service_conversation_gets_nothing() {
    // The shape of a retail support session: lookups by id, a change, the same lookups again
    // after it, over many user turns, the user's details fetched in several requests.
    let mut s = Script::new("cs");
    let user = json!({"user_id": "yusuf_rossi_9620"});
    let order = |n: u32| json!({"order_id": format!("#W{n:07}")});
    s.user("I want to cancel an order and change an address.");
    s.round(
        "find_user_id_by_name_zip",
        json!({"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}),
        None,
    );
    s.round("get_user_details", user.clone(), None);
    for n in [2378156, 4776164, 6679257] {
        s.round("get_order_details", order(n), None);
    }
    s.assistant("Which order would you like to cancel?");
    s.user("The second one, I ordered by mistake.");
    s.round("get_order_details", order(4776164), None);
    s.round(
        "cancel_pending_order",
        json!({"order_id": "#W4776164", "reason": "ordered by mistake"}),
        None,
    );
    s.round("get_order_details", order(4776164), None);
    s.assistant("Done: the order is cancelled and refunded to your card.");
    s.user("Now change the address of the first one.");
    s.round("get_user_details", user.clone(), None);
    s.round("get_order_details", order(2378156), None);
    s.round(
        "modify_pending_order_address",
        json!({"order_id": "#W2378156", "address1": "445 Maple Drive", "address2": "Suite 394", "city": "Fort Worth", "country": "USA", "state": "TX", "zip": "76165"}),
        None,
    );
    s.round("get_order_details", order(2378156), None);
    s.assistant("The address is updated.");
    s.user("And my default address too, same one.");
    s.round("get_user_details", user.clone(), None);
    s.round(
        "modify_user_address",
        json!({"user_id": "yusuf_rossi_9620", "address1": "445 Maple Drive", "address2": "Suite 394", "city": "Fort Worth", "country": "USA", "state": "TX", "zip": "76165"}),
        None,
    );
    s.round("get_user_details", user, None);
    s.assistant("Your default address is updated too. Anything else?");
    let v = run(&s.events);
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn the_same_code_quoted_in_several_thoughts_is_not_a_reasoning_loop() {
    // A debugging agent quotes the line it suspects in three thoughts, far apart.
    let code = "```python\nfor lh_field, rh_field in self.field.related_fields:\n    setattr(instance, lh_field.attname, getattr(value, rh_field.attname))\n```\n";
    let mut s = Script::new("s");
    s.user("fix the descriptor");
    for i in 0..3 {
        s.new_turn();
        s.reasoning_final(&format!(
            "Attempt {i}: the assignment happens here:\n\n{code}\nso check case {i} next."
        ));
        s.turn_end();
        s.round(
            "read_file",
            json!({"path": format!("django/db/models/f{i}.py")}),
            None,
        );
    }
    let v = run(&s.events);
    assert!(reasoning_verdicts(&v).is_empty(), "{v:#?}");
}

#[test]
fn without_an_announced_budget_the_policy_then_the_fleet_default_applies() {
    let rounds = |s: &mut Script, n: usize| {
        let mut calls = Vec::new();
        for i in 0..n {
            calls.push(s.round("edit_file", json!({"path": format!("f{i}.rs")}), None));
        }
        calls
    };
    // 40 rounds, no announcement, default policy: nothing.
    let mut s = Script::new("s");
    s.user("long task");
    rounds(&mut s, 40);
    assert!(run(&s.events).is_empty());
    // An agent configured with 15: the seed's abort at round 16.
    let mut s = Script::new("s");
    s.user("long task");
    let calls = rounds(&mut s, 17);
    let v = run_with(&json!({"budget": {"max_tool_rounds": 15}}), &s.events);
    let aborts = of_rule(&v, Rule::ToolRounds);
    assert_eq!(aborts.len(), 1, "{v:#?}");
    assert_eq!(aborts[0].event_id, calls[15]);
    // The runtime's announcement wins over the policy, both ways.
    let mut s = Script::new("s");
    s.user_with_budget("long task", 30);
    let calls = rounds(&mut s, 31);
    let v = run_with(&json!({"budget": {"max_tool_rounds": 15}}), &s.events);
    let aborts = of_rule(&v, Rule::ToolRounds);
    assert_eq!(aborts.len(), 1, "{v:#?}");
    assert_eq!(aborts[0].event_id, calls[30]);
    assert_eq!(aborts[0].evidence["announced"], true);
    // The 8-round discovery nudge needs 25 rounds under the fleet default.
    let mut s = Script::new("s");
    s.user("explore");
    for i in 0..24 {
        s.round("read_file", json!({"path": format!("src/m{i}.rs")}), None);
    }
    assert!(run(&s.events).is_empty());
    s.round("read_file", json!({"path": "src/m24.rs"}), None);
    assert_eq!(of_rule(&run(&s.events), Rule::DiscoveryOnly).len(), 1);
}

#[test]
fn a_multi_purpose_editors_write_commands_are_changes() {
    // `str_replace_editor`: view, edit, view again, three times; no effect in the results.
    let mut s = Script::new("s");
    s.user("fix");
    let view = json!({"command": "view", "path": "/repo/a.py", "view_range": [40, 60]});
    for i in 0..3 {
        s.round("str_replace_editor", view.clone(), None);
        s.round(
            "str_replace_editor",
            json!({"command": "str_replace", "path": "/repo/a.py", "old_str": format!("x{i}"), "new_str": format!("y{i}")}),
            None,
        );
    }
    s.round("str_replace_editor", view, None);
    let v = run(&s.events);
    assert!(strong(&v).is_empty(), "{v:#?}");
}

#[test]
fn an_error_that_says_nothing_is_the_same_error_only_for_the_same_call() {
    let grep = |s: &mut Script, pattern: &str| {
        s.new_turn();
        let (_, c) = s.call(
            "bash",
            json!({"command": format!("grep -n '{pattern}' src/app.py")}),
        );
        s.turn_end();
        s.result(&c, "bash", false, Some("error"), None)
    };
    let mut s = Script::new("s");
    s.user("find it");
    for p in ["def save", "def pre_save", "class Meta"] {
        grep(&mut s, p);
    }
    assert!(of_rule(&run(&s.events), Rule::ErrorRepeat).is_empty());
    // Three different commands failing with one informative error still steer.
    let mut s = Script::new("s");
    s.user("build");
    for j in 1..=3 {
        s.new_turn();
        let (_, c) = s.call("bash", json!({"command": format!("make -j{j}")}));
        s.turn_end();
        s.result(
            &c,
            "bash",
            false,
            Some("error: linker `cc` not found"),
            None,
        );
    }
    assert_eq!(of_rule(&run(&s.events), Rule::ErrorRepeat).len(), 1);
}

#[test]
fn the_same_failure_three_times_despite_changes_between_is_steered() {
    let test_run = |s: &mut Script, error: &str| {
        s.new_turn();
        let (_, c) = s.call(
            "bash",
            json!({"command": "python -m pytest tests/test_pager.py -q"}),
        );
        s.turn_end();
        s.result(&c, "bash", false, Some(error), None)
    };
    let same = "AssertionError: assert page(10, 3) == [7, 8, 9]";
    let mut s = Script::new("s");
    s.user("fix the pager");
    let mut results = Vec::new();
    for i in 0..3 {
        results.push(test_run(&mut s, same));
        s.round(
            "edit",
            json!({"path": "src/pager.py", "old": format!("a{i}"), "new": format!("b{i}")}),
            None,
        );
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::ErrorRepeat);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].event_id, results[2]);
    assert_eq!(hits[0].evidence["scope"], "request");
    assert!(strong(&v).is_empty(), "{v:#?}");
    // Each fix changes the failure: iteration.
    let mut s = Script::new("s");
    s.user("fix the pager");
    for i in 0..4 {
        test_run(
            &mut s,
            &format!("AssertionError: assert page(10, 3) == [7, 8, 9] (got [{i}])"),
        );
        s.round(
            "edit",
            json!({"path": "src/pager.py", "old": format!("a{i}"), "new": format!("b{i}")}),
            None,
        );
    }
    assert!(run(&s.events).is_empty());
}

#[test]
fn a_bare_error_is_the_same_failure_only_with_the_same_output() {
    let run_repro = |s: &mut Script, out: &str| {
        s.new_turn();
        let (_, c) = s.call("bash", json!({"command": "python reproduce.py"}));
        s.turn_end();
        let ev = serde_json::from_value(json!({"output_hash": out})).ok();
        s.result(&c, "bash", false, Some("error"), ev)
    };
    let edit = |s: &mut Script, i: usize| {
        s.round(
            "edit",
            json!({"path": "app.py", "old": format!("a{i}"), "new": format!("b{i}")}),
            None,
        );
    };
    // Three different tracebacks after three fixes: iteration.
    let mut s = Script::new("s");
    s.user("fix");
    for (i, out) in ["t1", "t2", "t3"].iter().enumerate() {
        run_repro(&mut s, out);
        edit(&mut s, i);
    }
    assert!(run(&s.events).is_empty());
    // The very same output three times, fixes in between: the fixes do not reach it.
    let mut s = Script::new("s");
    s.user("fix");
    let mut last = String::new();
    for i in 0..3 {
        last = run_repro(&mut s, "same");
        edit(&mut s, i);
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::ErrorRepeat);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].event_id, last);
}
