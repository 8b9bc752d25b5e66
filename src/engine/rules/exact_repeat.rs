//! `tool.exact_repeat` (seed 000): the same tool with the same canonical args 3 times in
//! the last 6 calls -> block the call and stop the round's remaining calls. A call made
//! after a successful mutation since its previous occurrence looks at a changed world and
//! does not count (ours, from real coding-agent traces). A side effect repeated is the
//! exception: a call (other than a shell command) that already succeeded as a mutation
//! twice with these arguments is blocked on the third, whatever its outputs (a new id each
//! time) and whatever changed in between: another email, refund or booking (ours). A
//! navigation step (`click`, `go_back`, …) that returns to the same place after the same
//! tool found something new in between (back to the results page after opening another
//! item) is browsing, and that occurrence does not count (ours, from web-agent traces).

use super::calls::{first_made, polling_with_progress, CallWindow};
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExactRepeat {
    /// Signature last blocked and how many blocks it got in a row.
    last_sig: u64,
    blocks: u32,
}

impl ExactRepeat {
    /// Judges the newest call of `window`; returns true when it blocked.
    pub fn on_call(&mut self, window: &CallWindow, cx: &mut Cx) -> bool {
        let p = &cx.policy.tool;
        let Some(call) = window.newest() else {
            return false;
        };
        let shell = p.is_shell(&call.tool);
        // A shell tool runs every kind of command: another command's new output is no sign
        // that the agent moved on.
        let matches: Vec<_> = window
            .repeatable(p.window - 1)
            .filter(|c| c.sig == call.sig && (shell || !window.new_ground_after(c)))
            .collect();
        let effects = window.effects_of(call.sig);
        // Shell commands re-run builds and installs between edits on purpose: not counted.
        let repeated_effect = effects + 1 >= p.repeat_threshold && !shell;
        if !cx.enabled(Rule::ExactRepeat) {
            return false;
        }
        if !repeated_effect
            && (matches.len() + 1 < p.repeat_threshold
                || polling_with_progress(matches.iter().copied()))
        {
            return false;
        }
        self.blocks = if self.last_sig == call.sig {
            self.blocks + 1
        } else {
            1
        };
        self.last_sig = call.sig;
        let (msg, count) = if repeated_effect {
            let msg = format!(
                "Blocked: `{}` already succeeded {} times with these same arguments; calling it \
                 again repeats its effect (another message, refund or booking). Check what the \
                 earlier calls did, and tell the user, instead of doing it again.",
                call.tool, effects
            );
            (msg, effects + 1)
        } else {
            let msg = format!(
                "Blocked: `{}` was called with the same arguments {} times in the last {} calls. \
                 It will not give a different answer; change approach or report what you have.",
                call.tool,
                matches.len() + 1,
                p.window
            );
            (msg, matches.len() + 1)
        };
        let mut evidence = json!({"tool": call.tool, "count": count, "window": p.window, "args_hash": format!("{:016x}", call.sig)});
        if repeated_effect {
            evidence["repeated_effect"] = true.into();
        }
        let mut finding =
            Finding::new(Rule::ExactRepeat, Action::Block, msg, evidence).attempt(self.blocks);
        if let Some(since) = first_made(matches.iter().copied()) {
            finding = finding.since(since);
        }
        cx.emit(finding);
        true
    }
}
