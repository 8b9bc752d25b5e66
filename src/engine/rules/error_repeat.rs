//! `tool.error_repeat` (ours, after OpenHands): a tool failing with the same error 3 times
//! in a row -> steer, once per streak. See docs/decisions.md for why args may differ.
//! Also across the requests of a session: the same call failing with the same error in 3
//! requests (a refused action retried each time the user says "try again") -> steer once.

use crate::engine::canon::hash64;
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{clip, Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ErrorRepeat {
    key: u64,
    streak: usize,
}

/// Error text with spacing normalized (what "the same error" means here).
pub fn normalize(error: &str) -> String {
    error.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An error text that says nothing about the failure (empty, `error`, `exit code 1`): two
/// calls failing with it did not fail "the same way" unless they are the same call.
fn uninformative(normalized: &str) -> bool {
    normalized.split(' ').filter(|w| !w.is_empty()).count() < 3 && normalized.len() < 24
}

impl ErrorRepeat {
    /// A result of call `sig` of `tool`; `error` when it failed. Returns true when it steered.
    pub fn on_result(&mut self, sig: u64, tool: &str, error: Option<&str>, cx: &mut Cx) -> bool {
        let Some(error) = error else {
            self.streak = 0;
            return false;
        };
        let normalized = normalize(error);
        let call = if uninformative(&normalized) { sig } else { 0 };
        let key = hash64(format!("{tool}\0{call:x}\0{normalized}").as_bytes());
        if key == self.key && self.streak > 0 {
            self.streak += 1;
        } else {
            self.key = key;
            self.streak = 1;
        }
        if self.streak == cx.policy.tool.error_repeat {
            let msg = format!(
                "`{tool}` failed {} times in a row with the same error. Retrying will not fix it: \
                 read the error, change the call, or report the blocker.",
                self.streak
            );
            cx.emit(Finding::new(
                Rule::ErrorRepeat,
                Action::Steer,
                msg,
                json!({"tool": tool, "count": self.streak, "error": clip(&normalized, 200), "scope": "request"}),
            ));
            return true;
        }
        false
    }
}

/// Identical failing calls remembered per session (bounded; the oldest go first).
const SESSION_KEEP: usize = 32;

/// One failing call of a session.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Failure {
    /// Hash of the call's signature and its error.
    key: u64,
    /// Requests in which it failed, and the last of them.
    requests: u32,
    last_request: u32,
    reported: bool,
}

/// Identical failing calls across the requests of a session (counted once per request:
/// inside one request the window rules judge them).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SessionErrors {
    seen: std::collections::VecDeque<Failure>,
}

impl SessionErrors {
    /// The call `sig` of `tool` failed with `error` (normalized) in request `request`.
    pub fn on_failure(&mut self, sig: u64, tool: &str, error: &str, request: u32, cx: &mut Cx) {
        let mut key = sig.to_le_bytes().to_vec();
        key.extend_from_slice(error.as_bytes());
        let key = hash64(&key);
        let entry = match self.seen.iter().position(|e| e.key == key) {
            Some(i) => &mut self.seen[i],
            None => {
                self.seen.push_back(Failure {
                    key,
                    ..Default::default()
                });
                if self.seen.len() > SESSION_KEEP {
                    self.seen.pop_front();
                }
                self.seen.back_mut().expect("pushed")
            }
        };
        if entry.requests > 0 && entry.last_request == request {
            return;
        }
        entry.requests += 1;
        entry.last_request = request;
        if entry.requests as usize >= cx.policy.tool.session_error_repeat && !entry.reported {
            entry.reported = true;
            let msg = format!(
                "`{tool}` was called the same way and failed with the same error in {} requests of \
                 this conversation. It will fail again: do not retry it; tell the user what blocks \
                 it and what they can do instead.",
                entry.requests
            );
            cx.emit(Finding::new(
                Rule::ErrorRepeat,
                Action::Steer,
                msg,
                json!({"tool": tool, "count": entry.requests, "error": clip(error, 200), "scope": "session"}),
            ));
        }
    }
}
