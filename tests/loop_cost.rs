//! What loops cost (issue 18): `loop_cost` on verdicts from the loop's first event, usage
//! attributed once to the loop it was spent in, loops ended when the agent moves on or the
//! request ends, the same accounting across a hand-over, and `replay --summary`.
mod common;

use common::*;
use loopguard::cost_summary::CostSummary;
use loopguard::engine::event::{Body, Event, Usage};
use loopguard::engine::policy::PolicySet;
use loopguard::engine::spend::Spent;
use loopguard::engine::verdict::{Rule, Verdict};
use loopguard::engine::{Engine, Limits};
use serde_json::json;
use std::process::Command;

fn fixture() -> Vec<Event> {
    std::fs::read_to_string("tests/fixtures/loop_cost.events.jsonl")
        .unwrap()
        .lines()
        .map(|l| Event::decode(l.as_bytes()).unwrap())
        .collect()
}

fn engine() -> Engine {
    Engine::new(PolicySet::default(), Limits::default()).track_spending()
}

/// Verdicts and accounting of `events` through one engine.
fn judge(engine: &mut Engine, events: &[Event]) -> (Vec<Verdict>, CostSummary) {
    let mut out = Vec::new();
    let mut cost = CostSummary::default();
    for e in events {
        engine.handle_event(e.clone(), &mut out);
        engine.take_spending().iter().for_each(|s| cost.add(s));
    }
    (out, cost)
}

#[test]
fn a_verdict_carries_what_the_loop_cost_since_its_first_call() {
    let (v, cost) = judge(&mut engine(), &fixture());
    let block = &v[0];
    assert_eq!(block.rule, Rule::ExactRepeat);
    let c = block.loop_cost.as_ref().unwrap();
    // Responses 1 and 2 reported 1,280 and 1,380 tokens before the third call.
    assert_eq!(c.tokens, Some(2660));
    assert_eq!(c.cost, Some(0.0084));
    assert_eq!(c.seconds, Some(2.4));
    // Every token once: the loop's four responses, not the answer after it.
    assert_eq!(cost.tokens, 1280 + 1380 + 1480 + 1580 + 1740);
    assert_eq!(cost.in_loops().0, 1280 + 1380 + 1480 + 1580);
    assert_eq!(cost.by_rule[&Rule::ExactRepeat].loops, 1);
    assert_eq!(cost.by_rule[&Rule::ErrorRepeat].tokens, 0, "counted once");
    // Blocked at its third call: 1,330 tokens per response so far, 247 responses left of
    // the fleet default budget of 250.
    assert_eq!(cost.by_rule[&Rule::ExactRepeat].saved, 1330 * 247);
    // At least the one response the refused call would have fed: 1,330 tokens.
    assert_eq!(cost.by_rule[&Rule::ExactRepeat].saved_at_least, 1330);
    assert_eq!(cost.saved(), (1330, 1330 * 247));
}

#[test]
fn the_accounting_is_the_same_across_a_hand_over() {
    let events = fixture();
    let (whole, whole_cost) = judge(&mut engine(), &events);
    for cut in 1..events.len() {
        let mut a = engine();
        let (mut verdicts, mut cost) = judge(&mut a, &events[..cut]);
        let mut b = engine();
        b.restore_clock(a.clock());
        let bytes = a.snapshot("costly").unwrap();
        b.restore("costly", &bytes).unwrap();
        let (rest, rest_cost) = judge(&mut b, &events[cut..]);
        verdicts.extend(rest);
        for (rule, r) in rest_cost.by_rule {
            let mine = cost.by_rule.entry(rule).or_default();
            mine.loops += r.loops;
            mine.tokens += r.tokens;
            mine.cost += r.cost;
            mine.seconds += r.seconds;
            mine.saved += r.saved;
            mine.saved_at_least += r.saved_at_least;
        }
        cost.tokens += rest_cost.tokens;
        cost.usage_reports += rest_cost.usage_reports;
        assert_eq!(verdicts, whole, "cut at {cut}");
        assert_eq!(cost.in_loops().0, whole_cost.in_loops().0, "cut at {cut}");
        assert_eq!(cost.by_rule.len(), whole_cost.by_rule.len(), "cut at {cut}");
        for (rule, r) in &whole_cost.by_rule {
            assert_eq!(cost.by_rule[rule].loops, r.loops, "cut at {cut}");
            assert_eq!(cost.by_rule[rule].saved, r.saved, "cut at {cut}");
            assert_eq!(
                cost.by_rule[rule].saved_at_least, r.saved_at_least,
                "cut at {cut}"
            );
        }
    }
}

#[test]
fn a_new_request_ends_the_loop_and_its_usage_is_not_the_loops() {
    let mut s = Script::new("s");
    s.user("check the job");
    for _ in 0..3 {
        s.round("job_status", json!({"id": 7}), None);
    }
    s.user("thanks, something else");
    let mut events = s.events.clone();
    events.push(usage_on_answer(&mut s, 900));
    let mut e = engine();
    let (v, _) = judge(&mut e, &s.events);
    assert_eq!(v.len(), 1, "{v:#?}");
    let mut spent = Vec::new();
    e.handle_event(events.pop().unwrap(), &mut Vec::new());
    spent.extend(e.take_spending().into_iter().map(|s| s.spent));
    assert_eq!(
        spent,
        [Spent::Usage {
            tokens: 900,
            cost: 0.0
        }]
    );
}

/// An `assistant_message` with `usage` (what some runtimes send instead of `turn_end`'s).
fn usage_on_answer(s: &mut Script, tokens: u64) -> Event {
    s.new_turn();
    let mut e = s.events.last().unwrap().clone();
    e.meta.event_id = format!("{}-answer", e.meta.event_id);
    e.meta.ts_ms += 100;
    e.body = Body::AssistantMessage {
        turn_id: s.turn_id(),
        text: "Done.".into(),
        usage: Some(Usage {
            output_tokens: Some(tokens),
            ..Default::default()
        }),
    };
    e
}

#[test]
fn without_usage_a_verdict_says_only_how_long_the_loop_ran() {
    let mut s = Script::new("s");
    s.user("go");
    for _ in 0..3 {
        s.round("read_file", json!({"path": "a"}), None);
    }
    let (v, cost) = judge(&mut engine(), &s.events);
    let c = v[0].loop_cost.as_ref().unwrap();
    assert_eq!((c.tokens, c.cost), (None, None));
    assert!(c.seconds.unwrap() > 0.0);
    assert_eq!(cost.usage_reports, 0);
}

#[test]
fn replay_summary_prints_what_the_loops_cost() {
    let o = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args([
            "replay",
            "--summary",
            "tests/fixtures/loop_cost.events.jsonl",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "what loops cost: 2 loops ended (open ones count in the tokens); 5720 of 7460 tokens (76.7 %) and 0.0168 of 0.0199 in cost (84.4 %) were spent in them (5 usage reports)\n\
         \x20 rule                        ended     tokens       cost   seconds saved at least saved at most\n\
         \x20 tool.exact_repeat               1       5720     0.0168       5.2           1330        328510\n\
         \x20 tool.error_repeat               1          0     0.0000       3.2              0             0\n\
         saved by stopping loops: at least 1330 tokens (each stopped loop's tokens per response so far, once: the response the refused call would have fed), at most 328510 (the same times the responses its request's budget still allowed, as if every stopped loop had run to its budget)\n\
         did steers work: loops whose first verdict was a warn or steer, by how they ended (worked: the agent moved on; stopped: a block or abort followed; unresolved: the request or session ended first)\n\
         \x20 rule                       steered worked stopped unresolved  success   calls to work tokens after\n\
         \x20 tool.error_repeat                1      1       0          0  100.0 %             1.0         1580\n"
    );
}

/// The steer rows `replay --summary` prints for a golden fixture: (rule, steered, worked,
/// stopped, unresolved, calls to work).
fn steer_rows(fixture: &str) -> Vec<(String, u64, u64, u64, u64, String)> {
    let o = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args([
            "replay",
            "--summary",
            &format!("tests/fixtures/{fixture}.events.jsonl"),
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    text.lines()
        .skip_while(|l| !l.starts_with("did steers work"))
        .skip(2)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            (f[0].to_string(), n(1), n(2), n(3), n(4), f[7].to_string())
        })
        .collect()
}

/// Steer outcomes (issue 32) on golden fixtures, counted by hand from their events:
/// - error_repeat: steered at the third failing build (response t3); the agent then
///   answered (t4) with no tool call: worked, after 0 calls.
/// - no_change: steered at the third unchanged migration; the agent moved on for one
///   response (t4, 3 calls) but the rule's abort came at the fifth: stopped.
/// - answer_repeat: steered at the third identical answer, which ends the file with the
///   request still open: unresolved.
/// - loop_cost: the error steer in the third response; the fourth response made one call
///   and no other verdict of the rule, and reported 1,580 tokens: worked after 1 call.
#[test]
fn steer_outcomes_on_golden_fixtures_match_hand_counts() {
    let row = |r: &str, s, w, st, u, c: &str| (r.to_string(), s, w, st, u, c.to_string());
    assert_eq!(
        steer_rows("error_repeat"),
        [row("tool.error_repeat", 1, 1, 0, 0, "0.0")]
    );
    assert_eq!(
        steer_rows("no_change"),
        [row("tool.no_change", 1, 0, 1, 0, "-")]
    );
    assert_eq!(
        steer_rows("answer_repeat"),
        [row("content.answer_repeat", 1, 0, 0, 1, "-")]
    );
    assert_eq!(
        steer_rows("loop_cost"),
        [row("tool.error_repeat", 1, 1, 0, 0, "1.0")]
    );
}

/// A steer's outcome survives a hand-over: the same outcomes cut anywhere.
#[test]
fn steer_outcomes_are_the_same_across_a_hand_over() {
    let events: Vec<Event> = std::fs::read_to_string("tests/fixtures/no_change.events.jsonl")
        .unwrap()
        .lines()
        .map(|l| Event::decode(l.as_bytes()).unwrap())
        .collect();
    let steered = |e: &mut Engine, events: &[Event]| -> Vec<Spent> {
        let mut out = Vec::new();
        let mut spent = Vec::new();
        for ev in events {
            e.handle_event(ev.clone(), &mut out);
            spent.extend(e.take_spending().into_iter().map(|s| s.spent));
        }
        spent
            .into_iter()
            .filter(|s| matches!(s, Spent::Steered { .. }))
            .collect()
    };
    let whole = steered(&mut engine(), &events);
    assert_eq!(whole.len(), 1, "{whole:?}");
    let session = events[0].meta.session_id.clone();
    for cut in 1..events.len() {
        let mut a = engine();
        let mut got = steered(&mut a, &events[..cut]);
        let mut b = engine();
        b.restore_clock(a.clock());
        if let Some(bytes) = a.snapshot(&session) {
            b.restore(&session, &bytes).unwrap();
        }
        got.extend(steered(&mut b, &events[cut..]));
        assert_eq!(got, whole, "cut at {cut}");
    }
}

/// A feedback event (issue 32) naming `verdict_id` of `session`, after `after`.
fn feedback(after: &Event, session: &str, verdict_id: &str, useful: bool) -> Event {
    let line = json!({
        "v": 1, "event_id": format!("fb-{verdict_id}-{useful}"), "session_id": session,
        "ts": after.meta.ts_ms + 1, "type": "feedback", "verdict_id": verdict_id,
        "useful": useful, "note": "x".repeat(5000),
    });
    Event::decode(line.to_string().as_bytes()).unwrap()
}

/// Feedback counts toward the rule of the verdict it names; one naming no verdict of the
/// session, or a session the engine does not hold, is counted as unmatched; and it changes
/// no verdict (the same stream with and without it).
#[test]
fn feedback_counts_toward_the_rule_of_the_verdict_it_names() {
    let events = fixture();
    let (verdicts, _) = judge(&mut engine(), &events);
    let session = events[0].meta.session_id.clone();
    let last = events.last().unwrap();
    let mut with = events.clone();
    for v in &verdicts {
        with.push(feedback(
            last,
            &session,
            &v.verdict_id,
            v.rule == Rule::ExactRepeat,
        ));
    }
    with.push(feedback(last, &session, "no-such-verdict", false));
    with.push(feedback(
        last,
        "no-such-session",
        &verdicts[0].verdict_id,
        false,
    ));
    let (again, cost) = judge(&mut engine(), &with);
    assert_eq!(again, verdicts, "feedback changes no verdict");
    // The fixture's verdicts: exact_repeat blocks twice (judged useful), one error steer.
    assert_eq!(cost.feedback[&Rule::ExactRepeat], (2, 0));
    assert_eq!(cost.feedback[&Rule::ErrorRepeat], (0, 1));
    assert_eq!(cost.feedback_unmatched["unknown_verdict"], 1);
    assert_eq!(cost.feedback_unmatched["unknown_session"], 1);
    assert!(cost
        .render()
        .contains("tool.exact_repeat                2          0    100.0 %"));
}

/// A feedback event that is not one is refused by name (the service dead-letters it).
#[test]
fn malformed_feedback_is_refused_naming_the_field() {
    for (line, field) in [
        (
            r#"{"v":1,"event_id":"f","session_id":"s","ts":1,"type":"feedback","useful":true}"#,
            "verdict_id",
        ),
        (
            r#"{"v":1,"event_id":"f","session_id":"s","ts":1,"type":"feedback","verdict_id":"v"}"#,
            "useful",
        ),
        (
            r#"{"v":1,"event_id":"f","session_id":"s","ts":1,"type":"feedback","verdict_id":"v","useful":"yes"}"#,
            "useful",
        ),
    ] {
        let err = Event::decode(line.as_bytes()).unwrap_err();
        assert!(err.to_string().contains(field), "{line}: {err}");
    }
}
