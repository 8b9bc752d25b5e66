//! `tool.cycle` (ours, after Gemini CLI): the call sequence ends in a cycle of period 2..5
//! repeated 3 times (A B C A B C A B C) -> steer, once per cycle episode. A cycle that goes
//! on after the steer for one more whole period, its calls getting the same answers as
//! the period before, has ignored the steer: each further call that continues it is
//! blocked (ours, after the seeds' ladders: feedback first, a stop when it is ignored).

use super::calls::CallRecord;
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::VecDeque;

/// One call of the sequence.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Step {
    sig: u64,
    tool: String,
    /// Position of the call in its request.
    at: u64,
    /// What its result said (output hash or error), once known.
    result: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cycle {
    /// Recent calls, newest last.
    seq: VecDeque<Step>,
    /// The period of the cycle already reported, while the sequence still ends in it.
    active: Option<usize>,
    /// Calls blocked in the current episode.
    blocks: u32,
}

impl Cycle {
    /// A call was proposed; `blocked`: another rule already blocked it.
    pub fn on_call(&mut self, call: &CallRecord, blocked: bool, cx: &mut Cx) {
        let p = &cx.policy.tool;
        let repeats = p.cycle_repeats;
        self.seq.push_back(Step {
            sig: call.sig,
            tool: call.tool.clone(),
            at: call.at,
            result: None,
        });
        while self.seq.len() > p.cycle_max_period * (repeats + 1) {
            self.seq.pop_front();
        }
        if let Some(period) = self.active {
            if self.ends_in_cycle(period, repeats) {
                if !blocked
                    && self.ends_in_cycle(period, repeats + 1)
                    && self.answers_repeat(period)
                {
                    self.block(period, cx);
                }
                return;
            }
            self.active = None;
            self.blocks = 0;
        }
        let found = (p.cycle_min_period..=p.cycle_max_period)
            .find(|&period| self.ends_in_cycle(period, repeats));
        if let Some(period) = found {
            self.active = Some(period);
            let msg = format!(
                "Your last {} tool calls repeat the same sequence ({}) {} times. \
                 The cycle is not converging: stop and try a different approach.",
                period * repeats,
                self.tools(period).join(" -> "),
                repeats
            );
            cx.emit(Finding::new(
                Rule::Cycle,
                Action::Steer,
                msg,
                json!({"period": period, "repeats": repeats, "tools": self.tools(period)}),
            ));
        }
    }

    /// The result of the call made at position `at` came back: `result` is its output hash
    /// or its error, hashed (`None` when it said neither).
    pub fn on_result(&mut self, at: u64, result: Option<u64>) {
        if let Some(step) = self.seq.iter_mut().rev().find(|s| s.at == at) {
            step.result = result;
        }
    }

    fn tools(&self, period: usize) -> Vec<&str> {
        let n = self.seq.len();
        self.seq
            .range(n - period..)
            .map(|s| s.tool.as_str())
            .collect()
    }

    fn block(&mut self, period: usize, cx: &mut Cx) {
        self.blocks += 1;
        let msg = format!(
            "Blocked: the cycle ({}) went on for another round after you were told it is not \
             converging, and its calls got the same answers as before. Stop repeating it: try \
             something else, or report what blocks you.",
            self.tools(period).join(" -> ")
        );
        cx.emit(
            Finding::new(
                Rule::Cycle,
                Action::Block,
                msg,
                json!({"period": period, "escalated": true, "tools": self.tools(period)}),
            )
            .attempt(1 + self.blocks),
        );
    }

    /// The calls of the last whole period before the newest call got the same answers as
    /// their counterparts one period earlier (each known): the cycle learns nothing.
    fn answers_repeat(&self, period: usize) -> bool {
        let n = self.seq.len();
        (n - period..n - 1).all(|i| {
            let (now, then) = (&self.seq[i].result, &self.seq[i - period].result);
            now.is_some() && now == then
        })
    }

    /// The last `period * repeats` signatures repeat with `period`, and the cycle is not
    /// one call repeated (that is `tool.exact_repeat`'s) nor a shorter cycle.
    fn ends_in_cycle(&self, period: usize, repeats: usize) -> bool {
        let n = self.seq.len();
        if n < period * repeats {
            return false;
        }
        let tail: Vec<u64> = self
            .seq
            .range(n - period * repeats..)
            .map(|s| s.sig)
            .collect();
        let periodic = |d: usize| (d..tail.len()).all(|i| tail[i] == tail[i - d]);
        periodic(period) && !(1..period).any(|d| period % d == 0 && periodic(d))
    }
}
