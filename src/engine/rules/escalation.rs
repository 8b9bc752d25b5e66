//! The escalation ladder for the reasoning, content and turn rules (seed 003): the first
//! detection in a turn steers with the intervention, the second steers harder and lowers
//! `reasoning_effort`, past `max_retries` the guard gives up on the turn (counted).

use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{Action, Directives, Rule};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ladder {
    attempts: u32,
    pub gave_up: bool,
}

impl Ladder {
    /// A detection of `rule`; returns true when the guard gives up on the turn (first time).
    pub fn escalate(&mut self, rule: Rule, detail: &str, evidence: Value, cx: &mut Cx) -> bool {
        if !cx.enabled(rule) {
            return false;
        }
        let r = &cx.policy.reasoning;
        self.attempts += 1;
        if self.attempts > r.max_retries {
            let first = !self.gave_up;
            self.gave_up = true;
            return first;
        }
        let (text, directives) = if self.attempts == 1 {
            (&r.intervention, Directives::default())
        } else {
            (
                &r.escalation,
                Directives {
                    reasoning_effort: Some(r.escalation_reasoning_effort.clone()),
                    ..Default::default()
                },
            )
        };
        let msg = format!("{text} ({detail})");
        cx.emit(
            Finding::new(rule, Action::Steer, msg, evidence)
                .attempt(self.attempts)
                .directives(directives),
        );
        false
    }
}
