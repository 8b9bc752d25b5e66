//! A failure the guard steered about, tried again anyway: `tool.error_repeat`'s ladder
//! (ours, after the seeds' ladders: 004 feeds back at 3 and stops 2 rounds later, 003
//! steers, then steers harder). Once a request's failure was steered and the agent has
//! failed the same way twice more, each further call of that tool shaped like the failing
//! ones (the same arguments, digits aside: `take knife 7 from countertop 1` after `take
//! knife 6 …`) is blocked before it runs. A call of the same shape that succeeds ends it.

use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Shapes and calls of the failing tries remembered, at most.
const KEEP: usize = 16;

/// Failures after the steer before the next such call is blocked.
pub const AFTER_STEER: u32 = 2;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IgnoredSteer {
    /// The steered failure: hash of its tool and error shape (0: none in this request).
    key: u64,
    tool: String,
    /// Argument shapes of the calls that failed this way.
    shapes: Vec<u64>,
    /// Their signatures (a repeat of one of them is never informative).
    sigs: Vec<u64>,
    /// Non-informative failures this way since the steer, and the try of the last one.
    after: u32,
    last_try: u32,
    /// Calls blocked so far.
    blocks: u32,
    /// When the steered failure first came back (event time).
    since: i64,
}

/// One failed try as the ladder sees it.
pub struct Try<'a> {
    pub tool: &'a str,
    /// `error_spread::Failed::shape_key`.
    pub key: u64,
    pub shape: u64,
    pub sig: u64,
    pub try_no: u32,
    /// Its output is new to the request.
    pub novel: bool,
}

fn remember(list: &mut Vec<u64>, x: u64) {
    if !list.contains(&x) && list.len() < KEEP {
        list.push(x);
    }
}

impl IgnoredSteer {
    /// The guard just steered about this failure (`since`: when the loop began).
    pub fn on_steered(&mut self, t: &Try, since: i64) {
        if self.key == t.key {
            return;
        }
        *self = IgnoredSteer {
            key: t.key,
            tool: t.tool.to_string(),
            last_try: t.try_no,
            since,
            ..Default::default()
        };
        remember(&mut self.shapes, t.shape);
        remember(&mut self.sigs, t.sig);
    }

    /// A failure was steered about in this request (its later failures are counted).
    pub fn armed(&self) -> bool {
        self.key != 0
    }

    /// A try failed after the steer.
    pub fn on_failure(&mut self, t: &Try) {
        if self.key == 0 || t.key != self.key || t.try_no == self.last_try {
            return;
        }
        if t.novel && !self.sigs.contains(&t.sig) {
            return;
        }
        self.after += 1;
        self.last_try = t.try_no;
        remember(&mut self.shapes, t.shape);
        remember(&mut self.sigs, t.sig);
    }

    /// A call of `tool` shaped `shape` succeeded: the agent got past the failure.
    pub fn on_success(&mut self, tool: &str, shape: u64) {
        if self.key != 0 && tool == self.tool && self.shapes.contains(&shape) {
            *self = IgnoredSteer::default();
        }
    }

    /// A call is proposed; blocks it when it tries the steered failure again. Returns true
    /// when it blocked.
    pub fn on_call(&mut self, tool: &str, shape: u64, cx: &mut Cx) -> bool {
        if self.key == 0
            || self.after < AFTER_STEER
            || tool != self.tool
            || !self.shapes.contains(&shape)
            || !cx.enabled(Rule::ErrorRepeat)
        {
            return false;
        }
        self.blocks += 1;
        let msg = format!(
            "Blocked: `{tool}` failed the same way {} more times after you were told to stop \
             retrying it. This call is shaped like those that failed and will fail again: take \
             another approach, or report what blocks you.",
            self.after
        );
        let evidence = json!({"tool": tool, "after_steer": self.after, "escalated": true});
        let mut finding =
            Finding::new(Rule::ErrorRepeat, Action::Block, msg, evidence).attempt(1 + self.blocks);
        if self.since > 0 {
            finding = finding.since(self.since);
        }
        cx.emit(finding);
        true
    }
}
