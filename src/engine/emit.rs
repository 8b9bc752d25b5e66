//! The per-event context rules write verdicts through: it applies the operator's rule
//! modes (enforce, observe, off) and action overrides, and derives the verdict id. Pure.

use super::event::{format_ts, Meta};
use super::policy::{Mode, Policy};
use super::verdict::{verdict_id, Action, Directives, Rule, Verdict};
use serde_json::Value;

pub struct Cx<'a> {
    pub policy: &'a Policy,
    /// The policy set's version, copied onto every verdict (computed once, at compile).
    pub policy_version: &'a str,
    pub meta: &'a Meta,
    pub turn_id: Option<&'a str>,
    pub out: &'a mut Vec<Verdict>,
}

/// What a rule wants to say; `emit` turns it into a verdict.
pub struct Finding {
    pub rule: Rule,
    pub action: Action,
    pub attempt: u32,
    pub message: String,
    pub evidence: Value,
    pub directives: Directives,
    /// When the loop began (event time), when the rule knows: its first repeated call.
    pub since_ms: Option<i64>,
}

impl Finding {
    pub fn new(rule: Rule, action: Action, message: impl Into<String>, evidence: Value) -> Self {
        Finding {
            rule,
            action,
            attempt: 1,
            message: message.into(),
            evidence,
            directives: Directives::default(),
            since_ms: None,
        }
    }

    /// The loop began at `ms` (event time): what it costs is counted from there.
    pub fn since(mut self, ms: i64) -> Self {
        self.since_ms = Some(ms);
        self
    }

    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    pub fn directives(mut self, directives: Directives) -> Self {
        self.directives = directives;
        self
    }
}

impl Cx<'_> {
    pub fn enabled(&self, rule: Rule) -> bool {
        self.policy.enabled(rule)
    }

    /// Emits a finding unless its rule is `off`; a rule in `observe` mode emits it with
    /// `enforce: false` (written and counted, never acted on).
    pub fn emit(&mut self, f: Finding) {
        let mode = self.policy.mode(f.rule);
        if mode == Mode::Off {
            return;
        }
        let m = self.meta;
        let action = self.policy.action(f.rule, f.action);
        let mut directives = f.directives;
        if action == Action::Block && directives.stop_tool_calls.is_none() {
            directives.stop_tool_calls = Some(true);
        }
        self.out.push(Verdict {
            v: 1,
            verdict_id: verdict_id(&m.session_id, &m.event_id, f.rule, f.attempt),
            session_id: m.session_id.clone(),
            turn_id: self.turn_id.map(str::to_string),
            event_id: m.event_id.clone(),
            ts: format_ts(m.ts_ms),
            emitted_at: None,
            action,
            rule: f.rule,
            message: f.message,
            directives,
            attempt: f.attempt,
            evidence: f.evidence,
            tenant: m.tenant.clone(),
            agent: m.agent.clone(),
            model: m.model.clone(),
            enforce: mode == Mode::Enforce,
            policy_version: self.policy_version.to_string(),
            loop_cost: None,
            loop_since_ms: f.since_ms,
        });
    }
}
