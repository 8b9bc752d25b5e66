//! `progress.discovery_only` (seed 004): 8 consecutive rounds of only read/search/list
//! tools -> one warning per episode.

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
    pub fn on_round(&mut self, discovery_only: bool, cx: &mut Cx) {
        if !discovery_only {
            *self = DiscoveryOnly::default();
            return;
        }
        self.streak += 1;
        if self.streak >= cx.policy.progress.discovery_rounds && !self.warned {
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
