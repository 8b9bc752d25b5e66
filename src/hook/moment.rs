//! What a hook call is about, whichever CLI sent it (`Moment`), the event it becomes, and
//! what the CLI is to do (`Decision`).

use super::{base_event, HookArgs};
use serde_json::{json, Value};
use xxhash_rust::xxh3::xxh3_64;

/// The longest ids the contract takes (`call_id`, `tool`: 256 chars; `session_id`: 256).
const MAX_ID: usize = 256;

#[derive(Debug, Clone, PartialEq)]
pub enum Moment {
    /// A tool is about to run: checked, and the CLI told to deny it on a block.
    BeforeTool {
        call_id: String,
        tool: String,
        input: Value,
    },
    /// A tool ran: its result is checked too (a repeated error is steered here).
    AfterTool {
        call_id: String,
        tool: String,
        /// The error text when the CLI says the call failed.
        error: Option<String>,
        output: Value,
    },
    /// The user submitted a prompt: a new request.
    Prompt { text: String },
    /// The agent finished its answer.
    Stop,
    /// A hook event this command does not handle (allowed, nothing sent).
    Other,
}

impl Moment {
    pub fn kind(&self) -> &'static str {
        match self {
            Moment::BeforeTool { .. } => "tool call",
            Moment::AfterTool { .. } => "tool result",
            Moment::Prompt { .. } => "prompt",
            Moment::Stop => "stop",
            Moment::Other => "hook event",
        }
    }

    /// Waits for the guard's answer (tool calls and results); the rest is only published.
    pub fn is_checked(&self) -> bool {
        matches!(self, Moment::BeforeTool { .. } | Moment::AfterTool { .. })
    }
}

/// One hook call, read.
#[derive(Debug, Clone)]
pub struct Payload {
    pub session_id: String,
    /// The CLI's own name for the hook event (`PreToolUse`, `BeforeTool`, ...).
    pub event_name: String,
    pub model: Option<String>,
    pub moment: Moment,
}

impl Payload {
    /// The contract event for this call, or None for a moment that sends nothing.
    ///
    /// The CLIs do not say which model response a call belongs to, so each call is its own
    /// response (`turn_id` = its call id; docs/decisions.md, "Hooks: one call, one turn").
    pub fn event(&self, args: &HookArgs) -> Option<Value> {
        let (kind, fields) = match &self.moment {
            Moment::BeforeTool {
                call_id,
                tool,
                input,
            } => (
                "tool_call",
                json!({"turn_id": call_id, "call_id": call_id, "tool": tool, "args": input}),
            ),
            Moment::AfterTool {
                call_id,
                tool,
                error,
                output,
            } => {
                let hash = format!("{:016x}", xxh3_64(output.to_string().as_bytes()));
                let mut f = json!({"call_id": call_id, "tool": tool,
                    "status": if error.is_some() { "error" } else { "ok" },
                    "evidence": {"output_hash": hash}});
                if let Some(e) = error {
                    f["error"] = e.clone().into();
                }
                ("tool_result", f)
            }
            Moment::Prompt { text } => ("user_message", json!({"text": text})),
            Moment::Stop => (
                "turn_end",
                json!({"turn_id": format!("stop-{:08x}", rand::random::<u32>())}),
            ),
            Moment::Other => return None,
        };
        let mut e = base_event(args, self, kind);
        if let Value::Object(f) = fields {
            e.extend(f);
        }
        Some(Value::Object(e))
    }
}

/// A string field of the payload.
pub(crate) fn text<'a>(payload: &'a Value, field: &str) -> Option<&'a str> {
    payload.get(field).and_then(Value::as_str)
}

/// A required string field, or an error naming it.
pub(crate) fn required<'a>(payload: &'a Value, field: &str) -> Result<&'a str, String> {
    text(payload, field)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("no `{field}`"))
}

/// An id the contract takes: itself when short enough, else a hash of it.
pub(crate) fn bounded_id(id: &str) -> String {
    if id.chars().count() <= MAX_ID {
        id.to_string()
    } else {
        format!("h{:016x}", xxh3_64(id.as_bytes()))
    }
}

/// The call id, tool name and input of a Claude Code or Codex tool payload (`tool_use_id`,
/// `tool_name`, `tool_input`); a call id derived from them when the CLI gave none.
pub(crate) fn tool_of(payload: &Value, session_id: &str) -> (String, String, Value) {
    let tool = text(payload, "tool_name")
        .filter(|t| !t.is_empty())
        .unwrap_or("unknown")
        .to_string();
    let input = payload.get("tool_input").cloned().unwrap_or(Value::Null);
    let call_id = text(payload, "tool_use_id")
        .map(bounded_id)
        .unwrap_or_else(|| derived_call_id(session_id, &tool, &input));
    (call_id, tool, input)
}

/// A call id for CLIs whose payload has none: the same call (session, tool, input) before
/// and after it runs gets the same id.
pub(crate) fn derived_call_id(session: &str, tool: &str, input: &Value) -> String {
    let key = format!("{session}\u{0}{tool}\u{0}{input}");
    format!("call-{:016x}", xxh3_64(key.as_bytes()))
}

/// What the CLI is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go on as if the hook were not there.
    Allow,
    /// Go on, and show the model this text (a steer or a warn).
    Context(String),
    /// Refuse the tool call; the model reads the text as the reason (a block).
    Deny(String),
    /// End the agent's run with the text (an abort).
    Stop(String),
}

impl Decision {
    /// An enforced verdict's action, at this moment. A block on a result has no call left to
    /// refuse: the model reads it as context.
    pub fn from_action(action: &str, message: String, moment: &Moment) -> Decision {
        match action {
            "abort" => Decision::Stop(message),
            "block" if matches!(moment, Moment::BeforeTool { .. }) => Decision::Deny(message),
            "block" | "steer" | "warn" => Decision::Context(message),
            _ => Decision::Allow, // an action of a later contract version
        }
    }
}
