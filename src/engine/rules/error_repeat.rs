//! `tool.error_repeat` (ours, after OpenHands): a tool failing with the same error 3 times
//! in a row -> steer, once per streak. See docs/decisions.md for why args may differ.

use crate::engine::canon::hash64;
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{clip, Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ErrorRepeat {
    key: u64,
    streak: usize,
}

impl ErrorRepeat {
    pub fn on_result(&mut self, tool: &str, error: Option<&str>, cx: &mut Cx) {
        let Some(error) = error else {
            self.streak = 0;
            return;
        };
        let normalized: String = error.split_whitespace().collect::<Vec<_>>().join(" ");
        let key = hash64(format!("{tool}\0{normalized}").as_bytes());
        if key == self.key && self.streak > 0 {
            self.streak += 1;
        } else {
            self.key = key;
            self.streak = 1;
        }
        if self.streak == cx.policy.tool.error_repeat {
            let msg = format!(
                "`{tool}` failed {} times in a row with the same error. Retrying will not fix it: \
                 read the error, change the call, or report the blocker.",
                self.streak
            );
            cx.emit(Finding::new(
                Rule::ErrorRepeat,
                Action::Steer,
                msg,
                json!({"tool": tool, "count": self.streak, "error": clip(&normalized, 200)}),
            ));
        }
    }
}
