//! `tool.error_repeat` (ours, after OpenHands): a tool failing with the same error 3 times
//! in a row -> steer, once per streak. See docs/decisions.md for why args may differ.
//! Also the same call failing with the same error 3 times in a request, with changes in
//! between (the fixes do not reach the failure), and in 3 requests of a session (a refused
//! action retried each time the user says "try again") -> steer once each.

use crate::engine::canon::hash64;
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{clip, Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ErrorRepeat {
    key: u64,
    streak: usize,
    /// The response (round) of the streak's last failure: parallel calls of one response
    /// failing alike are one try, not several (issue 20, item 5).
    #[serde(default)]
    round: u32,
    /// When the streak's first failure came back (event time; 0: unknown).
    #[serde(default)]
    since: i64,
    /// The calls (signatures) whose failures the streak counted (the first few).
    #[serde(default)]
    sigs: Vec<u64>,
}

/// Calls of a streak remembered, to tell a new try from the same one.
const STREAK_SIGS: usize = 8;

/// Error text with spacing normalized (what "the same error" means here).
pub fn normalize(error: &str) -> String {
    let mut out = String::with_capacity(error.len());
    for word in error.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// An error text that says nothing about the failure (empty, `error`, `exit code 1`, `no
/// matches`): two calls failing with it did not fail "the same way" unless they are the
/// same call and their outputs agree. A short text of its own ("Invalid action!", "Flight
/// not available") does say something: a tool that keeps returning it for different calls
/// keeps failing the same way (issue 20, item 8).
pub fn uninformative(normalized: &str) -> bool {
    normalized
        .split(|c: char| !c.is_alphabetic())
        .filter(|w| !w.is_empty())
        .all(|w| GENERIC_WORDS.iter().any(|g| g.eq_ignore_ascii_case(w)))
}

/// The words of error texts that say only that something failed (numbers and punctuation
/// aside): `Error`, `exit code 1`, `command failed with exit status 2`, `No matches found`,
/// `null`, `(empty output)`.
const GENERIC_WORDS: &[&str] = &[
    "error", "errors", "err", "failed", "failure", "fail", "exit", "exited", "code", "status",
    "returned", "return", "with", "non", "nonzero", "zero", "command", "process", "no", "none",
    "null", "nil", "empty", "output", "result", "results", "match", "matches", "found", "nothing",
    "unknown", "an", "a", "the", "occurred",
];

/// What identifies a failure: its error text, and for an uninformative one the output the
/// runtime hashed (`evidence.output_hash`). `None` when nothing identifies it (an
/// uninformative error without an output hash): such failures are never "the same" across
/// changes or requests.
pub fn failure_key(normalized: &str, output: Option<&str>) -> Option<String> {
    match (uninformative(normalized), output) {
        (false, _) => Some(normalized.to_string()),
        (true, Some(out)) => Some(format!("{normalized} [output {out}]")),
        (true, None) => None,
    }
}

impl ErrorRepeat {
    /// A result of call `sig` of `tool`, made in response `round`; `error` when it failed
    /// (already `normalize`d: the caller normalizes once for every rule), `output` its
    /// output hash; `novel`: the try told something new (`failures`); `quiet`: a wider form
    /// already spoke about this failure (counted, never said). Returns true when it steered.
    ///
    /// A try is informative when it is another call than the streak's and brought back an
    /// output the request had not seen: the same error text over a new target that tells the
    /// agent something new (a lookup suggesting other names) is exploring, not looping. It
    /// neither counts nor ends the streak (issue 34); without an output hash nothing tells
    /// it apart, and it counts.
    #[allow(clippy::too_many_arguments)]
    pub fn on_result(
        &mut self,
        sig: u64,
        round: u32,
        tool: &str,
        error: Option<&str>,
        output: Option<&str>,
        novel: bool,
        quiet: bool,
        cx: &mut Cx,
    ) -> bool {
        let Some(error) = error else {
            self.streak = 0;
            return false;
        };
        let normalized = error;
        let (call, out) = if uninformative(normalized) {
            (sig, output.unwrap_or(""))
        } else {
            (0, "")
        };
        let key = hash64(format!("{tool}\0{call:x}\0{out}\0{normalized}").as_bytes());
        if key == self.key && self.streak > 0 {
            if round == self.round || (novel && !self.sigs.contains(&sig)) {
                return false;
            }
            self.streak += 1;
        } else {
            self.key = key;
            self.streak = 1;
            self.since = cx.meta.ts_ms;
            self.sigs.clear();
        }
        if self.sigs.len() < STREAK_SIGS && !self.sigs.contains(&sig) {
            self.sigs.push(sig);
        }
        self.round = round;
        if self.streak == cx.policy.tool.error_repeat && !quiet {
            let msg = format!(
                "`{tool}` failed {} times in a row with the same error. Retrying will not fix it: \
                 read the error, change the call, or report the blocker.",
                self.streak
            );
            let evidence = json!({"tool": tool, "count": self.streak, "error": clip(normalized, 200), "scope": "request"});
            let finding = Finding::new(Rule::ErrorRepeat, Action::Steer, msg, evidence);
            cx.emit(if self.since > 0 {
                finding.since(self.since)
            } else {
                finding
            });
            return true;
        }
        false
    }
}

/// Identical failing calls remembered per session or request (bounded; oldest go first).
const KEEP: usize = 32;

/// One failing call.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Failure {
    /// Hash of the call's signature and its error.
    key: u64,
    /// Occasions (requests, or calls) on which it failed, and the last of them.
    #[serde(alias = "requests")]
    count: u32,
    #[serde(alias = "last_request")]
    last: u32,
    reported: bool,
    /// Requests it failed in (session scope), and the last of them.
    #[serde(default)]
    spans: u32,
    #[serde(default)]
    last_span: u32,
}

/// Where identical failures are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Across the requests of a session, once per try, in two requests at least: "try
    /// again" -> the same refusal, however the tries fall between the user's turns.
    Session,
    /// Within a request, every time, changes in between or not: the fixes do not reach it.
    Request,
}

/// The same call failing with the same error, counted once per occasion (a request for
/// the session scope, a call for the request scope).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SameFailures {
    seen: std::collections::VecDeque<Failure>,
}

impl SameFailures {
    /// The call `sig` of `tool` failed with `error` (normalized) on `occasion` (a try),
    /// in request number `request`. `said`: a verdict about this failure was already given
    /// (counted, not said twice).
    #[allow(clippy::too_many_arguments)]
    pub fn on_failure(
        &mut self,
        sig: u64,
        tool: &str,
        error: &str,
        (occasion, request): (u32, u32),
        scope: Scope,
        said: bool,
        cx: &mut Cx,
    ) {
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
                if self.seen.len() > KEEP {
                    self.seen.pop_front();
                }
                self.seen.back_mut().expect("pushed")
            }
        };
        if entry.count > 0 && entry.last == occasion {
            return;
        }
        entry.count += 1;
        entry.last = occasion;
        if entry.spans == 0 || entry.last_span != request {
            entry.spans += 1;
            entry.last_span = request;
        }
        let (need, label) = match scope {
            Scope::Session => (cx.policy.tool.session_error_repeat, "session"),
            Scope::Request => (cx.policy.tool.error_repeat, "request"),
        };
        // One request's tries are the request scope's to judge.
        let spread = scope == Scope::Request || entry.spans >= 2;
        if (entry.count as usize) < need || entry.reported || !spread {
            return;
        }
        entry.reported = true;
        if said {
            return;
        }
        let msg = match scope {
            Scope::Session => {
                let times = if entry.count == entry.spans {
                    String::new()
                } else {
                    format!(" {} times,", entry.count)
                };
                format!(
                    "`{tool}` was called the same way and failed with the same error{times} in {} \
                     requests of this conversation. It will fail again: do not retry it; tell the \
                     user what blocks it and what they can do instead.",
                    entry.spans
                )
            }
            Scope::Request => format!(
                "`{tool}` was run the same way {} times in this request and failed with the same \
                 error each time, whatever you changed in between: your changes do not reach this \
                 failure. Re-read the error and find its real cause before changing more.",
                entry.count
            ),
        };
        let mut evidence =
            json!({"tool": tool, "count": entry.count, "error": clip(error, 200), "scope": label});
        if scope == Scope::Session && entry.count != entry.spans {
            evidence["requests"] = entry.spans.into();
        }
        cx.emit(Finding::new(
            Rule::ErrorRepeat,
            Action::Steer,
            msg,
            evidence,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::{normalize, uninformative};

    #[test]
    fn only_generic_texts_are_uninformative() {
        for generic in [
            "",
            "error",
            "Error: 1",
            "exit code 1",
            "Command failed with exit status 2",
            "No matches found",
            "(empty output)",
            "null",
        ] {
            assert!(uninformative(&normalize(generic)), "{generic}");
        }
        for own in [
            "Invalid action!",
            "Flight not available",
            "Timeout",
            "Permission denied",
            "not found: foo",
        ] {
            assert!(!uninformative(&normalize(own)), "{own}");
        }
    }

    proptest::proptest! {
        /// `normalize` is `split_whitespace` joined by single spaces, in any text (ASCII
        /// and Unicode whitespace, other non-ASCII chars).
        #[test]
        fn normalize_is_split_whitespace_joined(
            s in "[a-z:./ \\t\\n\\x0b\\x0c\\r\\u{1c}\\u{85}\\u{a0}\\u{2028}\\u{3000}é日→]{0,60}"
        ) {
            let want = s.split_whitespace().collect::<Vec<_>>().join(" ");
            proptest::prop_assert_eq!(normalize(&s), want);
        }
    }
}
