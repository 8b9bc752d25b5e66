//! Claude Code's hooks (settings.json `hooks`): `PreToolUse`, `PostToolUse`,
//! `PostToolUseFailure`, `UserPromptSubmit`, `Stop`. Answers are JSON on stdout with exit 0;
//! an allow never sets `permissionDecision` (an "allow" there would skip the user's
//! permission prompt). Sources: tests/fixtures/hooks/SOURCES.md.

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
        "PostToolUse" | "PostToolUseFailure" => Moment::AfterTool {
            call_id,
            tool,
            error: (event_name == "PostToolUseFailure").then(|| {
                text(payload, "error")
                    .unwrap_or("the tool failed")
                    .to_string()
            }),
            output: payload
                .get("tool_response")
                .or_else(|| payload.get("error"))
                .cloned()
                .unwrap_or(Value::Null),
        },
        "UserPromptSubmit" => Moment::Prompt {
            text: text(payload, "prompt").unwrap_or_default().to_string(),
        },
        "Stop" | "SubagentStop" => Moment::Stop,
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
    let event = p.event_name.as_str();
    match (d, &p.moment) {
        (Decision::Allow, _) => json!({}),
        (Decision::Deny(m), _) => json!({"hookSpecificOutput": {
            "hookEventName": event, "permissionDecision": "deny", "permissionDecisionReason": m}}),
        (Decision::Stop(m), Moment::BeforeTool { .. }) => json!({
            "continue": false, "stopReason": m,
            "hookSpecificOutput": {"hookEventName": event, "permissionDecision": "deny",
                                   "permissionDecisionReason": m}}),
        (Decision::Stop(m), _) => json!({"continue": false, "stopReason": m}),
        (Decision::Context(m), _) => json!({"hookSpecificOutput": {
            "hookEventName": event, "additionalContext": m}}),
    }
}
