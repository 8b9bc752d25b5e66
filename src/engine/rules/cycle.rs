//! `tool.cycle` (ours, after Gemini CLI): the call sequence ends in a cycle of period 2..5
//! repeated 3 times (A B C A B C A B C) -> steer, once per cycle episode.

use super::calls::CallRecord;
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::VecDeque;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cycle {
    /// Recent (signature, tool) pairs, newest last.
    seq: VecDeque<(u64, String)>,
    /// True while the sequence still ends in the cycle already reported.
    active: bool,
}

impl Cycle {
    pub fn on_call(&mut self, call: &CallRecord, cx: &mut Cx) {
        let p = &cx.policy.tool;
        self.seq.push_back((call.sig, call.tool.clone()));
        while self.seq.len() > p.cycle_max_period * p.cycle_repeats {
            self.seq.pop_front();
        }
        let found = (p.cycle_min_period..=p.cycle_max_period)
            .find(|&period| self.ends_in_cycle(period, p.cycle_repeats));
        match found {
            None => self.active = false,
            Some(_) if self.active => {}
            Some(period) => {
                self.active = true;
                let n = self.seq.len();
                let tools: Vec<&str> = self
                    .seq
                    .range(n - period..)
                    .map(|(_, t)| t.as_str())
                    .collect();
                let msg = format!(
                    "Your last {} tool calls repeat the same sequence ({}) {} times. \
                     The cycle is not converging: stop and try a different approach.",
                    period * p.cycle_repeats,
                    tools.join(" -> "),
                    p.cycle_repeats
                );
                cx.emit(Finding::new(
                    Rule::Cycle,
                    Action::Steer,
                    msg,
                    json!({"period": period, "repeats": p.cycle_repeats, "tools": tools}),
                ));
            }
        }
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
            .map(|(s, _)| *s)
            .collect();
        let periodic = |d: usize| (d..tail.len()).all(|i| tail[i] == tail[i - d]);
        periodic(period) && !(1..period).any(|d| period % d == 0 && periodic(d))
    }
}
