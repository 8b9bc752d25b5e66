//! `tool.no_change` (seed 004): the same call with evidence of no change in 3 consecutive
//! rounds -> steer; 2 more such rounds -> abort with a status summary. Exact evidence only.

use super::round::Outcome;
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{Action, Directives, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NoChange {
    sig: u64,
    streak: usize,
    last_round: u32,
}

impl NoChange {
    /// A result of call `sig` (in round `round`, of `tool`) classified as `outcome`.
    pub fn on_result(&mut self, sig: u64, tool: &str, round: u32, outcome: Outcome, cx: &mut Cx) {
        if outcome != Outcome::Nothing {
            if sig == self.sig {
                self.streak = 0;
            }
            return;
        }
        if sig == self.sig && round == self.last_round {
            return;
        }
        if sig == self.sig && round == self.last_round + 1 && self.streak > 0 {
            self.streak += 1;
        } else {
            self.sig = sig;
            self.streak = 1;
        }
        self.last_round = round;
        let p = &cx.policy.tool;
        let evidence = json!({"tool": tool, "rounds": self.streak, "steer_at": p.no_change_steer_rounds, "abort_at": p.no_change_abort_rounds});
        if self.streak == p.no_change_steer_rounds {
            let msg = format!(
                "`{tool}` has produced no new effect for {} rounds in a row. Change direction; \
                 {} more rounds without change will end this run.",
                self.streak,
                p.no_change_abort_rounds
                    .saturating_sub(p.no_change_steer_rounds)
            );
            cx.emit(Finding::new(Rule::NoChange, Action::Steer, msg, evidence));
        } else if self.streak == p.no_change_abort_rounds {
            let msg = format!(
                "`{tool}` produced no new effect for {} rounds in a row after a warning. The run is \
                 stopped: summarise what is done, what blocks you, and the next step.",
                self.streak
            );
            let d = Directives {
                stop_tool_calls: Some(true),
                ..Default::default()
            };
            cx.emit(
                Finding::new(Rule::NoChange, Action::Abort, msg, evidence)
                    .attempt(2)
                    .directives(d),
            );
        }
    }
}
