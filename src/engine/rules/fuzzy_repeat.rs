//! `tool.fuzzy_repeat` (seed 000): same tool, serialized args of at least 50 chars, 3-gram
//! Jaccard of at least 0.8, 3 times in the last 6 calls: block, or only steer when the
//! similar calls' results differ from each other or have not all come back (authority
//! after 004: "the results agree" needs results); one steer per group of similar calls,
//! none when every earlier try got an answer of its own. Calls that differ in an identity key
//! (path, url, page, offset, the files a shell command writes or runs) are never similar,
//! calls made after a successful mutation since the earlier one do not count, and calls of
//! one model response are never compared with each other: six searches for six dates in
//! one response are a plan, not a loop (ours).

use super::calls::{
    first_made, results_all_distinct, results_differ, similarity, CallRecord, CallWindow,
};
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FuzzyRepeat {
    blocks: u32,
    last_tool: String,
    /// Positions (`at`) of the calls of the group last steered, newest last: a group of
    /// similar calls gets one steer (issue 20, item 3).
    #[serde(default)]
    steered: Vec<u64>,
}

/// Positions of a steered group remembered (the window is 6 by default).
const GROUP_KEEP: usize = 16;

impl FuzzyRepeat {
    /// True when a steer on the call at `at`, similar to `similar`, should be given: not
    /// when every earlier try got an answer of its own (each changed what the agent knows),
    /// nor when the group already had its steer (the call joins the group either way).
    fn first_steer_of_group(&mut self, at: u64, similar: &[&CallRecord]) -> bool {
        if results_all_distinct(similar.iter().copied()) {
            return false;
        }
        let same_group = similar.iter().any(|c| self.steered.contains(&c.at));
        if !same_group {
            self.steered.clear();
            self.steered.extend(similar.iter().map(|c| c.at));
        }
        self.steered.push(at);
        let over = self.steered.len().saturating_sub(GROUP_KEEP);
        self.steered.drain(..over);
        !same_group
    }

    pub fn on_call(&mut self, window: &CallWindow, cx: &mut Cx) -> bool {
        let p = &cx.policy.tool;
        let Some(call) = window.newest() else {
            return false;
        };
        let Some(fields) = call.fields.as_ref() else {
            return false;
        };
        if !cx.enabled(Rule::FuzzyRepeat) {
            return false;
        }
        let mut best: f64 = 1.0;
        let similar: Vec<_> = window
            .repeatable(p.window - 1)
            .filter(|c| c.tool == call.tool && c.identity == call.identity)
            .filter(|c| c.round != call.round)
            .filter_map(|c| {
                let s = similarity(fields, c.fields.as_ref()?);
                (s >= p.fuzzy_similarity).then(|| {
                    best = best.min(s);
                    c
                })
            })
            .collect();
        // Identical calls alone are `tool.exact_repeat`'s, polling exemption included.
        if similar.len() + 1 < p.repeat_threshold || similar.iter().all(|c| c.sig == call.sig) {
            return false;
        }
        let changing = results_differ(similar.iter().copied());
        // Calls equal but for volatile keys (request ids, timestamps) whose results change
        // are polling that sees change, as for identical calls: `tool.near_duplicate` warns.
        if changing && similar.iter().all(|c| c.near_sig == call.near_sig) {
            return false;
        }
        // Blocking says "the same call got the same result": only once the results are in.
        let unanswered = similar.iter().any(|c| !c.answered);
        let action = if changing || unanswered {
            Action::Steer
        } else {
            Action::Block
        };
        if action == Action::Steer && !self.first_steer_of_group(call.at, &similar) {
            return false;
        }
        self.blocks = if self.last_tool == call.tool {
            self.blocks + 1
        } else {
            1
        };
        self.last_tool = call.tool.clone();
        let msg = if unanswered && !changing {
            format!(
                "`{}` was called {} times in the last {} calls with nearly the same arguments, \
                 before the earlier calls' results came back. Wait for what they return and \
                 decide what you still need before calling it again.",
                call.tool,
                similar.len() + 1,
                p.window
            )
        } else if changing {
            format!(
                "`{}` was called {} times in the last {} calls with nearly the same arguments. \
                 Its answers change, but rephrasing the same call is not converging: step back \
                 and decide what you need before calling it again.",
                call.tool,
                similar.len() + 1,
                p.window
            )
        } else {
            format!(
                "Blocked: `{}` was called {} times in the last {} calls with nearly the same arguments \
                 and got the same result. Repeating it will not help; try a different approach or \
                 report what you have.",
                call.tool,
                similar.len() + 1,
                p.window
            )
        };
        let mut evidence = json!({"tool": call.tool, "count": similar.len() + 1, "window": p.window, "min_similarity": (best * 1000.0).round() / 1000.0, "results_differ": changing});
        if unanswered {
            evidence["results_in"] = false.into();
        }
        let mut finding =
            Finding::new(Rule::FuzzyRepeat, action, msg, evidence).attempt(self.blocks);
        if let Some(since) = first_made(similar.iter().copied()) {
            finding = finding.since(since);
        }
        cx.emit(finding);
        true
    }
}
