//! The recent tool calls of a request, shared by the repeat rules: canonical signatures,
//! identity fingerprints (identity keys, and the files a shell command writes and runs),
//! 3-gram sets, the results their calls reported, and the successful mutations between
//! them (a call repeated after the world changed is not a repeat). Pure.

use super::call_kind::{
    named_by, restore_key, shell_command, subcommand, swap_edit, whole_write, writes_by_name,
    RESTORE_VERBS,
};
use super::error_spread::ArgDigest;
use crate::engine::canon;
use crate::engine::policy::ToolPolicy;
use crate::engine::shell;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::VecDeque;

/// One proposed tool call as the repeat rules see it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CallRecord {
    pub call_id: String,
    pub tool: String,
    /// Hash of tool + canonical args.
    pub sig: u64,
    /// Hash of tool + canonical args without volatile keys.
    pub near_sig: u64,
    /// Fingerprint of identity-key values (0 = none).
    pub identity: u64,
    /// Serialized args length in chars.
    pub args_chars: usize,
    /// Per top-level key: 3-gram sets, kept only for args long enough for fuzzy matching.
    pub fields: Option<Vec<Field>>,
    /// `evidence.output_hash` of the call's result, once known.
    pub output: Option<u64>,
    /// Hash of the error text of a failed result, once known.
    #[serde(default)]
    pub error: Option<u64>,
    pub round: u32,
    /// When the call was made (event time; 0 in states written before it was kept).
    #[serde(default)]
    pub ts_ms: i64,
    /// Position of the call in its request (1, 2, …).
    #[serde(default)]
    pub at: u64,
    /// The call changes the world by its nature (a write-like tool or shell command).
    #[serde(default)]
    pub mutates: bool,
    /// The call puts a file back from a copy (`cp f.orig f`, `git checkout -- f`).
    #[serde(default)]
    pub restores: bool,
    /// The call moves the agent somewhere (a navigation verb names its tool or sub-command).
    #[serde(default)]
    pub navigates: bool,
    /// Which restore it is: the same for the same file put back from the same copy however
    /// the command is spelled (0 in states written before it: the signature is used).
    #[serde(default)]
    pub restore_key: u64,
    /// Its result has come back (any status, with or without evidence). States written
    /// before this field was kept restore as answered: they judged as if it were.
    #[serde(default = "answered_before_this_field")]
    pub answered: bool,
    /// What the wider error forms keep of a non-shell call's arguments: taken into the
    /// pending call when it is made, never kept in the window.
    #[serde(skip)]
    pub digest: Option<ArgDigest>,
    /// The file it writes whole and a fingerprint of the content (`call_kind::whole_write`),
    /// taken into the pending call like `digest`.
    #[serde(skip)]
    pub whole_write: Option<(String, u64)>,
    /// Its arguments' shape (`arg_shape`), taken into the pending call like `digest`.
    #[serde(skip)]
    pub shape: u64,
    /// The file a partial edit changes and how (`call_kind::swap_edit`), taken into the
    /// pending call like `digest`.
    #[serde(skip)]
    pub swap: Option<(String, u64)>,
}

/// The shape of a call: its tool and canonical arguments with every run of digits as one
/// `#`, so `take knife 6 from countertop 1` and `take knife 7 from countertop 2` are one
/// shape, `go to shelf 1` another.
pub fn arg_shape(tool: &str, canonical_args: &str, sig: u64) -> u64 {
    let bytes = canonical_args.as_bytes();
    // Without digits the shape is the call itself.
    let Some(first) = bytes.iter().position(u8::is_ascii_digit) else {
        return sig;
    };
    // The folded text hashed at once (one pass of xxh3, the same value as fed piecewise).
    let mut folded = Vec::with_capacity(tool.len() + 1 + bytes.len());
    folded.extend_from_slice(tool.as_bytes());
    folded.push(0);
    // Each stretch without digits as it is, each run of digits as one `#`.
    let mut rest = bytes;
    let mut at = Some(first);
    while let Some(i) = at {
        folded.extend_from_slice(&rest[..i]);
        folded.push(b'#');
        let digits = rest[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        rest = &rest[i + digits..];
        at = rest.iter().position(u8::is_ascii_digit);
    }
    folded.extend_from_slice(rest);
    canon::hash64(&folded)
}

/// Fields added to the state later: what a checkpoint written before them restores to.
fn answered_before_this_field() -> bool {
    true
}

impl CallRecord {
    pub fn new(
        call_id: &str,
        tool: &str,
        args: &Value,
        (round, at, ts_ms): (u32, u64, i64),
        p: &ToolPolicy,
    ) -> Self {
        let (text, values) = canon::canonical_with_values(args);
        let sig = sig_of(tool, &text);
        // Without volatile keys in the args, the near signature is the signature: a large
        // argument is not serialized a second time for nothing.
        let near_sig = if canon::has_any_key(args, &p.volatile_keys) {
            sig_of(tool, &canon::canonical_without(args, &p.volatile_keys))
        } else {
            sig
        };
        let args_chars = text.chars().count();
        let is_shell = p.is_shell(tool);
        let command = shell_command(args, is_shell, p);
        let mut identity = canon::identity_fingerprint(args, &p.identity_keys);
        let targets = command.as_ref().map(shell::Command::identity);
        if let Some(targets) = targets.filter(|t| !t.is_empty()) {
            let mut key = identity.to_le_bytes().to_vec();
            key.extend_from_slice(targets.as_bytes());
            identity = canon::hash64(&key) | 1;
        }
        let named_mutation = writes_by_name(tool, p)
            || (!is_shell && subcommand(args).is_some_and(|c| writes_by_name(c, p)));
        let swap = swap_edit(args, is_shell);
        let restores = if is_shell {
            command.as_ref().is_some_and(|c| c.restores)
        } else {
            named_by(tool, args, &RESTORE_VERBS)
        };
        CallRecord {
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            sig,
            near_sig,
            identity,
            args_chars,
            fields: (args_chars >= p.fuzzy_min_chars).then(|| fields(args, &text, &values)),
            output: None,
            error: None,
            round,
            ts_ms,
            at,
            mutates: named_mutation
                || restores
                || swap.is_some()
                || command.as_ref().is_some_and(|c| c.mutates),
            restores,
            navigates: !is_shell && named_by(tool, args, &p.navigation_verbs),
            restore_key: if restores {
                restore_key(sig, identity, command.as_ref().filter(|_| is_shell))
            } else {
                0
            },
            answered: false,
            digest: (!is_shell).then(|| ArgDigest::of(args, &text, &values)),
            whole_write: whole_write(args, command.as_ref(), named_mutation, is_shell),
            shape: arg_shape(tool, &text, sig),
            swap,
        }
    }

    /// Which restore the call is (its signature in states written before `restore_key`).
    pub fn restore_id(&self) -> u64 {
        if self.restore_key != 0 {
            self.restore_key
        } else {
            self.sig
        }
    }

    /// What the call's result said, as one value: equal results, equal keys.
    pub fn result(&self) -> Option<u64> {
        self.output.or(self.error)
    }
}

/// One top-level argument: key and value hashes and the value's 3-grams.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Field {
    pub key: u64,
    pub value: u64,
    /// `key:canonical value`, the text the 3-grams come from (what is handed over).
    pub text: String,
    /// Derived from `text`, computed only once the call has a candidate to be compared with
    /// (`CallWindow::push`) and after a hand-over; never serialized.
    #[serde(skip)]
    pub grams: Vec<u64>,
    #[serde(skip)]
    pub grams_built: bool,
}

impl Field {
    pub fn rebuild(&mut self) {
        self.grams = canon::trigrams(&self.text);
        self.grams_built = true;
    }

    fn ensure_grams(&mut self) {
        if !self.grams_built {
            self.rebuild();
        }
    }
}

/// The top-level arguments of `args`, whose canonical text is `text` with each top-level
/// value at `values` (`canon::canonical_with_values`).
fn fields(args: &Value, text: &str, values: &[std::ops::Range<usize>]) -> Vec<Field> {
    let field = |key: &str, value: &str| Field {
        key: canon::hash64(key.as_bytes()),
        value: canon::hash64(value.as_bytes()),
        grams: Vec::new(),
        grams_built: false,
        text: field_text(key, value),
    };
    let mut out: Vec<Field> = match args {
        Value::Object(map) => map
            .keys()
            .zip(values)
            .map(|(k, at)| field(k, &text[at.clone()]))
            .collect(),
        _ => vec![field("", text)],
    };
    out.sort_by_key(|f| f.key);
    out
}

/// `key:value`, its first `FIELD_TEXT_CHARS` chars: similarity looks at the head of a
/// value (a whole file body adds nothing but memory); equality uses the hash of the full
/// value. The value is not copied beyond what is kept.
fn field_text(key: &str, value: &str) -> String {
    let used = key.chars().count() + 1;
    if used >= FIELD_TEXT_CHARS {
        return crate::engine::verdict::clip(&format!("{key}:"), FIELD_TEXT_CHARS);
    }
    let room = FIELD_TEXT_CHARS - used;
    // No more bytes than the room: no more chars either, nothing to count.
    let rest = if value.len() <= room {
        value
    } else {
        match value.char_indices().nth(room) {
            Some((i, _)) => &value[..i],
            None => value,
        }
    };
    // One allocation of the final size.
    let mut text = String::with_capacity(key.len() + 1 + rest.len());
    text.push_str(key);
    text.push(':');
    text.push_str(rest);
    text
}

const FIELD_TEXT_CHARS: usize = 4096;

/// 3-gram Jaccard of two calls' serialized args, over the arguments that differ between
/// them: arguments equal in both (a tool's boilerplate flags) carry no signal, and with
/// them a verbose schema makes every pair of calls look alike (ours, see docs/decisions.md).
pub fn similarity(a: &[Field], b: &[Field]) -> f64 {
    let (mut ga, mut gb) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.key == y.key => {
                if x.value != y.value {
                    ga.extend_from_slice(&x.grams);
                    gb.extend_from_slice(&y.grams);
                }
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x.key < y.key => {
                ga.extend_from_slice(&x.grams);
                i += 1;
            }
            (Some(_), Some(y)) | (None, Some(y)) => {
                gb.extend_from_slice(&y.grams);
                j += 1;
            }
            (Some(x), None) => {
                ga.extend_from_slice(&x.grams);
                i += 1;
            }
            (None, None) => break,
        }
    }
    for g in [&mut ga, &mut gb] {
        g.sort_unstable();
        g.dedup();
    }
    canon::jaccard(&ga, &gb)
}

pub fn sig_of(tool: &str, canonical_args: &str) -> u64 {
    let mut bytes = Vec::with_capacity(tool.len() + 1 + canonical_args.len());
    bytes.extend_from_slice(tool.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(canonical_args.as_bytes());
    canon::hash64(&bytes)
}

/// A successful mutation: the request's call count when its result came, and its call.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Mutation {
    pub at: u64,
    pub sig: u64,
    /// False when the result's evidence proved the state unchanged (`state_before` equal to
    /// `state_after`): a mutation that did nothing is not a side effect repeated.
    #[serde(default = "answered_before_this_field")]
    pub effect: bool,
}

/// Mutations remembered (enough for any window: older ones precede every call in it).
const MAX_MUTATIONS: usize = 64;

/// The last few non-exempt calls of the request, newest last.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CallWindow {
    pub calls: VecDeque<CallRecord>,
    /// Calls made in the request so far (exempt ones included).
    #[serde(default)]
    pub made: u64,
    /// Successful mutations, oldest first.
    #[serde(default)]
    pub mutations: VecDeque<Mutation>,
}

impl CallWindow {
    pub fn push(&mut self, call: CallRecord, keep: usize) {
        self.calls.push_back(call);
        while self.calls.len() > keep.max(1) {
            self.calls.pop_front();
        }
        self.build_grams_for_newest();
        let oldest = self.calls.front().map_or(0, |c| c.at);
        while self
            .mutations
            .front()
            .is_some_and(|m| m.at < oldest || self.mutations.len() > MAX_MUTATIONS)
        {
            self.mutations.pop_front();
        }
    }

    /// The 3-gram sets fuzzy matching needs, built only when the newest call has another of
    /// the same tool and identity in the window to be compared with (most calls have none:
    /// the sets of a 4 KiB heredoc are the costliest part of a call record).
    fn build_grams_for_newest(&mut self) {
        let Some((newest, earlier)) = self.calls.make_contiguous().split_last_mut() else {
            return;
        };
        if newest.fields.is_none() {
            return;
        }
        let mut any = false;
        for c in earlier
            .iter_mut()
            .filter(|c| c.tool == newest.tool && c.identity == newest.identity)
        {
            for f in c.fields.iter_mut().flatten() {
                f.ensure_grams();
            }
            any = true;
        }
        if any {
            for f in newest.fields.iter_mut().flatten() {
                f.ensure_grams();
            }
        }
    }

    /// Counts one more call in the request and returns its position.
    pub fn next_position(&mut self) -> u64 {
        self.made += 1;
        self.made
    }

    /// A call (of signature `sig`) changed the world successfully (`effect`: false when its
    /// evidence proved nothing changed).
    pub fn record_mutation(&mut self, sig: u64, effect: bool) {
        self.mutations.push_back(Mutation {
            at: self.made,
            sig,
            effect,
        });
        if self.mutations.len() > MAX_MUTATIONS {
            self.mutations.pop_front();
        }
    }

    /// True when the world may have changed between `earlier` and the newest call: a
    /// successful mutation came after `earlier` was made, by a call other than the newest
    /// one's own signature (an identical mutation repeated is still a repeat).
    pub fn changed_since(&self, earlier: &CallRecord) -> bool {
        let Some(now) = self.newest() else {
            return false;
        };
        self.mutations
            .iter()
            .any(|m| m.at >= earlier.at && m.at < now.at && m.sig != now.sig)
    }

    /// How many times a call of signature `sig` changed the world successfully among the
    /// mutations remembered for the window.
    pub fn effects_of(&self, sig: u64) -> usize {
        self.mutations
            .iter()
            .filter(|m| m.sig == sig && m.effect)
            .count()
    }

    /// True when `earlier` is a navigation step that succeeded and, after it and before the
    /// next call with its signature, a call of the same tool with other arguments brought
    /// back a result the window had not seen:
    /// the agent went somewhere new in between (a web agent back on its results page after
    /// opening another item is navigating, not repeating; issue 20, item 6).
    pub fn new_ground_after(&self, earlier: &CallRecord) -> bool {
        if !earlier.navigates || earlier.error.is_some() {
            return false;
        }
        let fresh = |c: &CallRecord, before: &[&CallRecord]| {
            c.tool == earlier.tool
                && c.answered
                && c.result().is_some_and(|r| {
                    before
                        .iter()
                        .all(|b| b.sig != c.sig && b.result() != Some(r))
                })
        };
        let mut before: Vec<&CallRecord> = self
            .calls
            .iter()
            .take_while(|c| c.at <= earlier.at)
            .collect();
        for c in self.calls.iter().filter(|c| c.at > earlier.at) {
            if c.sig == earlier.sig {
                return false;
            }
            if fresh(c, &before) {
                return true;
            }
            before.push(c);
        }
        false
    }

    /// The `n` most recent calls before the newest one that still look at the same world.
    pub fn repeatable(&self, n: usize) -> impl Iterator<Item = &CallRecord> {
        self.earlier(n).filter(|c| !self.changed_since(c))
    }

    /// The `n` most recent calls before the newest one.
    pub fn earlier(&self, n: usize) -> impl Iterator<Item = &CallRecord> {
        let len = self.calls.len();
        let skip = len.saturating_sub(n + 1);
        self.calls
            .iter()
            .skip(skip)
            .take(len.saturating_sub(skip).saturating_sub(1))
    }

    /// Rebuilds derived 3-gram sets after a hand-over.
    pub fn rebuild(&mut self) {
        for f in self
            .calls
            .iter_mut()
            .filter_map(|c| c.fields.as_mut())
            .flatten()
        {
            f.rebuild();
        }
    }

    pub fn newest(&self) -> Option<&CallRecord> {
        self.calls.back()
    }

    /// The result of `call_id` came back.
    pub fn record_answered(&mut self, call_id: &str) {
        if let Some(c) = self.calls.iter_mut().rev().find(|c| c.call_id == call_id) {
            c.answered = true;
        }
    }

    pub fn record_output(&mut self, call_id: &str, output: u64) {
        if let Some(c) = self.calls.iter_mut().rev().find(|c| c.call_id == call_id) {
            c.output = Some(output);
        }
    }

    pub fn record_error(&mut self, call_id: &str, error: u64) {
        if let Some(c) = self.calls.iter_mut().rev().find(|c| c.call_id == call_id) {
            c.error = Some(error);
        }
    }
}

/// The results of these calls differ from each other (different outputs or errors).
pub fn results_differ<'a>(calls: impl Iterator<Item = &'a CallRecord>) -> bool {
    let mut first = None;
    for r in calls.filter_map(CallRecord::result) {
        match first {
            None => first = Some(r),
            Some(f) if f != r => return true,
            Some(_) => {}
        }
    }
    false
}

/// When the first of these calls was made (the start of the loop they make), if known.
pub fn first_made<'a>(calls: impl Iterator<Item = &'a CallRecord>) -> Option<i64> {
    calls.map(|c| c.ts_ms).filter(|&t| t > 0).min()
}

/// Every one of these calls has its result in, and no two results are the same: each try
/// got an answer of its own.
pub fn results_all_distinct<'a>(calls: impl Iterator<Item = &'a CallRecord>) -> bool {
    let mut seen = Vec::new();
    for c in calls {
        match c.result() {
            Some(r) if c.answered && !seen.contains(&r) => seen.push(r),
            _ => return false,
        }
    }
    true
}

/// Polling with progress (ours): the two most recent earlier matches both reported an
/// output hash and the outputs differ, so the repeat is polling that sees change.
pub fn polling_with_progress<'a>(matches: impl DoubleEndedIterator<Item = &'a CallRecord>) -> bool {
    let mut recent = matches.rev().take(2).map(|c| c.output);
    match (recent.next(), recent.next()) {
        (Some(Some(a)), Some(Some(b))) => a != b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arg_shape_folds_each_run_of_digits() {
        let shape = |args: &str| arg_shape("act", args, 7);
        assert_eq!(
            shape("take knife 6 from countertop 1"),
            shape("take knife 17 from countertop 2")
        );
        assert_ne!(
            shape("take knife 6 from countertop 1"),
            shape("go to shelf 1")
        );
        assert_eq!(shape("no digits here"), 7, "without digits: the signature");
        // The value of the tool, a NUL and the folded text hashed as one.
        assert_eq!(shape("x12y3"), canon::hash64(b"act\0x#y#"));
    }

    #[test]
    fn a_field_text_is_the_head_of_key_and_value() {
        let clip = crate::engine::verdict::clip;
        let long = "é".repeat(5000);
        let huge_key = "k".repeat(5000);
        for (key, value) in [
            ("path", "\"a.txt\""),
            ("body", long.as_str()),
            (huge_key.as_str(), "1"),
            ("", ""),
        ] {
            assert_eq!(
                field_text(key, value),
                clip(&format!("{key}:{value}"), FIELD_TEXT_CHARS)
            );
        }
    }
}
