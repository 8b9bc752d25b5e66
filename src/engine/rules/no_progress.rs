//! `progress.no_progress` (seed 004): 2 consecutive rounds proven to produce nothing new ->
//! one warning per episode. Unknown rounds never count (and end the streak).

use super::round::Outcome;
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NoProgress {
    streak: usize,
    warned: bool,
}

impl NoProgress {
    pub fn on_round(&mut self, outcome: Outcome, cx: &mut Cx) {
        if outcome != Outcome::Nothing {
            *self = NoProgress::default();
            return;
        }
        self.streak += 1;
        if self.streak >= cx.policy.progress.no_progress_rounds && !self.warned {
            self.warned = true;
            let msg = format!(
                "The last {} rounds produced nothing new. Step back: check what you already have \
                 and change direction before calling more tools.",
                self.streak
            );
            cx.emit(Finding::new(
                Rule::NoProgress,
                Action::Warn,
                msg,
                json!({"rounds": self.streak}),
            ));
        }
    }
}
