//! `content.answer_repeat` (ours, after OpenHands' stuck detector): the same assistant
//! answer, any length, 3 times in a row with no tool call between them (across the user's
//! requests: "try again" -> the same refusal) -> steer, once per streak.

use crate::engine::canon::hash64;
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{clip, Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AnswerRepeat {
    last: u64,
    streak: usize,
}

impl AnswerRepeat {
    /// A finished answer (the visible text of a response).
    pub fn on_answer(&mut self, text: &str, cx: &mut Cx) {
        let normalized = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if normalized.is_empty() {
            return;
        }
        let h = hash64(normalized.to_lowercase().as_bytes()) | 1;
        if h == self.last {
            self.streak += 1;
        } else {
            self.last = h;
            self.streak = 1;
        }
        let need = cx.policy.reasoning.answer_repeat;
        if self.streak == need {
            let msg = format!(
                "You have given the same answer {} times in a row. Repeating it does not help the \
                 user: answer what they asked now, differently, or say plainly what you cannot do.",
                self.streak
            );
            cx.emit(Finding::new(
                Rule::AnswerRepeat,
                Action::Steer,
                msg,
                json!({"count": self.streak, "span": clip(&normalized, 200)}),
            ));
        }
    }

    /// A tool call between answers ends the streak: the agent did something.
    pub fn on_tool_call(&mut self) {
        *self = AnswerRepeat::default();
    }
}
