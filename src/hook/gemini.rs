//! Gemini CLI's hooks (settings.json `hooks`): `BeforeTool`, `AfterTool`, `BeforeAgent`,
//! `AfterAgent`. Answers are JSON on stdout with exit 0: `decision: "deny"` with a `reason`
//! the model reads, `continue: false` with a `stopReason` to end the run. `BeforeTool` has
//! no field the model reads on an allowed call, so a steer is carried to the call's
//! `AfterTool` (`carry`). Sources: tests/fixtures/hooks/SOURCES.md.

use super::moment::{bounded_id, derived_call_id, required, text, Decision, Moment, Payload};
use serde_json::{json, Value};

pub fn read(payload: &Value) -> Result<Payload, String> {
    let event_name = required(payload, "hook_event_name")?.to_string();
    let session_id = match text(payload, "session_id").filter(|s| !s.is_empty()) {
        Some(s) => s.to_string(),
        None => std::env::var("GEMINI_SESSION_ID").map_err(|_| "no `session_id`".to_string())?,
    };
    let session_id = bounded_id(&session_id);
    let tool = text(payload, "tool_name")
        .filter(|t| !t.is_empty())
        .unwrap_or("unknown")
        .to_string();
    let input = payload.get("tool_input").cloned().unwrap_or(Value::Null);
    // Gemini gives a call no id: the same call before and after gets the same derived one.
    let call_id = derived_call_id(&session_id, &tool, &input);
    let moment = match event_name.as_str() {
        "BeforeTool" => Moment::BeforeTool {
            call_id,
            tool,
            input,
        },
        "AfterTool" => {
            let response = payload.get("tool_response").cloned().unwrap_or(Value::Null);
            let error = match response.get("error") {
                Some(Value::String(e)) if !e.is_empty() => Some(e.clone()),
                Some(Value::Object(e)) => Some(
                    e.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("the tool failed")
                        .to_string(),
                ),
                _ => None,
            };
            Moment::AfterTool {
                call_id,
                tool,
                error,
                output: response,
            }
        }
        "BeforeAgent" => Moment::Prompt {
            text: text(payload, "prompt").unwrap_or_default().to_string(),
        },
        "AfterAgent" => Moment::Stop,
        _ => Moment::Other,
    };
    Ok(Payload {
        session_id,
        event_name,
        model: None,
        moment,
    })
}

pub fn answer(p: &Payload, d: &Decision) -> Value {
    match (d, &p.moment) {
        (Decision::Allow, _) => json!({}),
        (Decision::Deny(m), _) => json!({"decision": "deny", "reason": m}),
        (Decision::Stop(m), Moment::BeforeTool { .. }) => {
            json!({"continue": false, "stopReason": m, "decision": "deny", "reason": m})
        }
        (Decision::Stop(m), _) => json!({"continue": false, "stopReason": m}),
        (Decision::Context(m), Moment::AfterTool { .. }) => json!({"hookSpecificOutput": {
            "hookEventName": p.event_name, "additionalContext": m}}),
        // Carried to the AfterTool before we get here; nothing the model would read.
        (Decision::Context(_), _) => json!({}),
    }
}
