//! The round budget and the three convergence signals (seeds 000 and 004):
//! `budget.tool_rounds` (abort past 15 rounds), `budget.near_limit` (warn at 80 %),
//! `budget.slow_convergence` (> 8 min, >= 8 rounds, nothing new recently) and
//! `budget.compaction_churn` (>= 2 compactions at >= 75 % of the budget); each once a request.

use super::round::Outcome;
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{Action, Directives, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Budget {
    pub rounds: u32,
    pub compactions: u32,
    /// Consecutive finished rounds that brought no new information.
    quiet: usize,
    aborted: bool,
    warned_near: bool,
    warned_slow: bool,
    warned_churn: bool,
}

fn ratio_rounds(max: usize, ratio: f64) -> u32 {
    (max as f64 * ratio).ceil() as u32
}

impl Budget {
    /// A new round starts.
    pub fn on_round_start(&mut self, cx: &mut Cx) {
        self.rounds += 1;
        let b = &cx.policy.budget;
        if self.rounds as usize > b.max_tool_rounds && !self.aborted {
            self.aborted = true;
            let msg = format!(
                "This request has used {} model-tool rounds, over its budget of {}. Stop calling tools \
                 and give a status summary: what is done, what is blocked, what comes next.",
                self.rounds, b.max_tool_rounds
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
                    json!({"rounds": self.rounds, "budget": b.max_tool_rounds}),
                )
                .directives(d),
            );
        }
        let near = ratio_rounds(b.max_tool_rounds, b.near_limit_ratio);
        if self.rounds >= near && !self.warned_near && !self.aborted {
            self.warned_near = true;
            let msg = format!(
                "{} of {} tool rounds used. Stop exploring and deliver the smallest useful result now.",
                self.rounds, b.max_tool_rounds
            );
            cx.emit(Finding::new(
                Rule::NearLimit,
                Action::Warn,
                msg,
                json!({"rounds": self.rounds, "budget": b.max_tool_rounds}),
            ));
        }
        self.check_churn(cx);
    }

    pub fn on_compaction(&mut self, cx: &mut Cx) {
        self.compactions += 1;
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

    fn check_churn(&mut self, cx: &mut Cx) {
        let b = &cx.policy.budget;
        if self.warned_churn
            || (self.compactions as usize) < b.churn_compactions
            || self.rounds < ratio_rounds(b.max_tool_rounds, b.churn_ratio)
        {
            return;
        }
        self.warned_churn = true;
        let msg = format!(
            "The context was summarised {} times and {} of {} rounds are used: you may be redoing \
             work you forgot. Re-anchor on the saved state (files, notes) before continuing.",
            self.compactions, self.rounds, b.max_tool_rounds
        );
        cx.emit(Finding::new(
            Rule::CompactionChurn,
            Action::Warn,
            msg,
            json!({"compactions": self.compactions, "rounds": self.rounds}),
        ));
    }
}
