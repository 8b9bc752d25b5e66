//! `tool.near_duplicate` (seed 004): 6 consecutive calls identical once volatile keys
//! (request_id, nonce, timestamp, …) are dropped -> one warning per streak, never stronger.

use super::calls::CallRecord;
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NearDuplicate {
    sig: u64,
    streak: usize,
    warned: bool,
}

impl NearDuplicate {
    pub fn on_call(&mut self, call: &CallRecord, cx: &mut Cx) {
        if call.near_sig == self.sig {
            self.streak += 1;
        } else {
            *self = NearDuplicate {
                sig: call.near_sig,
                streak: 1,
                warned: false,
            };
        }
        if self.streak >= cx.policy.tool.near_duplicate_streak && !self.warned {
            self.warned = true;
            let msg = format!(
                "You have called `{}` {} times in a row with nearly identical arguments. \
                 Consider a different target, or report the progress you have made.",
                call.tool, self.streak
            );
            cx.emit(Finding::new(
                Rule::NearDuplicate,
                Action::Warn,
                msg,
                json!({"tool": call.tool, "streak": self.streak}),
            ));
        }
    }
}
