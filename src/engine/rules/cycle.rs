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

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cycle {
    /// Recent (signature, tool) pairs, newest last.
    seq: VecDeque<(u64, String)>,
    /// True while the sequence still ends in the cycle already reported.
    active: bool,
    /// For the newest calls of `seq` (aligned from the back; states written before issue 34
    /// have none): each call's position in its request and what its result said (its
    /// output hash or error, hashed; 32 bits are plenty to tell one period's answers from
    /// the last), once known.
    #[serde(default)]
    answers: VecDeque<(u64, Option<u32>)>,
    /// The period of the cycle reported (0: not known, in older states).
    #[serde(default)]
    period: usize,
    /// Calls blocked in the current episode.
    #[serde(default)]
    blocks: u32,
}

impl Cycle {
    /// A call was proposed; `blocked`: another rule already blocked it.
    pub fn on_call(&mut self, call: &CallRecord, blocked: bool, cx: &mut Cx) {
        let p = &cx.policy.tool;
        let repeats = p.cycle_repeats;
        self.seq.push_back((call.sig, call.tool.clone()));
        self.answers.push_back((call.at, None));
        let keep = p.cycle_max_period * (repeats + 1);
        while self.seq.len() > keep {
            self.seq.pop_front();
        }
        while self.answers.len() > self.seq.len() {
            self.answers.pop_front();
        }
        let found = (p.cycle_min_period..=p.cycle_max_period)
            .find(|&period| self.ends_in_cycle(period, repeats));
        if self.active {
            let period = match self.period {
                0 => found,
                known => Some(known).filter(|&k| self.ends_in_cycle(k, repeats)),
            };
            if let Some(period) = period {
                if !blocked
                    && self.ends_in_cycle(period, repeats + 1)
                    && self.answers_repeat(period)
                {
                    self.block(period, cx);
                }
                return;
            }
            self.active = false;
            self.period = 0;
            self.blocks = 0;
        }
        if let Some(period) = found {
            self.active = true;
            self.period = period;
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
        if let Some(a) = self.answers.iter_mut().rev().find(|a| a.0 == at) {
            a.1 = result.map(|r| (r >> 32) as u32);
        }
    }

    fn tools(&self, period: usize) -> Vec<&str> {
        let n = self.seq.len();
        self.seq
            .range(n - period..)
            .map(|(_, t)| t.as_str())
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
        let n = self.answers.len();
        n > 2 * period
            && (n - period..n - 1).all(|i| {
                let (now, then) = (self.answers[i].1, self.answers[i - period].1);
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
        // Compared in place, newest first: most sequences differ at once.
        let start = n - period * repeats;
        let sig = |i: usize| self.seq[start + i].0;
        let periodic = |d: usize| (d..period * repeats).rev().all(|i| sig(i) == sig(i - d));
        periodic(period) && !(1..period).any(|d| period % d == 0 && periodic(d))
    }
}
