//! Prometheus families of what loops cost (issue 18), fed by the engine's loop accounting
//! (`engine::spend`): all usage the runtimes reported, the part spent in loops by rule, the
//! seconds loops ran, the loops ended and an estimate of the tokens stopping them saved;
//! and how steered loops ended (issue 32: did the steer work, in how many calls).
//! Tenant and model labels only as the metrics configuration allows (bounded).

use crate::cost_summary::{CostSummary, RuleCost};
use crate::engine::spend::{Spent, SteerOutcome};
use crate::engine::verdict::Rule;
use crate::engine::Spending;
use prometheus::{CounterVec, IntCounterVec, Opts, Registry};

/// Who a series is about, capped to the configured allow-lists (`other`, `none`).
pub type Labeller = std::sync::Arc<dyn Fn(&Spending) -> Vec<String> + Send + Sync>;

#[derive(Clone)]
pub struct LoopCostMetrics {
    usage_reports: IntCounterVec,
    usage_tokens: IntCounterVec,
    usage_cost: CounterVec,
    loop_tokens: IntCounterVec,
    loop_cost: CounterVec,
    loop_seconds: CounterVec,
    loops_ended: IntCounterVec,
    tokens_saved: IntCounterVec,
    tokens_saved_at_least: IntCounterVec,
    steer_outcomes: IntCounterVec,
    steer_calls: IntCounterVec,
    steer_tokens: IntCounterVec,
    feedback: IntCounterVec,
    feedback_unmatched: IntCounterVec,
    labels: Labeller,
}

impl LoopCostMetrics {
    /// Registers the families on `r`; `who` are the label names after `rule` (`tenant`,
    /// `model`, as configured) and `labels` gives their values for a spending.
    pub fn new(r: &Registry, who: &[&str], labels: Labeller) -> prometheus::Result<Self> {
        let with_rule: Vec<&str> = std::iter::once("rule").chain(who.iter().copied()).collect();
        let with_outcome: Vec<&str> = ["rule", "outcome"]
            .into_iter()
            .chain(who.iter().copied())
            .collect();
        let ints = |name: &str, help: &str, l: &[&str]| super::families::counter(r, name, help, l);
        let floats = |name: &str, help: &str, l: &[&str]| -> prometheus::Result<CounterVec> {
            let c = CounterVec::new(Opts::new(name, help), l)?;
            r.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let m = LoopCostMetrics {
            usage_reports: ints("loopguard_usage_reports_total", "Usage reports (model responses that carried usage), loops or not.", who)?,
            usage_tokens: ints("loopguard_usage_tokens_total", "Tokens the runtimes reported used (usage on turn_end / assistant_message), loops or not.", who)?,
            usage_cost: floats("loopguard_usage_cost_total", "Cost the runtimes reported (their currency), loops or not.", who)?,
            loop_tokens: ints("loopguard_loop_tokens_total", "Tokens spent in loops, from each loop's first event to its end, by the rule that found it (each token once).", &with_rule)?,
            loop_cost: floats("loopguard_loop_cost_total", "Cost spent in loops, by the rule that found them (each report once).", &with_rule)?,
            loop_seconds: floats("loopguard_loop_seconds_total", "Seconds loops ran, first event to end, counted when they end, by rule.", &with_rule)?,
            loops_ended: ints("loopguard_loops_ended_total", "Loops ended (the agent moved on, the request or session ended, the run was aborted), by rule.", &with_rule)?,
            tokens_saved: ints("loopguard_loop_tokens_saved_total", "Tokens saved by blocking or aborting loops, at most: at each loop's first block or abort, its tokens per response so far times the responses its request's budget still allowed (as if every stopped loop had run to its budget).", &with_rule)?,
            tokens_saved_at_least: ints("loopguard_loop_tokens_saved_at_least_total", "Tokens saved by blocking or aborting loops, at least: at each loop's first block or abort, its tokens per response so far, once (the response the refused call would have fed).", &with_rule)?,
            steer_outcomes: ints("loopguard_steer_outcomes_total", "Loops whose first verdict was a warn or steer, ended, by how: worked (the agent moved on), stopped (a block or abort followed), unresolved (the request or session ended first).", &with_outcome)?,
            steer_calls: ints("loopguard_steer_calls_total", "Tool calls from the steer to the end of the steered loops that worked (divided by their count: calls a steer takes to work).", &with_rule)?,
            steer_tokens: ints("loopguard_steer_tokens_total", "Tokens reported from the steer to the end of steered loops, by how they ended.", &with_outcome)?,
            feedback: ints("loopguard_verdict_feedback_total", "Feedback on verdicts (issue 32): judged useful (true) or not (false), by the rule of the verdict judged; each verdict counted once, at its first judgement. A rule's precision over a window: useful / all.", &[&["rule", "useful"][..], who].concat())?,
            feedback_unmatched: ints("loopguard_feedback_unmatched_total", "Feedback not counted toward a rule's precision, by reason: unknown_verdict (not among the session's latest 32 verdicts), unknown_session (ended, expired or never seen), repeat (a verdict judged before, judged the same again), changed (judged before, now otherwise: the first judgement stands).", &["reason"])?,
            labels,
        };
        Ok(m)
    }

    /// Creates the series every dashboard panel reads, at 0, for the unlabelled case.
    pub fn init_unlabelled(&self) {
        self.usage_reports.with_label_values(&[]);
        self.usage_tokens.with_label_values(&[]);
        self.usage_cost.with_label_values(&[]);
        for reason in ["unknown_verdict", "unknown_session", "repeat", "changed"] {
            self.feedback_unmatched.with_label_values(&[reason]);
        }
        for rule in Rule::ALL.into_iter().filter(|r| r.is_loop()) {
            let l = [rule.as_str()];
            self.loop_tokens.with_label_values(&l);
            self.loop_cost.with_label_values(&l);
            self.loop_seconds.with_label_values(&l);
            self.loops_ended.with_label_values(&l);
            self.tokens_saved.with_label_values(&l);
            self.tokens_saved_at_least.with_label_values(&l);
            self.steer_calls.with_label_values(&l);
            for useful in ["true", "false"] {
                self.feedback.with_label_values(&[rule.as_str(), useful]);
            }
            for o in SteerOutcome::ALL {
                let l = [rule.as_str(), o.as_str()];
                self.steer_outcomes.with_label_values(&l);
                self.steer_tokens.with_label_values(&l);
            }
        }
    }

    /// What the counters say so far, summed over every label but the rule (the demo's
    /// closing lines).
    pub fn summary(&self) -> CostSummary {
        use prometheus::core::Collector;
        let mut out = CostSummary::default();
        let each = |c: &dyn Collector, f: &mut dyn FnMut(Option<Rule>, f64)| {
            for family in c.collect() {
                for m in family.get_metric() {
                    let rule = m
                        .get_label()
                        .iter()
                        .find(|l| l.get_name() == "rule")
                        .and_then(|l| Rule::from_name(l.get_value()));
                    f(rule, m.get_counter().get_value());
                }
            }
        };
        each(&self.usage_reports, &mut |_, v| {
            out.usage_reports += v as u64
        });
        each(&self.usage_tokens, &mut |_, v| out.tokens += v as u64);
        each(&self.usage_cost, &mut |_, v| out.cost += v);
        let rules = &mut out.by_rule;
        let mut add = |c: &dyn Collector, f: fn(&mut RuleCost, f64)| {
            each(c, &mut |rule, v| {
                if let Some(rule) = rule {
                    f(rules.entry(rule).or_default(), v);
                }
            })
        };
        add(&self.loop_tokens, |r, v| r.tokens += v as u64);
        add(&self.loop_cost, |r, v| r.cost += v);
        add(&self.loop_seconds, |r, v| r.seconds += v);
        add(&self.loops_ended, |r, v| r.loops += v as u64);
        add(&self.tokens_saved, |r, v| r.saved += v as u64);
        add(&self.tokens_saved_at_least, |r, v| {
            r.saved_at_least += v as u64
        });
        out.by_rule.retain(|_, r| *r != RuleCost::default());
        out
    }

    /// Counts what one event moved.
    pub fn on_spending(&self, s: &Spending) {
        let who = (self.labels)(s);
        let who: Vec<&str> = who.iter().map(String::as_str).collect();
        let with = |rule: Rule| -> Vec<&str> {
            std::iter::once(rule.as_str())
                .chain(who.iter().copied())
                .collect()
        };
        match s.spent {
            Spent::Usage { tokens, cost } => {
                self.usage_reports.with_label_values(&who).inc();
                self.usage_tokens.with_label_values(&who).inc_by(tokens);
                if cost > 0.0 {
                    self.usage_cost.with_label_values(&who).inc_by(cost);
                }
            }
            Spent::InLoop { rule, tokens, cost } => {
                let l = with(rule);
                self.loop_tokens.with_label_values(&l).inc_by(tokens);
                if cost > 0.0 {
                    self.loop_cost.with_label_values(&l).inc_by(cost);
                }
            }
            Spent::Saved {
                rule,
                tokens,
                at_least,
            } => {
                self.tokens_saved
                    .with_label_values(&with(rule))
                    .inc_by(tokens);
                self.tokens_saved_at_least
                    .with_label_values(&with(rule))
                    .inc_by(at_least);
            }
            Spent::Ended { rule, seconds } => {
                let l = with(rule);
                self.loops_ended.with_label_values(&l).inc();
                self.loop_seconds.with_label_values(&l).inc_by(seconds);
            }
            Spent::Feedback { rule, useful } => {
                let l: Vec<&str> = [rule.as_str(), if useful { "true" } else { "false" }]
                    .into_iter()
                    .chain(who.iter().copied())
                    .collect();
                self.feedback.with_label_values(&l).inc();
            }
            Spent::FeedbackUnmatched { reason } => {
                self.feedback_unmatched.with_label_values(&[reason]).inc();
            }
            Spent::Steered {
                rule,
                outcome,
                calls,
                tokens,
            } => {
                let l: Vec<&str> = [rule.as_str(), outcome.as_str()]
                    .into_iter()
                    .chain(who.iter().copied())
                    .collect();
                self.steer_outcomes.with_label_values(&l).inc();
                self.steer_tokens.with_label_values(&l).inc_by(tokens);
                if outcome == SteerOutcome::Worked {
                    self.steer_calls
                        .with_label_values(&with(rule))
                        .inc_by(u64::from(calls));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Encoder;
    use std::sync::Arc;

    fn spending(spent: Spent, agent: &str) -> Spending {
        Spending {
            spent,
            tenant: None,
            agent: Some(agent.into()),
            model: None,
        }
    }

    #[test]
    fn spending_is_counted_by_rule_and_summed_back() {
        let r = Registry::new();
        let allow = ["coder".to_string()];
        let labels: Labeller = Arc::new(move |s: &Spending| {
            let a = s.agent.as_deref().unwrap_or("none");
            vec![if allow.iter().any(|x| x == a) {
                a.into()
            } else {
                "other".into()
            }]
        });
        let m = LoopCostMetrics::new(&r, &["agent"], labels).unwrap();
        let rule = Rule::ExactRepeat;
        m.on_spending(&spending(
            Spent::Usage {
                tokens: 1000,
                cost: 0.01,
            },
            "coder",
        ));
        m.on_spending(&spending(
            Spent::Usage {
                tokens: 500,
                cost: 0.0,
            },
            "bot-9",
        ));
        m.on_spending(&spending(
            Spent::InLoop {
                rule,
                tokens: 400,
                cost: 0.004,
            },
            "bot-9",
        ));
        m.on_spending(&spending(
            Spent::Saved {
                rule,
                tokens: 4000,
                at_least: 400,
            },
            "bot-9",
        ));
        m.on_spending(&spending(
            Spent::Ended {
                rule,
                seconds: 12.5,
            },
            "bot-9",
        ));
        let s = m.summary();
        assert_eq!((s.usage_reports, s.tokens), (2, 1500));
        let cost = &s.by_rule[&rule];
        assert_eq!((cost.loops, cost.tokens, cost.saved), (1, 400, 4000));
        assert_eq!(cost.saved_at_least, 400);
        assert_eq!(cost.seconds, 12.5);
        let mut text = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&r.gather(), &mut text)
            .unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains(
                r#"loopguard_loop_tokens_total{agent="other",rule="tool.exact_repeat"} 400"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"loopguard_usage_tokens_total{agent="coder"} 1000"#),
            "{text}"
        );
    }
}
