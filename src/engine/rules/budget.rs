//! The round budget and the three convergence signals (seeds 000 and 004):
//! `budget.tool_rounds` (abort past the request's round budget: the runtime's announced
//! `limits.max_tool_rounds`, else the policy's), `budget.near_limit` (warn at 80 %),
//! `budget.slow_convergence` (> 8 min, >= 8 rounds, nothing new recently) and
//! `budget.compaction_churn` (>= 2 compactions at >= 75 % of the budget); each once a request.

use super::round::Outcome;
use crate::engine::emit::{Cx, Finding};
use crate::engine::event::RequestLimits;
use crate::engine::verdict::{Action, Directives, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Budget {
    /// The round budget the runtime announced for this request, if any.
    #[serde(default)]
    announced: Option<u32>,
    pub rounds: u32,
    pub compactions: u32,
    /// Consecutive finished rounds that brought no new information.
    quiet: usize,
    aborted: bool,
    /// Compactions since the last tool round started.
    #[serde(default)]
    storm: u32,
    warned_near: bool,
    warned_slow: bool,
    warned_churn: bool,
}

fn ratio_rounds(max: usize, ratio: f64) -> u32 {
    (max as f64 * ratio).ceil() as u32
}

impl Budget {
    /// A request's budget: what its runtime announced, the policy's otherwise.
    pub fn announced(limits: &RequestLimits) -> Self {
        Budget {
            announced: limits.max_tool_rounds,
            ..Default::default()
        }
    }

    /// The request's round budget.
    pub fn max_rounds(&self, cx: &Cx) -> usize {
        self.announced
            .map_or(cx.policy.budget.max_tool_rounds, |n| n as usize)
    }

    /// A new round starts.
    pub fn on_round_start(&mut self, cx: &mut Cx) {
        self.rounds += 1;
        self.storm = 0;
        let max = self.max_rounds(cx);
        let b = &cx.policy.budget;
        if self.rounds as usize > max && !self.aborted {
            self.aborted = true;
            let msg = format!(
                "This request has used {} model-tool rounds, over its budget of {}. Stop calling tools \
                 and give a status summary: what is done, what is blocked, what comes next.",
                self.rounds, max
            );
            let d = Directives {
                stop_tool_calls: Some(true),
                ..Default::default()
            };
            cx.emit(
                Finding::new(
                    Rule::ToolRounds,
                    Action::Abort,
                    msg,
                    json!({"rounds": self.rounds, "budget": max, "announced": self.announced.is_some()}),
                )
                .directives(d),
            );
        }
        let near = ratio_rounds(max, b.near_limit_ratio);
        if self.rounds >= near && !self.warned_near && !self.aborted {
            self.warned_near = true;
            let msg = format!(
                "{} of {} tool rounds used. Stop exploring and deliver the smallest useful result now.",
                self.rounds, max
            );
            cx.emit(Finding::new(
                Rule::NearLimit,
                Action::Warn,
                msg,
                json!({"rounds": self.rounds, "budget": max, "announced": self.announced.is_some()}),
            ));
        }
        self.check_churn(cx);
    }

    pub fn on_compaction(&mut self, cx: &mut Cx) {
        self.compactions += 1;
        self.storm += 1;
        self.check_churn(cx);
    }

    pub fn on_round_end(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Nothing | Outcome::Neutral => self.quiet += 1,
            _ => self.quiet = 0,
        }
    }

    /// Checks the slow-convergence signal at an event `elapsed_ms` into the request.
    pub fn check_slow(&mut self, elapsed_ms: i64, cx: &mut Cx) {
        let b = &cx.policy.budget;
        if self.warned_slow
            || elapsed_ms <= (b.slow_after_secs as i64) * 1000
            || (self.rounds as usize) < b.slow_min_rounds
            || self.quiet < b.slow_quiet_rounds
        {
            return;
        }
        self.warned_slow = true;
        let msg = format!(
            "This request has run {} minutes over {} rounds, and the last {} brought nothing new. \
             Review what you already have before doing more.",
            elapsed_ms / 60_000,
            self.rounds,
            self.quiet
        );
        cx.emit(Finding::new(Rule::SlowConvergence, Action::Warn, msg, json!({"elapsed_s": elapsed_ms / 1000, "rounds": self.rounds, "quiet_rounds": self.quiet})));
    }

    /// Compaction churn (004): >= 2 compactions at >= 75 % of the budget; or a compaction
    /// storm (ours): several compactions with no tool round between them.
    fn check_churn(&mut self, cx: &mut Cx) {
        let max = self.max_rounds(cx);
        let b = &cx.policy.budget;
        if self.warned_churn {
            return;
        }
        if self.storm as usize >= b.storm_compactions {
            self.warned_churn = true;
            let msg = format!(
                "The context was summarised {} times in a row without any tool call in between: \
                 summarising again will not make room. Answer from what you have, or start a new \
                 request with a shorter context.",
                self.storm
            );
            cx.emit(Finding::new(
                Rule::CompactionChurn,
                Action::Warn,
                msg,
                json!({"compactions": self.compactions, "rounds": self.rounds, "in_a_row": self.storm}),
            ));
            return;
        }
        if (self.compactions as usize) < b.churn_compactions
            || self.rounds < ratio_rounds(max, b.churn_ratio)
        {
            return;
        }
        self.warned_churn = true;
        let msg = format!(
            "The context was summarised {} times and {} of {} rounds are used: you may be redoing \
             work you forgot. Re-anchor on the saved state (files, notes) before continuing.",
            self.compactions, self.rounds, max
        );
        cx.emit(Finding::new(
            Rule::CompactionChurn,
            Action::Warn,
            msg,
            json!({"compactions": self.compactions, "rounds": self.rounds}),
        ));
    }
}
