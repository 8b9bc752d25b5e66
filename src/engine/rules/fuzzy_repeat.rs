//! `tool.fuzzy_repeat` (seed 000): same tool, serialized args of at least 50 chars, 3-gram
//! Jaccard of at least 0.8, 3 times in the last 6 calls: block. Calls that differ in an
//! identity key (path, url, page, offset, …) are never similar (ours).

use super::calls::{polling_with_progress, similarity, CallWindow};
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FuzzyRepeat {
    blocks: u32,
    last_tool: String,
}

impl FuzzyRepeat {
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
            .earlier(p.window - 1)
            .filter(|c| c.tool == call.tool && c.identity == call.identity)
            .filter_map(|c| {
                let s = similarity(fields, c.fields.as_ref()?);
                (s >= p.fuzzy_similarity).then(|| {
                    best = best.min(s);
                    c
                })
            })
            .collect();
        if similar.len() + 1 < p.repeat_threshold || polling_with_progress(similar.iter().copied())
        {
            return false;
        }
        self.blocks = if self.last_tool == call.tool {
            self.blocks + 1
        } else {
            1
        };
        self.last_tool = call.tool.clone();
        let msg = format!(
            "Blocked: `{}` was called {} times in the last {} calls with nearly the same arguments. \
             Repeating it will not help; try a different approach or report what you have.",
            call.tool,
            similar.len() + 1,
            p.window
        );
        let evidence = json!({"tool": call.tool, "count": similar.len() + 1, "window": p.window, "min_similarity": (best * 1000.0).round() / 1000.0});
        cx.emit(Finding::new(Rule::FuzzyRepeat, Action::Block, msg, evidence).attempt(self.blocks));
        true
    }
}
