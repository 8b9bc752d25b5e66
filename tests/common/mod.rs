//! Test helpers: a script builder for one session's events, and engine runners.
#![allow(dead_code)]

use loopguard::engine::event::{Body, Event, Evidence, Meta, ToolStatus};
use loopguard::engine::policy::PolicySet;
use loopguard::engine::verdict::{Action, Rule, Verdict};
use loopguard::engine::{Engine, Limits};
use serde_json::{json, Value};

/// Builds one session's events with increasing ids and times.
pub struct Script {
    pub session: String,
    pub ts: i64,
    n: u64,
    turn: u64,
    calls: u64,
    pub events: Vec<Event>,
}

impl Script {
    pub fn new(session: &str) -> Self {
        Script {
            session: session.into(),
            ts: 1_767_225_600_000,
            n: 0,
            turn: 0,
            calls: 0,
            events: Vec::new(),
        }
    }

    pub fn advance(&mut self, ms: i64) -> &mut Self {
        self.ts += ms;
        self
    }

    fn push(&mut self, body: Body) -> String {
        self.n += 1;
        self.ts += 10;
        let id = format!("{}-e{}", self.session, self.n);
        let meta = Meta {
            event_id: id.clone(),
            session_id: self.session.clone(),
            ts_ms: self.ts,
            seq: Some(self.n),
            tenant: Some("acme".into()),
            agent: Some("coder".into()),
            model: Some("m1".into()),
        };
        self.events.push(Event { meta, body });
        id
    }

    pub fn turn_id(&self) -> String {
        format!("t{}", self.turn)
    }

    pub fn new_turn(&mut self) -> &mut Self {
        self.turn += 1;
        self
    }

    pub fn user(&mut self, text: &str) -> String {
        self.push(Body::UserMessage {
            text: text.into(),
            limits: Default::default(),
        })
    }

    /// A request whose runtime announces its own round budget (`limits.max_tool_rounds`).
    pub fn user_with_budget(&mut self, text: &str, max_tool_rounds: u32) -> String {
        self.push(Body::UserMessage {
            text: text.into(),
            limits: loopguard::engine::event::RequestLimits {
                max_tool_rounds: Some(max_tool_rounds),
            },
        })
    }

    pub fn assistant(&mut self, text: &str) -> String {
        let turn_id = self.turn_id();
        self.push(Body::AssistantMessage {
            turn_id,
            text: text.into(),
            usage: None,
        })
    }

    /// A tool call in the current turn; returns (event id, call id).
    pub fn call(&mut self, tool: &str, args: Value) -> (String, String) {
        self.calls += 1;
        let call_id = format!("c{}", self.calls);
        let turn_id = self.turn_id();
        let id = self.push(Body::ToolCall {
            turn_id,
            call_id: call_id.clone(),
            tool: tool.into(),
            args,
        });
        (id, call_id)
    }

    pub fn result(
        &mut self,
        call_id: &str,
        tool: &str,
        ok: bool,
        error: Option<&str>,
        evidence: Option<Evidence>,
    ) -> String {
        let status = if ok {
            ToolStatus::Ok
        } else {
            ToolStatus::Error
        };
        self.push(Body::ToolResult {
            call_id: call_id.into(),
            tool: tool.into(),
            status,
            error: error.map(Into::into),
            evidence,
        })
    }

    pub fn turn_end(&mut self) -> String {
        let turn_id = self.turn_id();
        self.push(Body::TurnEnd {
            turn_id,
            usage: None,
        })
    }

    pub fn reasoning(&mut self, text: &str) -> String {
        let turn_id = self.turn_id();
        self.push(Body::Reasoning {
            turn_id,
            text: text.into(),
            is_final: false,
        })
    }

    pub fn reasoning_final(&mut self, text: &str) -> String {
        let turn_id = self.turn_id();
        self.push(Body::Reasoning {
            turn_id,
            text: text.into(),
            is_final: true,
        })
    }

    pub fn content(&mut self, text: &str) -> String {
        let turn_id = self.turn_id();
        self.push(Body::Content {
            turn_id,
            text: text.into(),
        })
    }

    pub fn compaction(&mut self) -> String {
        self.push(Body::Compaction)
    }

    /// A whole round: new turn, one call, turn end, its result. Returns the call's event id.
    pub fn round(&mut self, tool: &str, args: Value, evidence: Option<Evidence>) -> String {
        self.new_turn();
        let (id, call) = self.call(tool, args);
        self.turn_end();
        self.result(&call, tool, true, None, evidence);
        id
    }
}

pub fn run_with(policy: &Value, events: &[Event]) -> Vec<Verdict> {
    let set = PolicySet::compile(policy).expect("valid policy");
    let mut engine = Engine::new(set, Limits::default());
    let mut out = Vec::new();
    for e in events {
        engine.handle_event(e.clone(), &mut out);
    }
    out
}

pub fn run(events: &[Event]) -> Vec<Verdict> {
    run_with(&json!({}), events)
}

pub fn of_rule(verdicts: &[Verdict], rule: Rule) -> Vec<&Verdict> {
    verdicts.iter().filter(|v| v.rule == rule).collect()
}

pub fn strong(verdicts: &[Verdict]) -> Vec<&Verdict> {
    verdicts
        .iter()
        .filter(|v| matches!(v.action, Action::Block | Action::Abort))
        .collect()
}

/// The verdicts of the reasoning rules.
pub fn reasoning_verdicts(verdicts: &[Verdict]) -> Vec<&Verdict> {
    verdicts
        .iter()
        .filter(|v| v.rule.as_str().starts_with("reasoning."))
        .collect()
}

pub fn evidence(effect: &str) -> Evidence {
    serde_json::from_value(json!({"effect": effect})).unwrap()
}

pub fn ev(v: Value) -> Evidence {
    serde_json::from_value(v).unwrap()
}
