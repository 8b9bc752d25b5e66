//! Feedback counts each verdict once (issue 44): a verdict judged again (a user clicking
//! twice, a runtime retrying under a new event id) is counted as a `repeat` (or `changed`,
//! the first judgement standing), not as another judgement: in the precision metric, in
//! `replay --summary` and in the judgements automatic demotion counts; across a hand-over
//! of the session's state too.

use loopguard::cost_summary::CostSummary;
use loopguard::engine::event::Event;
use loopguard::engine::policy::{DemotionPolicy, PolicySet};
use loopguard::engine::verdict::{Rule, Verdict};
use loopguard::engine::{Engine, Limits, Spending};
use loopguard::service::demotion::Demotions;
use loopguard::service::metrics::loop_cost::LoopCostMetrics;
use serde_json::json;
use std::collections::BTreeMap;
use std::process::Command;

fn engine() -> Engine {
    Engine::new(PolicySet::default(), Limits::default()).track_spending()
}

fn fleet() -> Vec<Event> {
    loopguard::fleet::fleet(45, "fb-", 1_767_225_600_000, 250, 7)
}

/// The fleet's verdicts, with the time of the event each came from.
fn verdicts() -> Vec<(Verdict, i64)> {
    let events = fleet();
    let ts: BTreeMap<(String, String), i64> = events
        .iter()
        .map(|e| {
            (
                (e.meta.session_id.clone(), e.meta.event_id.clone()),
                e.meta.ts_ms,
            )
        })
        .collect();
    let mut out = Vec::new();
    let mut e = engine();
    for ev in &events {
        e.handle_event(ev.clone(), &mut out);
    }
    out.into_iter()
        .map(|v| {
            let at = ts[&(v.session_id.clone(), v.event_id.clone())];
            (v, at)
        })
        .collect()
}

/// A rule, tenant and agent (what a demotion window counts together).
type Who = (Rule, Option<String>, Option<String>);

/// Four verdicts of one rule, tenant and agent (what a demotion window counts together),
/// enforced, in four different sessions or not.
fn four_alike() -> Vec<(Verdict, i64)> {
    let all = verdicts();
    let mut by_who: BTreeMap<Who, Vec<(Verdict, i64)>> = BTreeMap::new();
    for (v, at) in all {
        by_who
            .entry((v.rule, v.tenant.clone(), v.agent.clone()))
            .or_default()
            .push((v, at));
    }
    let (_, four) = by_who
        .into_iter()
        .find(|(_, vs)| vs.len() >= 4)
        .expect("the fleet has four verdicts of one rule, tenant and agent");
    four.into_iter().take(4).collect()
}

/// The `n`-th feedback event judging `v` (each its own event id, as a second click or a
/// runtime's retry has), just after the event `v` came from.
fn feedback(v: &Verdict, at: i64, useful: bool, n: usize) -> Event {
    let line = json!({
        "v": 1, "event_id": format!("judge-{}-{n}", v.verdict_id), "session_id": v.session_id,
        "ts": at, "type": "feedback", "verdict_id": v.verdict_id, "useful": useful,
    });
    Event::decode(line.to_string().as_bytes()).unwrap()
}

/// The fleet with `judgements` (verdict, time, useful) inserted, each right after the
/// event its verdict came from (while the session still holds it).
fn fleet_judged(judgements: &[(Verdict, i64, bool)]) -> Vec<Event> {
    let mut out = Vec::new();
    for ev in fleet() {
        let (session, id) = (ev.meta.session_id.clone(), ev.meta.event_id.clone());
        out.push(ev);
        for (n, (v, at, useful)) in judgements.iter().enumerate() {
            if v.session_id == session && v.event_id == id {
                out.push(feedback(v, *at, *useful, n));
            }
        }
    }
    out
}

/// Verdicts and spending of `events` through one engine.
fn judge(events: &[Event]) -> (Vec<Verdict>, Vec<Spending>) {
    let mut e = engine();
    let (mut out, mut spent) = (Vec::new(), Vec::new());
    for ev in events {
        e.handle_event(ev.clone(), &mut out);
        spent.extend(e.take_spending());
    }
    (out, spent)
}

fn summary(spent: &[Spending]) -> CostSummary {
    let mut s = CostSummary::default();
    spent.iter().for_each(|x| s.add(x));
    s
}

/// Whether a demotion is asked for, with `min_judgements` 4 among the latest 50 and a bar
/// of one half.
fn demoted(spent: &[Spending]) -> bool {
    let d = Demotions::default();
    let (tx, rx) = std::sync::mpsc::channel();
    d.publish_to(tx);
    let policy = DemotionPolicy {
        below: 0.5,
        min_judgements: 4,
        window: 50,
    };
    spent.iter().for_each(|s| d.on_spending(s, &policy));
    rx.try_recv().is_ok()
}

#[test]
fn one_verdict_judged_wrong_four_times_is_one_judgement() {
    let four = four_alike();
    let (v, at) = &four[0];
    let judged: Vec<(Verdict, i64, bool)> = (0..4).map(|_| (v.clone(), *at, false)).collect();
    let (verdicts, spent) = judge(&fleet_judged(&judged));
    assert_eq!(verdicts, judge(&fleet()).0, "feedback changes no verdict");
    let s = summary(&spent);
    assert_eq!(s.feedback[&v.rule], (0, 1), "one judgement, not four");
    assert_eq!(s.feedback_unmatched.get("repeat"), Some(&3));
    assert!(!demoted(&spent), "one verdict judged wrong is not four");
}

#[test]
fn four_verdicts_judged_wrong_are_four_judgements() {
    let judged: Vec<(Verdict, i64, bool)> = four_alike()
        .into_iter()
        .map(|(v, at)| (v, at, false))
        .collect();
    let rule = judged[0].0.rule;
    let (_, spent) = judge(&fleet_judged(&judged));
    let s = summary(&spent);
    assert_eq!(s.feedback[&rule], (0, 4));
    assert_eq!(s.feedback_unmatched.get("repeat"), None);
    assert!(
        demoted(&spent),
        "four verdicts judged wrong demote the rule"
    );
}

/// A judgement that changes its mind is not counted either: the first stands, the change is
/// counted as `changed`.
#[test]
fn a_changed_judgement_leaves_the_first_standing() {
    let four = four_alike();
    let (v, at) = &four[0];
    let judged = [
        (v.clone(), *at, false),
        (v.clone(), *at, true),
        (v.clone(), *at, false),
    ];
    let (_, spent) = judge(&fleet_judged(&judged));
    let s = summary(&spent);
    assert_eq!(s.feedback[&v.rule], (0, 1));
    assert_eq!(s.feedback_unmatched.get("changed"), Some(&1));
    assert_eq!(s.feedback_unmatched.get("repeat"), Some(&1));
}

/// The precision metric counts the verdict once; the repeats have their own series.
#[test]
fn the_precision_metric_counts_a_verdict_once() {
    let four = four_alike();
    let (v, at) = &four[0];
    let judged: Vec<(Verdict, i64, bool)> = (0..4).map(|_| (v.clone(), *at, false)).collect();
    let (_, spent) = judge(&fleet_judged(&judged));
    let registry = prometheus::Registry::new();
    let m =
        LoopCostMetrics::new(&registry, &[], std::sync::Arc::new(|_: &Spending| vec![])).unwrap();
    m.init_unlabelled();
    spent.iter().for_each(|s| m.on_spending(s));
    let mut counts = BTreeMap::new();
    for family in registry.gather() {
        for metric in family.get_metric() {
            let labels: Vec<String> = metric
                .get_label()
                .iter()
                .map(|l| format!("{}={}", l.get_name(), l.get_value()))
                .collect();
            counts.insert(
                format!("{}{{{}}}", family.get_name(), labels.join(",")),
                metric.get_counter().get_value() as u64,
            );
        }
    }
    let rule = v.rule.as_str();
    assert_eq!(
        counts[&format!("loopguard_verdict_feedback_total{{rule={rule},useful=false}}")],
        1
    );
    assert_eq!(
        counts[&format!("loopguard_verdict_feedback_total{{rule={rule},useful=true}}")],
        0
    );
    assert_eq!(
        counts["loopguard_feedback_unmatched_total{reason=repeat}"],
        3
    );
    assert_eq!(
        counts["loopguard_feedback_unmatched_total{reason=changed}"],
        0
    );
}

/// `replay --summary` over a recording with one verdict judged wrong four times: one
/// judgement in the precision table, three repeats.
#[test]
fn replay_summary_counts_a_verdict_once() {
    let four = four_alike();
    let (v, at) = &four[0];
    let judged: Vec<(Verdict, i64, bool)> = (0..4).map(|_| (v.clone(), *at, false)).collect();
    let events = fleet_judged(&judged);
    let dir = std::env::temp_dir().join(format!("loopguard-feedback-once-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("judged.jsonl");
    let lines: Vec<String> = events.iter().map(|e| e.to_wire().to_string()).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(["replay", "--summary"])
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{out:?}");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let row = text
        .lines()
        .find(|l| {
            l.trim_start().starts_with(v.rule.as_str())
                && l.contains('%')
                && l.split_whitespace().count() == 5
        })
        .unwrap_or_else(|| panic!("no feedback row for {} in:\n{text}", v.rule.as_str()));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cols[1..], ["0", "1", "0.0", "%"], "{row}");
    assert!(text.contains("3 repeat"), "{text}");
}

/// A hand-over between two judgements of the same verdict: the new owner knows it was
/// judged, and counts the repeat as one.
#[test]
fn a_hand_over_keeps_what_was_judged() {
    let four = four_alike();
    let (v, at) = &four[0];
    let judged: Vec<(Verdict, i64, bool)> = (0..4).map(|_| (v.clone(), *at, false)).collect();
    let events = fleet_judged(&judged);
    let (_, whole) = judge(&events);
    // Cut after the second judgement.
    let second = format!("judge-{}-1", v.verdict_id);
    let cut = events
        .iter()
        .position(|e| e.meta.event_id == second)
        .unwrap()
        + 1;
    let mut before = engine();
    let (mut out, mut spent) = (Vec::new(), Vec::new());
    for ev in &events[..cut] {
        before.handle_event(ev.clone(), &mut out);
        spent.extend(before.take_spending());
    }
    let mut after = engine();
    for id in before.session_ids() {
        after
            .restore(&id, &before.snapshot(&id).unwrap())
            .expect("a state restores");
    }
    after.restore_clock(before.clock());
    for ev in &events[cut..] {
        after.handle_event(ev.clone(), &mut out);
        spent.extend(after.take_spending());
    }
    let (s, w) = (summary(&spent), summary(&whole));
    assert_eq!(s.feedback[&v.rule], (0, 1));
    assert_eq!(s.feedback_unmatched.get("repeat"), Some(&3));
    assert_eq!(s.feedback, w.feedback);
    assert_eq!(s.feedback_unmatched, w.feedback_unmatched);
    assert!(!demoted(&spent));
}

/// The memory of judged verdicts is bounded by the verdicts a session remembers: a session
/// with every one of its many verdicts judged keeps no more than 32 judged.
#[test]
fn the_memory_of_judged_verdicts_is_bounded() {
    let all = verdicts();
    let mut per_session: BTreeMap<String, usize> = BTreeMap::new();
    for (v, _) in &all {
        *per_session.entry(v.session_id.clone()).or_default() += 1;
    }
    let (session, n) = per_session
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(s, n)| (s.clone(), *n))
        .unwrap();
    let judged: Vec<(Verdict, i64, bool)> = all
        .into_iter()
        .filter(|(v, _)| v.session_id == session)
        .map(|(v, at)| (v, at, true))
        .collect();
    let events = fleet_judged(&judged);
    let mut e = engine();
    let mut out = Vec::new();
    let mut most = 0;
    for ev in &events {
        e.handle_event(ev.clone(), &mut out);
        if ev.meta.session_id == session {
            if let Some(json) = e.snapshot_json(&session) {
                let state: serde_json::Value = serde_json::from_slice(&json).unwrap();
                let judged = state["spend"]["judged"].as_array().map_or(0, Vec::len);
                most = most.max(judged);
            }
        }
    }
    let s = summary(&judge(&events).1);
    let counted: u64 = s.feedback.values().map(|(y, n)| y + n).sum();
    assert_eq!(
        counted as usize, n,
        "every verdict judged once, counted once"
    );
    assert!(most <= 32, "{most} judged verdicts kept");
    assert!(most >= n.min(32).min(2), "{most} judged kept of {n}");
}
