//! Codex CLI's hooks (hooks.json or `[hooks]` in config.toml): `PreToolUse`, `PostToolUse`,
//! `UserPromptSubmit`, `Stop`. Codex's schemas refuse unknown fields (the hook then counts
//! as failed and the tool runs), so answers carry only the fields each event takes:
//! `PreToolUse` cannot stop the run (`continue` is refused there), so an abort denies the
//! call and the run stops at the call's `PostToolUse` or the next prompt. Sources:
//! tests/fixtures/hooks/SOURCES.md.

use super::moment::{bounded_id, required, text, tool_of, Decision, Moment, Payload};
use serde_json::{json, Value};

pub fn read(payload: &Value) -> Result<Payload, String> {
    let event_name = required(payload, "hook_event_name")?.to_string();
    let session_id = bounded_id(required(payload, "session_id")?);
    let (call_id, tool, input) = tool_of(payload, &session_id);
    let moment = match event_name.as_str() {
        "PreToolUse" => Moment::BeforeTool {
            call_id,
            tool,
            input,
        },
        // Codex reports no exit status for a shell call (its response is the output text).
        "PostToolUse" => Moment::AfterTool {
            call_id,
            tool,
            error: None,
            output: payload.get("tool_response").cloned().unwrap_or(Value::Null),
        },
        "UserPromptSubmit" => Moment::Prompt {
            text: text(payload, "prompt").unwrap_or_default().to_string(),
        },
        "Stop" => Moment::Stop,
        _ => Moment::Other,
    };
    Ok(Payload {
        session_id,
        event_name,
        model: text(payload, "model").map(str::to_string),
        moment,
    })
}

pub fn answer(p: &Payload, d: &Decision) -> Value {
    let event = p.event_name.as_str();
    match (d, &p.moment) {
        (Decision::Allow, _) => json!({}),
        (Decision::Deny(m) | Decision::Stop(m), Moment::BeforeTool { .. }) => {
            json!({"hookSpecificOutput": {"hookEventName": event,
                "permissionDecision": "deny", "permissionDecisionReason": m}})
        }
        (Decision::Stop(m), _) => json!({"continue": false, "stopReason": m}),
        (Decision::Deny(m) | Decision::Context(m), _) => {
            json!({"hookSpecificOutput": {"hookEventName": event, "additionalContext": m}})
        }
    }
}
