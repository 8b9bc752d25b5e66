//! What counts as new information in a request: the outputs its calls brought back
//! (`evidence.output_hash`), remembered (bounded) so that a round whose every result is
//! new is told from one that brought back something already seen. Pure.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Outputs remembered per request, at most (the oldest go first): a sweep of 30 places
/// and what came back from each fits, at 4 bytes each (32 bits of the hash: a false
/// "seen" needs a collision among 64 values, about 1 in 67 million).
const KEEP: usize = 64;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SeenOutputs {
    outputs: VecDeque<u32>,
}

impl SeenOutputs {
    /// Notes an output (hashed); true when the request had not seen it before.
    pub fn note(&mut self, output: u64) -> bool {
        let output = (output >> 32) as u32;
        if self.outputs.contains(&output) {
            return false;
        }
        self.outputs.push_back(output);
        if self.outputs.len() > KEEP {
            self.outputs.pop_front();
        }
        true
    }

    pub fn heap_bytes(&self) -> usize {
        self.outputs.capacity() * 4
    }
}

/// How a round's results read for the freshness rules: each call answered `ok` with an
/// output the request had not seen (new), or not (stale: a failure, or an output seen
/// before); a result without an output hash says nothing either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Freshness {
    pub new: u32,
    pub stale: u32,
}

impl Freshness {
    /// A result of the round: `Some(true)` for an `ok` result with an unseen output,
    /// `Some(false)` for a failure or a seen output, `None` when it said nothing.
    pub fn add(&mut self, new_output: Option<bool>) {
        match new_output {
            Some(true) => self.new += 1,
            Some(false) => self.stale += 1,
            None => {}
        }
    }

    /// Every one of the round's `calls` brought back something new.
    pub fn all_new(&self, calls: u32) -> bool {
        calls > 0 && self.stale == 0 && self.new >= calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_is_new_once() {
        let mut s = SeenOutputs::default();
        assert!(s.note(1 << 32) && s.note(2 << 32));
        assert!(!s.note(1 << 32));
    }

    #[test]
    fn a_round_is_fresh_only_when_every_call_brought_something_new() {
        let mut f = Freshness::default();
        f.add(Some(true));
        assert!(!f.all_new(2), "one call still unanswered");
        f.add(Some(true));
        assert!(f.all_new(2));
        f.add(None);
        assert!(
            !f.all_new(3),
            "a result without an output hash says nothing"
        );
        let mut g = Freshness::default();
        g.add(Some(true));
        g.add(Some(false));
        assert!(!g.all_new(2));
    }
}
