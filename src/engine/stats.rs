//! Plain counters the engine keeps; adapters turn them into metrics. Pure, `Copy`.

use super::event::EVENT_TYPES;
use super::verdict::{Action, Rule};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Events handled, by known type (index of `EVENT_TYPES`).
    pub events_by_type: [u64; EVENT_TYPES.len()],
    pub unknown_types: u64,
    pub duplicates: u64,
    pub truncated_texts: u64,
    pub verdicts: [[u64; 4]; Rule::ALL.len()],
    pub escalations_given_up: u64,
    pub sessions_active: u64,
    pub evicted_ttl: u64,
    pub evicted_capacity: u64,
    pub sessions_ended: u64,
}

impl EngineStats {
    pub fn events(&self) -> u64 {
        self.events_by_type.iter().sum::<u64>() + self.unknown_types
    }

    pub fn verdict_count(&self, rule: Rule, action: Action) -> u64 {
        self.verdicts[rule.index()][action.index()]
    }

    pub fn total_verdicts(&self) -> u64 {
        self.verdicts.iter().flatten().sum()
    }
}
