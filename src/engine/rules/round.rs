//! Rounds (one model response that made tool calls) and what each produced, classified from
//! the runtime's evidence (seed 004's progress evidence): productive, discovery, nothing
//! new, unknown, neutral. Unknown never counts as "no progress". Pure.

use crate::engine::canon::hash64;
use crate::engine::event::{Effect, Evidence, ToolStatus};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// A change was made (hashes differ) or claimed.
    Productive,
    /// New information was read.
    Discovery,
    /// Proven to produce nothing new.
    Nothing,
    /// The runtime could not tell.
    Unknown,
    /// A failed call: neither progress nor stagnation.
    Neutral,
}

/// What the request has read, to recognise re-reads (bounded).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReadLog {
    entries: VecDeque<(u64, Option<String>, Vec<[i64; 2]>)>,
}

const READ_LOG_RESOURCES: usize = 32;
const READ_LOG_RANGES: usize = 16;

impl ReadLog {
    fn observe(
        &mut self,
        resource: &str,
        output: Option<&String>,
        range: Option<[i64; 2]>,
    ) -> bool {
        let key = hash64(resource.as_bytes());
        let seen = match self.entries.iter().position(|e| e.0 == key) {
            Some(i) => {
                let e = &self.entries[i];
                let same_output = output.is_some() && e.1.as_ref() == output;
                let covered =
                    range.is_some_and(|[a, b]| e.2.iter().any(|[x, y]| *x <= a && b <= *y));
                let changed = output.is_some() && e.1.is_some() && e.1.as_ref() != output;
                same_output || (covered && !changed)
            }
            None => false,
        };
        let entry = match self.entries.iter().position(|e| e.0 == key) {
            Some(i) => self.entries.remove(i).unwrap_or_default(),
            None => (key, None, Vec::new()),
        };
        let (k, mut out, mut ranges) = entry;
        if output.is_some() {
            out = output.cloned();
        }
        if let Some(r) = range {
            ranges.push(r);
            if ranges.len() > READ_LOG_RANGES {
                ranges.remove(0);
            }
        }
        self.entries.push_back((k, out, ranges));
        if self.entries.len() > READ_LOG_RESOURCES {
            self.entries.pop_front();
        }
        seen
    }
}

/// Classifies one tool result.
pub fn classify(status: ToolStatus, evidence: Option<&Evidence>, reads: &mut ReadLog) -> Outcome {
    if status == ToolStatus::Error {
        return Outcome::Neutral;
    }
    let Some(ev) = evidence else {
        return Outcome::Unknown;
    };
    match (ev.effect, ev.new_info) {
        (Some(Effect::Mutation), _) => match (&ev.state_before, &ev.state_after, ev.new_info) {
            (Some(a), Some(b), _) if a == b => Outcome::Nothing,
            (Some(_), Some(_), _) => Outcome::Productive,
            (_, _, Some(false)) => Outcome::Nothing,
            _ => Outcome::Productive,
        },
        (Some(Effect::Read), Some(true)) => Outcome::Discovery,
        (Some(Effect::Read), Some(false)) => Outcome::Nothing,
        (Some(Effect::Read), None) => match &ev.resource {
            Some(r) => {
                if reads.observe(r, ev.output_hash.as_ref(), ev.read_range) {
                    Outcome::Nothing
                } else {
                    Outcome::Discovery
                }
            }
            None => Outcome::Unknown,
        },
        (Some(Effect::None), Some(true)) => Outcome::Discovery,
        (Some(Effect::None), _) => Outcome::Nothing,
        (_, Some(false)) => Outcome::Nothing,
        (_, Some(true)) => Outcome::Discovery,
        _ => Outcome::Unknown,
    }
}

/// The round in progress: its calls, results so far and whether its response ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpenRound {
    pub turn_id: String,
    pub index: u32,
    pub calls: u32,
    pub results: u32,
    pub ended: bool,
    pub counts: [u32; 5],
    /// Every call so far used a read/search/list tool or reported a read.
    pub discovery_only: bool,
    /// Whether its results brought new information (`fresh`).
    #[serde(default)]
    pub fresh: super::fresh::Freshness,
}

impl OpenRound {
    pub fn new(turn_id: &str, index: u32) -> Self {
        OpenRound {
            turn_id: turn_id.to_string(),
            index,
            calls: 0,
            results: 0,
            ended: false,
            counts: [0; 5],
            discovery_only: true,
            fresh: Default::default(),
        }
    }

    pub fn add(&mut self, outcome: Outcome) {
        self.counts[outcome as usize] += 1;
        self.results += 1;
    }

    /// Every call of the round came back `ok` with an output the request had not seen.
    pub fn all_new(&self) -> bool {
        self.fresh.all_new(self.calls)
    }

    pub fn complete(&self) -> bool {
        self.ended && self.results >= self.calls
    }

    /// The round's outcome: any change wins; any unknown makes it unknown; then discovery,
    /// then nothing new; a round of failures only is neutral. Missing results are unknown.
    pub fn outcome(&self) -> Outcome {
        let c = |o: Outcome| self.counts[o as usize];
        if c(Outcome::Productive) > 0 {
            Outcome::Productive
        } else if c(Outcome::Unknown) > 0 || self.results < self.calls {
            Outcome::Unknown
        } else if c(Outcome::Discovery) > 0 {
            Outcome::Discovery
        } else if c(Outcome::Nothing) > 0 {
            Outcome::Nothing
        } else {
            Outcome::Neutral
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(effect: Effect) -> Evidence {
        Evidence {
            effect: Some(effect),
            ..Default::default()
        }
    }

    #[test]
    fn classification_follows_the_evidence() {
        let mut r = ReadLog::default();
        assert_eq!(classify(ToolStatus::Ok, None, &mut r), Outcome::Unknown);
        assert_eq!(
            classify(ToolStatus::Ok, Some(&ev(Effect::Unknown)), &mut r),
            Outcome::Unknown
        );
        assert_eq!(
            classify(ToolStatus::Error, Some(&ev(Effect::Read)), &mut r),
            Outcome::Neutral
        );
        let same = Evidence {
            state_before: Some("a".into()),
            state_after: Some("a".into()),
            ..ev(Effect::Mutation)
        };
        assert_eq!(
            classify(ToolStatus::Ok, Some(&same), &mut r),
            Outcome::Nothing
        );
        let changed = Evidence {
            state_after: Some("b".into()),
            ..same
        };
        assert_eq!(
            classify(ToolStatus::Ok, Some(&changed), &mut r),
            Outcome::Productive
        );
        let read = Evidence {
            resource: Some("f".into()),
            read_range: Some([0, 100]),
            ..ev(Effect::Read)
        };
        assert_eq!(
            classify(ToolStatus::Ok, Some(&read), &mut r),
            Outcome::Discovery
        );
        let reread = Evidence {
            read_range: Some([10, 50]),
            ..read.clone()
        };
        assert_eq!(
            classify(ToolStatus::Ok, Some(&reread), &mut r),
            Outcome::Nothing
        );
        let next_page = Evidence {
            read_range: Some([100, 200]),
            ..read
        };
        assert_eq!(
            classify(ToolStatus::Ok, Some(&next_page), &mut r),
            Outcome::Discovery
        );
    }
}
