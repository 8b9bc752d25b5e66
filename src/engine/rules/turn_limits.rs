//! Per-response limits (seed 003): `reasoning.idle` (reasoning > 60 s with no visible
//! content), `reasoning.overflow` (> 20 000 reasoning chars), `turn.timeout` (> 120 s).
//! Each fires at most once per response, through the turn's escalation ladder.

use super::escalation::Ladder;
use crate::engine::emit::Cx;
use crate::engine::verdict::Rule;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// One model response.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Turn {
    pub id: String,
    pub first_ms: i64,
    pub reasoning_from_ms: Option<i64>,
    pub reasoning_chars: usize,
    pub saw_content: bool,
    pub tool_calls: u32,
    pub ladder: Ladder,
    idle_fired: bool,
    overflow_fired: bool,
    timeout_fired: bool,
}

impl Turn {
    pub fn new(id: &str, ts: i64) -> Self {
        Turn {
            id: id.to_string(),
            first_ms: ts,
            ..Default::default()
        }
    }

    /// Returns 1 when this made the guard give up on the turn.
    pub fn on_reasoning(&mut self, chars: usize, ts: i64, cx: &mut Cx) -> u32 {
        let from = *self.reasoning_from_ms.get_or_insert(ts);
        self.reasoning_chars += chars;
        let r = &cx.policy.reasoning;
        let mut gave_up = 0;
        let idle_ms = ts.saturating_sub(from);
        if !self.saw_content
            && idle_ms > (r.max_reasoning_secs as i64) * 1000
            && !self.idle_fired
            && cx.enabled(Rule::ReasoningIdle)
        {
            self.idle_fired = true;
            let detail = format!("reasoning for {} s with no visible output", idle_ms / 1000);
            gave_up += self.ladder.escalate(
                Rule::ReasoningIdle,
                &detail,
                json!({"reasoning_s": idle_ms / 1000, "limit_s": r.max_reasoning_secs}),
                cx,
            ) as u32;
        }
        if self.reasoning_chars > r.reasoning_char_limit
            && !self.overflow_fired
            && cx.enabled(Rule::ReasoningOverflow)
        {
            self.overflow_fired = true;
            let detail = format!("{} reasoning chars in one response", self.reasoning_chars);
            gave_up += self.ladder.escalate(
                Rule::ReasoningOverflow,
                &detail,
                json!({"chars": self.reasoning_chars, "limit": r.reasoning_char_limit}),
                cx,
            ) as u32;
        }
        gave_up
    }

    /// Any event of this response: checks its total duration.
    pub fn on_event(&mut self, ts: i64, cx: &mut Cx) -> u32 {
        let r = &cx.policy.reasoning;
        let elapsed = ts.saturating_sub(self.first_ms);
        if elapsed > (r.max_total_secs as i64) * 1000
            && !self.timeout_fired
            && cx.enabled(Rule::TurnTimeout)
        {
            self.timeout_fired = true;
            let detail = format!("this response has run {} s", elapsed / 1000);
            return self.ladder.escalate(
                Rule::TurnTimeout,
                &detail,
                json!({"elapsed_s": elapsed / 1000, "limit_s": r.max_total_secs}),
                cx,
            ) as u32;
        }
        0
    }
}
