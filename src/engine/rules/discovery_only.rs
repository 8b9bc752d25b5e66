//! `progress.discovery_only` (seed 004): 8 consecutive rounds of only read/search/list
//! tools -> one warning per episode. The 8 is relative to the request's round budget: it
//! applies as is up to a budget of 80 rounds, and a larger budget needs 10 % of it (25 of
//! the fleet default 250), so long healthy runs that explore are not nagged (ours). A
//! round whose every call brought back an output the request had not seen is exploration
//! that keeps finding things: it neither counts nor ends the streak (ours, issue 34).

use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DiscoveryOnly {
    streak: usize,
    warned: bool,
}

impl DiscoveryOnly {
    /// Rounds of discovery only that earn the warning in a request of `budget` rounds.
    pub fn threshold(budget: usize, cx: &Cx) -> usize {
        let p = &cx.policy.progress;
        let scaled = (budget as f64 * p.discovery_budget_ratio).ceil() as usize;
        p.discovery_rounds.max(scaled)
    }

    /// A round closed: `discovery_only` when each call read, searched or listed; `all_new`
    /// when each brought back something the request had not seen.
    pub fn on_round(&mut self, discovery_only: bool, all_new: bool, budget: usize, cx: &mut Cx) {
        if !discovery_only {
            *self = DiscoveryOnly::default();
            return;
        }
        if all_new {
            return;
        }
        self.streak += 1;
        if self.streak >= Self::threshold(budget, cx) && !self.warned {
            self.warned = true;
            let msg = format!(
                "You have spent {} rounds only reading and searching. You likely know enough: \
                 start making the change, or report your findings.",
                self.streak
            );
            cx.emit(Finding::new(
                Rule::DiscoveryOnly,
                Action::Warn,
                msg,
                json!({"rounds": self.streak}),
            ));
        }
    }
}
