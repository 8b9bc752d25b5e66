//! What loops cost, summed for people: `loopguard replay --summary` over a recorded file
//! and the demo's closing lines. Adds up the engine's loop accounting (`engine::spend`):
//! all usage reported, the part spent in loops by rule, how long they ran, and an estimate
//! of what stopping them saved; and whether steers worked (issue 32): per rule, the loops
//! whose first verdict was soft, how they ended, and the calls and tokens it took.

use crate::engine::spend::{Spent, SteerOutcome};
use crate::engine::verdict::Rule;
use crate::engine::Spending;
use std::collections::BTreeMap;
use std::fmt::Write;

/// One rule's loops.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RuleCost {
    /// Loops ended (a loop still open is in the tokens, not here).
    pub loops: u64,
    pub tokens: u64,
    pub cost: f64,
    pub seconds: f64,
    /// Tokens stopping these loops saved, at most (each run to its request's budget).
    pub saved: u64,
    /// And at least (each stopped loop's one more response).
    pub saved_at_least: u64,
}

/// One rule's steered loops (first verdict warn or steer), by how they ended.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SteerTally {
    pub worked: u64,
    pub stopped: u64,
    pub unresolved: u64,
    /// Tool calls from the steer to the end of the loops that worked, summed.
    pub calls_worked: u64,
    /// Tokens reported from the steer to the end, summed over all of them.
    pub tokens: u64,
}

impl SteerTally {
    pub fn steered(&self) -> u64 {
        self.worked + self.stopped + self.unresolved
    }
}

/// The accounting of a stream of `Spending`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CostSummary {
    pub usage_reports: u64,
    pub tokens: u64,
    pub cost: f64,
    pub by_rule: BTreeMap<Rule, RuleCost>,
    pub steers: BTreeMap<Rule, SteerTally>,
    /// Feedback on verdicts, per rule: (useful, not useful).
    pub feedback: BTreeMap<Rule, (u64, u64)>,
    /// Feedback not counted, by reason: matched to no verdict, or a verdict judged before.
    pub feedback_unmatched: BTreeMap<&'static str, u64>,
}

impl CostSummary {
    pub fn add(&mut self, s: &Spending) {
        match s.spent {
            Spent::Usage { tokens, cost } => {
                self.usage_reports += 1;
                self.tokens += tokens;
                self.cost += cost;
            }
            Spent::InLoop { rule, tokens, cost } => {
                let r = self.by_rule.entry(rule).or_default();
                r.tokens += tokens;
                r.cost += cost;
            }
            Spent::Saved {
                rule,
                tokens,
                at_least,
            } => {
                let r = self.by_rule.entry(rule).or_default();
                r.saved += tokens;
                r.saved_at_least += at_least;
            }
            Spent::Ended { rule, seconds } => {
                let r = self.by_rule.entry(rule).or_default();
                r.loops += 1;
                r.seconds += seconds;
            }
            Spent::Feedback { rule, useful } => {
                let f = self.feedback.entry(rule).or_default();
                if useful {
                    f.0 += 1;
                } else {
                    f.1 += 1;
                }
            }
            Spent::FeedbackUnmatched { reason } => {
                *self.feedback_unmatched.entry(reason).or_default() += 1;
            }
            Spent::Steered {
                rule,
                outcome,
                calls,
                tokens,
            } => {
                let t = self.steers.entry(rule).or_default();
                match outcome {
                    SteerOutcome::Worked => {
                        t.worked += 1;
                        t.calls_worked += u64::from(calls);
                    }
                    SteerOutcome::Stopped => t.stopped += 1,
                    SteerOutcome::Unresolved => t.unresolved += 1,
                }
                t.tokens += tokens;
            }
        }
    }

    /// Tokens and cost spent in loops, all rules.
    pub fn in_loops(&self) -> (u64, f64) {
        self.by_rule
            .values()
            .fold((0, 0.0), |(t, c), r| (t + r.tokens, c + r.cost))
    }

    /// Tokens stopping loops saved: (at least, at most).
    pub fn saved(&self) -> (u64, u64) {
        self.by_rule
            .values()
            .fold((0, 0), |(l, h), r| (l + r.saved_at_least, h + r.saved))
    }

    /// A table for people (the same bytes for the same input).
    pub fn render(&self) -> String {
        let (tokens, cost) = self.in_loops();
        let loops: u64 = self.by_rule.values().map(|r| r.loops).sum();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "what loops cost: {loops} loops ended (open ones count in the tokens); {tokens} of {} tokens ({}) and {:.4} of {:.4} in cost ({}) were spent in them ({} usage reports)",
            self.tokens,
            share(tokens as f64, self.tokens as f64),
            cost,
            self.cost,
            share(cost, self.cost),
            self.usage_reports
        );
        if self.by_rule.is_empty() {
            return s;
        }
        let _ = writeln!(
            s,
            "  {:<26} {:>6} {:>10} {:>10} {:>9} {:>14} {:>13}",
            "rule", "ended", "tokens", "cost", "seconds", "saved at least", "saved at most"
        );
        for (rule, r) in &self.by_rule {
            let _ = writeln!(
                s,
                "  {:<26} {:>6} {:>10} {:>10.4} {:>9.1} {:>14} {:>13}",
                rule.as_str(),
                r.loops,
                r.tokens,
                r.cost,
                r.seconds,
                r.saved_at_least,
                r.saved
            );
        }
        let (least, most) = self.saved();
        let _ = writeln!(
            s,
            "saved by stopping loops: at least {least} tokens (each stopped loop's tokens per response so far, once: the response the refused call would have fed), at most {most} (the same times the responses its request's budget still allowed, as if every stopped loop had run to its budget)"
        );
        s.push_str(&self.render_steers());
        s.push_str(&self.render_feedback());
        s
    }

    /// Feedback on verdicts: per rule, judged useful or not, and the precision it gives.
    pub fn render_feedback(&self) -> String {
        let mut s = String::new();
        if self.feedback.is_empty() && self.feedback_unmatched.is_empty() {
            return s;
        }
        let unmatched: Vec<String> = self
            .feedback_unmatched
            .iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect();
        let _ = writeln!(
            s,
            "feedback on verdicts: judged useful or not, per rule, each verdict once (not counted: {})",
            if unmatched.is_empty() {
                "none".to_string()
            } else {
                unmatched.join(", ")
            }
        );
        if self.feedback.is_empty() {
            return s;
        }
        let _ = writeln!(
            s,
            "  {:<26} {:>7} {:>10} {:>10}",
            "rule", "useful", "not useful", "precision"
        );
        for (rule, (yes, no)) in &self.feedback {
            let _ = writeln!(
                s,
                "  {:<26} {:>7} {:>10} {:>10}",
                rule.as_str(),
                yes,
                no,
                share(*yes as f64, (yes + no) as f64)
            );
        }
        s
    }

    /// Did steers work: per rule, steered loops ended, how, and what it took.
    pub fn render_steers(&self) -> String {
        let mut s = String::new();
        if self.steers.is_empty() {
            return s;
        }
        let _ = writeln!(
            s,
            "did steers work: loops whose first verdict was a warn or steer, by how they ended (worked: the agent moved on; stopped: a block or abort followed; unresolved: the request or session ended first)"
        );
        let _ = writeln!(
            s,
            "  {:<26} {:>7} {:>6} {:>7} {:>10} {:>8} {:>15} {:>12}",
            "rule",
            "steered",
            "worked",
            "stopped",
            "unresolved",
            "success",
            "calls to work",
            "tokens after"
        );
        for (rule, t) in &self.steers {
            let calls = if t.worked > 0 {
                format!("{:.1}", t.calls_worked as f64 / t.worked as f64)
            } else {
                "-".into()
            };
            let _ = writeln!(
                s,
                "  {:<26} {:>7} {:>6} {:>7} {:>10} {:>8} {:>15} {:>12}",
                rule.as_str(),
                t.steered(),
                t.worked,
                t.stopped,
                t.unresolved,
                share(t.worked as f64, t.steered() as f64),
                calls,
                t.tokens
            );
        }
        s
    }
}

fn share(part: f64, whole: f64) -> String {
    if whole > 0.0 {
        format!("{:.1} %", 100.0 * part / whole)
    } else {
        "no usage reported".to_string()
    }
}
