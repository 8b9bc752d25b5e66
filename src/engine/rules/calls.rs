//! The recent tool calls of a request, shared by the repeat rules: canonical signatures,
//! identity fingerprints, 3-gram sets and the outputs their results reported. Pure.

use crate::engine::canon;
use crate::engine::policy::ToolPolicy;
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
    /// 3-gram set, kept only for args long enough for fuzzy matching.
    pub grams: Option<Vec<u64>>,
    /// `evidence.output_hash` of the call's result, once known.
    pub output: Option<u64>,
    pub round: u32,
}

impl CallRecord {
    pub fn new(call_id: &str, tool: &str, args: &Value, round: u32, p: &ToolPolicy) -> Self {
        let text = canon::canonical(args);
        let sig = sig_of(tool, &text);
        let near = canon::canonical_without(args, &p.volatile_keys);
        let args_chars = text.chars().count();
        CallRecord {
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            sig,
            near_sig: sig_of(tool, &near),
            identity: canon::identity_fingerprint(args, &p.identity_keys),
            args_chars,
            grams: (args_chars >= p.fuzzy_min_chars).then(|| canon::trigrams(&text)),
            output: None,
            round,
        }
    }
}

pub fn sig_of(tool: &str, canonical_args: &str) -> u64 {
    let mut bytes = Vec::with_capacity(tool.len() + 1 + canonical_args.len());
    bytes.extend_from_slice(tool.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(canonical_args.as_bytes());
    canon::hash64(&bytes)
}

/// The last few non-exempt calls of the request, newest last.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CallWindow {
    pub calls: VecDeque<CallRecord>,
}

impl CallWindow {
    pub fn push(&mut self, call: CallRecord, keep: usize) {
        self.calls.push_back(call);
        while self.calls.len() > keep.max(1) {
            self.calls.pop_front();
        }
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

    pub fn newest(&self) -> Option<&CallRecord> {
        self.calls.back()
    }

    pub fn record_output(&mut self, call_id: &str, output: u64) {
        if let Some(c) = self.calls.iter_mut().rev().find(|c| c.call_id == call_id) {
            c.output = Some(output);
        }
    }
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
