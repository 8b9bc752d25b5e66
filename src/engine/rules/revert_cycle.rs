//! `tool.revert_cycle` (ours, from real coding-agent traces): an edit / test / revert cycle
//! longer than the repeat window. The same restore (a file put back from the same copy:
//! `cp f.orig f`, `git checkout -- f`, however the command is spelled; an editor's
//! `undo_edit` of the same file) proposed for the 3rd time in a request after the first two
//! succeeded, or a mutation whose `state_after` returns the resource to a state
//! seen before for the 3rd time -> steer, once per restore or resource.

use super::calls::CallRecord;
use crate::engine::canon::hash64;
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::VecDeque;

/// Restores and resources remembered per request (bounded; the oldest go first).
const KEEP: usize = 32;
/// States remembered per resource.
const STATES: usize = 16;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Restore {
    /// Which restore (`CallRecord::restore_id`; the call's signature in older states).
    sig: u64,
    done: u32,
    reported: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Resource {
    key: u64,
    states: VecDeque<u64>,
    /// The state the last mutation left it in.
    #[serde(default)]
    current: Option<u64>,
    returns: u32,
    reported: bool,
    /// The XOR of the partial edits applied to it in this request (`on_swap`).
    #[serde(default)]
    edits: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RevertCycle {
    restores: VecDeque<Restore>,
    resources: VecDeque<Resource>,
}

impl RevertCycle {
    /// A restore is proposed: steer when it already succeeded `revert_repeat - 1` times.
    /// Returns true when it steered.
    pub fn on_call(&mut self, call: &CallRecord, cx: &mut Cx) -> bool {
        if !call.restores || !cx.enabled(Rule::RevertCycle) {
            return false;
        }
        let need = cx.policy.tool.revert_repeat as u32;
        let Some(r) = self
            .restores
            .iter_mut()
            .find(|r| r.sig == call.restore_id() && !r.reported && r.done + 1 >= need)
        else {
            return false;
        };
        r.reported = true;
        let count = r.done + 1;
        let msg = format!(
            "You are restoring the same file from the same copy again ({count} times in this \
             request): each fix you tried was undone. Stop the edit / test / revert cycle: read \
             the failure once more, write down why the last fixes failed, and change approach."
        );
        cx.emit(Finding::new(
            Rule::RevertCycle,
            Action::Steer,
            msg,
            json!({"tool": call.tool, "count": count, "kind": "restore"}),
        ));
        true
    }

    /// A restore (`CallRecord::restore_id`) succeeded.
    pub fn on_restored(&mut self, sig: u64) {
        match self.restores.iter_mut().find(|r| r.sig == sig) {
            Some(r) => r.done += 1,
            None => {
                self.restores.push_back(Restore {
                    sig,
                    done: 1,
                    reported: false,
                });
                if self.restores.len() > KEEP {
                    self.restores.pop_front();
                }
            }
        }
    }

    /// A partial edit of `resource` succeeded, its change `delta` (`call_kind::swap_edit`):
    /// the file's state is the XOR of the edits made to it in the request, so an edit that
    /// puts text back returns it to a state seen before.
    pub fn on_swap(&mut self, resource: &str, delta: u64, cx: &mut Cx) {
        let key = hash64(resource.as_bytes());
        let edits = self
            .resources
            .iter()
            .find(|r| r.key == key)
            .map_or(0, |r| r.edits);
        let before = format!("edits {edits:016x}");
        let after = format!("edits {:016x}", edits ^ delta);
        self.on_state(resource, Some(&before), &after, cx);
        if let Some(r) = self.resources.iter_mut().find(|r| r.key == key) {
            r.edits = edits ^ delta;
        }
    }

    /// A mutation reported the resource's state before and after it.
    pub fn on_state(&mut self, resource: &str, before: Option<&str>, after: &str, cx: &mut Cx) {
        let key = hash64(resource.as_bytes());
        let pos = match self.resources.iter().position(|r| r.key == key) {
            Some(i) => i,
            None => {
                self.resources.push_back(Resource {
                    key,
                    ..Default::default()
                });
                if self.resources.len() > KEEP {
                    self.resources.pop_front();
                }
                self.resources.len() - 1
            }
        };
        let r = &mut self.resources[pos];
        let before = before.map(|b| hash64(b.as_bytes()));
        let after = hash64(after.as_bytes());
        // Nothing changed, by its evidence or written again as it already was: not a
        // return (`tool.no_change` and the repeat rules judge those).
        if before == Some(after) || (before.is_none() && r.current == Some(after)) {
            return;
        }
        r.current = Some(after);
        if r.states.contains(&after) {
            r.returns += 1;
        }
        for h in before.into_iter().chain([after]) {
            if !r.states.contains(&h) {
                r.states.push_back(h);
                if r.states.len() > STATES {
                    r.states.pop_front();
                }
            }
        }
        let need = cx.policy.tool.revert_repeat as u32;
        if r.returns >= need && !r.reported {
            r.reported = true;
            let msg = format!(
                "`{resource}` went back to an earlier state {} times in this request: changes are \
                 being made and undone. Stop the edit / test / revert cycle and change approach.",
                r.returns
            );
            cx.emit(Finding::new(
                Rule::RevertCycle,
                Action::Steer,
                msg,
                json!({"resource": crate::engine::verdict::clip(resource, 200), "count": r.returns, "kind": "state"}),
            ));
        }
    }
}
