//! `tool.error_repeat`'s wider forms (issue 20, items 1 and 4): a failure that keeps coming
//! back while the agent varies its call. In a request, the same tool failing with the same
//! error in 3 responses whatever its arguments (a reworded search that keeps finding
//! nothing). Across the requests of a session, the same tool failing with the same error in
//! 3 requests with its arguments at most one field apart (a refused booking retried with
//! another date), or the same call failing in 4 requests whatever its error text says.
//! Steer, once each. "The same error" is its text with what the call itself put there (an
//! argument echoed back) and digits masked. Shell tools take only the same-call form: one
//! such tool runs every kind of command.

use super::error_repeat::uninformative;
use crate::engine::canon::hash64;
use crate::engine::emit::{Cx, Finding};
use crate::engine::verdict::{clip, Action, Rule};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::ops::Range;

/// Failures remembered per scope (bounded; the oldest go first).
const KEEP: usize = 32;
/// Argument values looked for in an error text, at most.
const ECHOES: usize = 8;
/// Length of an error's shape that is compared.
const SHAPE_CHARS: usize = 200;

/// What a failing call's error is compared with: its top-level arguments (hashed, to tell
/// how many changed) and its short scalar values (to take out of its error text).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ArgDigest {
    fields: Vec<u64>,
    echoes: Vec<String>,
    /// The first chars of the values too long to be echoes (an edit's `old_str`).
    #[serde(default)]
    heads: Vec<String>,
}

/// Chars of a long value looked for in an error text.
const HEAD_CHARS: usize = 32;
/// Shortest echo that says an error quotes the call.
const QUOTE_MIN: usize = 4;

impl ArgDigest {
    /// The digest of `args`, whose canonical text is `text` with each top-level value at
    /// `values` (`canon::canonical_with_values`).
    pub fn of(args: &Value, text: &str, values: &[Range<usize>]) -> Self {
        let mut digest = ArgDigest::default();
        // `key`, a NUL and the value's canonical text, hashed as one.
        let mut keyed = Vec::new();
        let mut field = |key: &str, at: &Range<usize>| {
            keyed.clear();
            keyed.extend_from_slice(key.as_bytes());
            keyed.push(0);
            keyed.extend_from_slice(text[at.clone()].as_bytes());
            hash64(&keyed)
        };
        match args {
            Value::Object(map) => {
                for ((k, v), at) in map.iter().zip(values) {
                    digest.fields.push(field(k, at));
                    digest.note_echoes(v);
                }
            }
            other => {
                digest.fields.push(field("", &(0..text.len())));
                digest.note_echoes(other);
            }
        }
        digest.fields.sort_unstable();
        // Longest first: a value that contains another is taken out whole.
        digest
            .echoes
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        digest
    }

    fn note_echoes(&mut self, v: &Value) {
        let text = match v {
            Value::String(s) => s.trim().to_string(),
            Value::Number(n) => n.to_string(),
            Value::Array(items) => return items.iter().for_each(|i| self.note_echoes(i)),
            _ => return,
        };
        let chars = text.chars().count();
        if (2..=120).contains(&chars) && self.echoes.len() < ECHOES && !self.echoes.contains(&text)
        {
            self.echoes.push(text);
        } else if chars > 120 && self.heads.len() < ECHOES {
            self.heads.push(text.chars().take(HEAD_CHARS).collect());
        }
    }

    /// The error text quotes one of the call's own values: the failure is about that value
    /// (an `old_str` that "did not appear verbatim"), whatever else the call changed.
    pub fn quoted_in(&self, error: &str) -> bool {
        self.echoes
            .iter()
            .filter(|e| e.chars().count() >= QUOTE_MIN)
            .chain(&self.heads)
            .any(|v| error.contains(v.as_str()))
    }

    /// True when the two calls' arguments differ in one top-level field at most.
    fn near(&self, other: &[u64]) -> bool {
        let only_here = self.fields.iter().filter(|f| !other.contains(f)).count();
        let only_there = other.iter().filter(|f| !self.fields.contains(f)).count();
        only_here <= 1 && only_there <= 1
    }

    /// The error text as the same failure reads whatever the call asked: the call's own
    /// argument values replaced by `…`, digit runs by `#`, its head only.
    pub fn shape(&self, error: &str) -> String {
        let mut text = error.to_string();
        for echo in &self.echoes {
            if text.contains(echo.as_str()) {
                text = text.replace(echo.as_str(), "…");
            }
        }
        let mut out = String::with_capacity(text.len().min(SHAPE_CHARS * 4));
        for c in text.chars() {
            if out.chars().count() >= SHAPE_CHARS {
                break;
            }
            if c.is_ascii_digit() {
                if !out.ends_with('#') {
                    out.push('#');
                }
            } else {
                out.push(c);
            }
        }
        out
    }
}

/// Which wider form a failure is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// The same tool and error in several responses of a request, any arguments.
    ToolInRequest,
    /// The same tool and error in several requests, arguments one field apart at most.
    ToolAcrossRequests,
    /// The same call (tool and canonical args) failing in several requests, any error.
    CallAcrossRequests,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Spread {
    key: u64,
    /// The last failing call's argument fields (the tool forms).
    #[serde(default)]
    args: Vec<u64>,
    count: u32,
    last: u32,
    reported: bool,
    /// Hash of the last counted failure's error text, as written (not its shape).
    #[serde(default)]
    text: u64,
    /// The last counted failure's call (signature).
    #[serde(default)]
    sig: u64,
}

/// Failures counted in the wider forms, for one scope (a request, or a session).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SpreadFailures {
    seen: VecDeque<Spread>,
}

/// One failed call, as the wider forms see it.
pub struct Failed<'a> {
    pub tool: &'a str,
    pub sig: u64,
    /// The normalized error text ("" when the result said none).
    pub error: &'a str,
    /// The call's arguments, kept for its non-shell calls.
    pub digest: Option<&'a ArgDigest>,
    /// Its output is new to the request and its error quotes none of its arguments.
    pub informative: bool,
    /// Its error's shape (`ArgDigest::shape`; the error itself without a digest), computed
    /// once for every form and the ladder, and its key (`shape_key`; 0 for a success, which has neither).
    shape: String,
    key: u64,
}

impl<'a> Failed<'a> {
    pub fn new(
        tool: &'a str,
        sig: u64,
        error: Option<&'a str>,
        digest: Option<&'a ArgDigest>,
        informative: bool,
    ) -> Self {
        let Some(error) = error else {
            return Failed {
                tool,
                sig,
                error: "",
                digest,
                informative,
                shape: String::new(),
                key: 0,
            };
        };
        let shape = digest.map_or_else(|| error.to_string(), |d| d.shape(error));
        let mut keyed = Vec::with_capacity(tool.len() + 1 + shape.len());
        keyed.extend_from_slice(tool.as_bytes());
        keyed.push(0);
        keyed.extend_from_slice(shape.as_bytes());
        let key = hash64(&keyed);
        Failed {
            tool,
            sig,
            error,
            digest,
            informative,
            shape,
            key,
        }
    }

    /// What failures are compared by in the per-tool forms and the request's escalation: the
    /// tool and its error's shape.
    pub fn shape_key(&self) -> u64 {
        self.key
    }
}

/// What a failure is counted as in `form`: its key, its error's shape and the arguments
/// kept; `None` when the form does not count it (a shell tool's, or an error that says
/// nothing).
fn identify<'a>(failed: &Failed<'a>, form: Form) -> Option<(u64, String, Option<&'a ArgDigest>)> {
    match form {
        Form::CallAcrossRequests => Some((failed.sig, String::new(), None)),
        Form::ToolInRequest | Form::ToolAcrossRequests => {
            let digest = failed.digest?;
            if uninformative(&failed.shape) {
                return None;
            }
            Some((failed.shape_key(), failed.shape.clone(), Some(digest)))
        }
    }
}

/// True when `entry` counts the failure identified by `key` and `args` in `form`.
fn matches(entry: &Spread, key: u64, form: Form, args: Option<&ArgDigest>) -> bool {
    entry.key == key
        && (form != Form::ToolAcrossRequests || args.is_some_and(|a| a.near(&entry.args)))
}

impl SpreadFailures {
    /// True when `form` already gave its verdict about this failure: the narrower forms
    /// then keep quiet about it ("steer, once").
    pub fn reported(&self, failed: &Failed, form: Form) -> bool {
        identify(failed, form).is_some_and(|(key, _, args)| {
            self.seen
                .iter()
                .any(|s| s.reported && matches(s, key, form, args))
        })
    }

    /// Counts `failed` in `form` on `occasion` (a try of the request, or a request's
    /// number). `said`: a verdict about this failure was already given: counted, and never
    /// said by this form.
    /// Returns true when it steered.
    pub fn on_failure(
        &mut self,
        failed: &Failed,
        form: Form,
        occasion: u32,
        said: bool,
        cx: &mut Cx,
    ) -> bool {
        let Some((key, shape, args)) = identify(failed, form) else {
            return false;
        };
        let near = |s: &Spread| matches(s, key, form, args);
        let entry = match self.seen.iter().position(near) {
            Some(i) => &mut self.seen[i],
            None => {
                self.seen.push_back(Spread {
                    key,
                    ..Default::default()
                });
                if self.seen.len() > KEEP {
                    self.seen.pop_front();
                }
                self.seen.back_mut().expect("pushed")
            }
        };
        if let Some(a) = args {
            entry.args.clone_from(&a.fields);
        }
        // A verdict about this failure was given (by another form): this form will not
        // give another about it, now or later ("steer, once").
        entry.reported |= said;
        if entry.count > 0 && entry.last == occasion {
            return false;
        }
        // A reworded try (another call) whose error reads word for word as the last one's,
        // quotes none of its arguments, and brought back a new output (a lookup listing
        // other names) is exploring: not counted (issue 34). An error that quotes the call
        // (the `old_str` of an edit retried with other new text) is about that value, still
        // the same: counted.
        let text = hash64(failed.error.as_bytes());
        if form == Form::ToolInRequest
            && failed.informative
            && entry.sig != failed.sig
            && entry.count > 0
            && entry.text == text
        {
            return false;
        }
        entry.text = text;
        entry.sig = failed.sig;
        entry.count += 1;
        entry.last = occasion;
        let need = match form {
            Form::ToolInRequest => cx.policy.tool.error_repeat,
            Form::ToolAcrossRequests => cx.policy.tool.session_error_repeat,
            Form::CallAcrossRequests => cx.policy.tool.session_failure_repeat,
        };
        if (entry.count as usize) < need || entry.reported {
            return false;
        }
        entry.reported = true;
        let (tool, n) = (failed.tool, entry.count);
        let (msg, evidence) = match form {
            Form::ToolInRequest => (
                format!(
                    "`{tool}` failed with the same error in {n} of your responses to this request, \
                     with different arguments each time: rewording the call does not get past it. \
                     Act on what the error says, try another way, or tell the user what you could \
                     not do."
                ),
                json!({"tool": tool, "count": n, "error": clip(&shape, 200), "scope": "request", "args": "vary"}),
            ),
            Form::ToolAcrossRequests => (
                format!(
                    "`{tool}` failed with the same error in {n} requests of this conversation, its \
                     arguments changed only a little each time: it will be refused again. Do not \
                     retry it; tell the user why it fails and what they can do instead."
                ),
                json!({"tool": tool, "count": n, "error": clip(&shape, 200), "scope": "session", "args": "vary"}),
            ),
            Form::CallAcrossRequests => (
                format!(
                    "`{tool}` was called the same way in {n} requests of this conversation and failed \
                     every time, whatever the error said: it will fail again. Do not retry it; tell \
                     the user what blocks it."
                ),
                json!({"tool": tool, "count": n, "error": clip(failed.error, 200), "scope": "session", "errors": "vary"}),
            ),
        };
        cx.emit(Finding::new(
            Rule::ErrorRepeat,
            Action::Steer,
            msg,
            evidence,
        ));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::ArgDigest;
    use serde_json::{json, Value};

    fn digest(args: Value) -> ArgDigest {
        let (text, values) = crate::engine::canon::canonical_with_values(&args);
        ArgDigest::of(&args, &text, &values)
    }

    #[test]
    fn an_error_shape_leaves_out_what_the_call_put_in_it() {
        let a = digest(json!({"flight": "HAT170", "date": "2024-05-16", "cabin": "economy"}));
        let b = digest(json!({"flight": "HAT170", "date": "2024-05-17", "cabin": "economy"}));
        assert_eq!(
            a.shape("flight HAT170 not available on 2024-05-16"),
            b.shape("flight HAT170 not available on 2024-05-17")
        );
        assert_eq!(a.shape("seat 12A taken"), "seat #A taken");
        let q = digest(json!({"query": "Milhouse named after"}));
        assert_eq!(
            q.shape("Could not find Milhouse named after."),
            "Could not find …."
        );
    }

    #[test]
    fn arguments_one_field_apart_are_near() {
        let a = digest(json!({"flight": "A", "date": "1", "cabin": "y"}));
        let one = digest(json!({"flight": "A", "date": "2", "cabin": "y"}));
        let two = digest(json!({"flight": "B", "date": "2", "cabin": "y"}));
        assert!(a.near(&a.fields) && a.near(&one.fields));
        assert!(!a.near(&two.fields));
    }

    #[test]
    fn long_and_tiny_values_are_not_echoes() {
        let d = digest(json!({"body": "x".repeat(500), "n": 7, "tags": ["red", "blue"]}));
        assert_eq!(d.echoes, vec!["blue".to_string(), "red".to_string()]);
    }
}
