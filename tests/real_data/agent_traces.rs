//! The labelled real agent sessions (SWE-agent and mini-swe-agent trajectories, MIT; see
//! tests/data/real/agent-traces/README.md), replayed through the engine with the default
//! policy and judged against their labels: every loop flagged on time, no block or abort on
//! healthy work, and only the soft verdicts listed here on healthy sessions.

use loopguard::engine::event::{Body, Event};
use loopguard::engine::policy::PolicySet;
use loopguard::engine::verdict::{Action, Verdict};
use loopguard::engine::{Engine, Limits};
use serde_json::Value;
use std::collections::BTreeMap;

const DIR: &str = "tests/data/real/agent-traces";

/// Soft verdicts accepted on sessions labelled healthy, each with why a person would accept
/// it: (session, rule, action, call number).
const ACCEPTED_SOFT: [(&str, &str, &str, usize, &str); 2] = [
    (
        "ext-mini-dj13964",
        "tool.revert_cycle",
        "steer",
        97,
        "the third restore of related.py.orig: the flailing the label describes",
    ),
    // Before issue 20 (item 3) two more: i_got_id_demo's call 12 (an upload with its two
    // form fields swapped, every earlier answer different: now nothing) and pydicom1458's
    // call 8 (a third edit after two that got answers of their own: now nothing).
    (
        "ext-swea-pydicom1458",
        "tool.fuzzy_repeat",
        "steer",
        9,
        "the fourth try of the same 9-line edit after the linter rejected the third as it did \
         the second (label: at most a warning): one steer for the group, never a block",
    ),
];

struct Label {
    is_loop: bool,
    intervene_at: Option<String>,
}

fn labels() -> BTreeMap<String, Label> {
    let raw: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{DIR}/labels.json")).unwrap())
            .unwrap();
    raw["sessions"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(sid, l)| {
            let label = Label {
                is_loop: l["loop"].as_bool().unwrap(),
                intervene_at: l["intervene_at"].as_str().map(str::to_string),
            };
            (sid.clone(), label)
        })
        .collect()
}

/// Every session's events, in file order.
fn sessions() -> BTreeMap<String, Vec<Event>> {
    let mut out: BTreeMap<String, Vec<Event>> = BTreeMap::new();
    for file in ["swe-agent.jsonl", "mini-swe-agent.jsonl"] {
        let text = std::fs::read_to_string(format!("{DIR}/{file}")).unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let e = Event::decode(line.as_bytes()).expect("the traces are valid events");
            out.entry(e.meta.session_id.clone()).or_default().push(e);
        }
    }
    out
}

/// The verdicts of one session, each with the number of tool calls seen when it came.
fn judge(events: &[Event]) -> (Vec<(usize, Verdict)>, BTreeMap<String, usize>) {
    let mut engine = Engine::new(PolicySet::default(), Limits::default());
    let mut calls = 0;
    let mut call_no = BTreeMap::new();
    let mut verdicts = Vec::new();
    for e in events {
        if let Body::ToolCall { .. } = e.body {
            calls += 1;
            call_no.insert(e.meta.event_id.clone(), calls);
        }
        let mut out = Vec::new();
        engine.handle_event(e.clone(), &mut out);
        verdicts.extend(out.into_iter().map(|v| (calls, v)));
    }
    (verdicts, call_no)
}

#[test]
fn real_sessions_are_judged_as_a_person_would() {
    let labels = labels();
    let sessions = sessions();
    assert_eq!(labels.len(), 24);
    let mut problems = Vec::new();
    let mut soft = Vec::new();
    for (sid, label) in &labels {
        let (verdicts, call_no) = judge(&sessions[sid]);
        if label.is_loop {
            let due = call_no[label.intervene_at.as_ref().unwrap()];
            let flagged: Vec<usize> = verdicts
                .iter()
                .filter(|(c, v)| *c + 3 >= due && !v.rule.as_str().starts_with("budget."))
                .map(|(c, _)| *c)
                .collect();
            match flagged.first() {
                Some(&first) if first <= due + 2 => {}
                other => problems.push(format!(
                    "{sid}: loop due by call {}, first flagged at {other:?}",
                    due + 2
                )),
            }
            for (c, v) in &verdicts {
                if matches!(v.action, Action::Block | Action::Abort) && *c + 3 < due {
                    problems.push(format!(
                        "{sid}: {} {:?} at call {c}, before the loop",
                        v.rule.as_str(),
                        v.action
                    ));
                }
            }
            continue;
        }
        for (c, v) in &verdicts {
            let (rule, action) = (v.rule.as_str(), v.action.as_str());
            if matches!(v.action, Action::Block | Action::Abort) {
                problems.push(format!(
                    "{sid}: {rule} {action} at call {c} on healthy work"
                ));
            } else if ACCEPTED_SOFT
                .iter()
                .any(|a| (a.0, a.1, a.2, a.3) == (sid.as_str(), rule, action, *c))
            {
                soft.push((sid.clone(), rule.to_string(), *c));
            } else {
                problems.push(format!("{sid}: unexpected {rule} {action} at call {c}"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(
        soft.len(),
        ACCEPTED_SOFT.len(),
        "accepted verdicts that no longer come: {soft:?}"
    );
}

#[test]
fn seed_000s_budget_holds_when_the_runtime_announces_it() {
    // The longest healthy run (165 calls), once with the fleet default and once with the
    // runtime announcing seed 000's 15 rounds on its request.
    let events = &sessions()["ext-mini-dj13964"];
    let aborts = |events: &[Event]| {
        judge(events)
            .0
            .into_iter()
            .filter(|(_, v)| v.rule.as_str() == "budget.tool_rounds")
            .map(|(c, v)| (c, v.action))
            .collect::<Vec<_>>()
    };
    assert_eq!(aborts(events), vec![]);
    let announced: Vec<Event> = events
        .iter()
        .map(|e| match &e.body {
            Body::UserMessage { .. } => {
                let mut wire = e.to_wire();
                wire["limits"] = serde_json::json!({"max_tool_rounds": 15});
                Event::decode(wire.to_string().as_bytes()).unwrap()
            }
            _ => e.clone(),
        })
        .collect();
    assert_eq!(aborts(&announced), vec![(16, Action::Abort)]);
}
