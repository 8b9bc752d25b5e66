//! The MCP messages the proxy reads and writes, with the official Rust SDK's types
//! (`rmcp::model`): a `tools/call` request into a `tool_call` event, its response into a
//! `tool_result`, a refused call's error result, a steer added as a text block.

use super::Proxy;
use crate::hook::Moment;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use serde_json::{json, Map, Value};
use xxhash_rust::xxh3::xxh3_64;

/// A client message, as far as the proxy cares.
pub enum Inbound {
    ToolCall(CallFrame),
    /// Anything else: forwarded unchanged.
    Other,
}

/// One `tools/call` request in flight.
pub struct CallFrame {
    /// Its JSON-RPC id, as sent.
    pub id: Value,
    pub tool: String,
    pub arguments: Value,
    /// A steer or warn given on the call, for its result.
    pub steer: Option<String>,
}

pub fn inbound(line: &str) -> Inbound {
    let Ok(Value::Object(msg)) = serde_json::from_str::<Value>(line) else {
        return Inbound::Other;
    };
    let (Some(id), Some("tools/call")) = (msg.get("id"), msg.get("method").and_then(Value::as_str))
    else {
        return Inbound::Other;
    };
    let params: CallToolRequestParams = match msg.get("params").cloned().map(serde_json::from_value)
    {
        Some(Ok(p)) => p,
        // A malformed call is the server's to refuse.
        _ => return Inbound::Other,
    };
    Inbound::ToolCall(CallFrame {
        id: id.clone(),
        tool: params.name.to_string(),
        arguments: params
            .arguments
            .map_or(Value::Object(Map::new()), Value::Object),
        steer: None,
    })
}

/// The id of a JSON-RPC response, as `CallFrame::id_key` writes it.
pub fn response_id(line: &str) -> Option<String> {
    let msg: Value = serde_json::from_str(line).ok()?;
    if msg.get("method").is_some() {
        return None; // a request or notification from the server
    }
    msg.get("id").map(Value::to_string)
}

/// The error result a refused call is answered with: the model reads the message.
pub fn refused(id: &Value, message: &str) -> String {
    let mut result = CallToolResult::error(vec![ContentBlock::text(message)]);
    // Absent means complete in every protocol version; older clients never knew the field.
    result.result_type = None;
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

/// Adds a text block to a response's result (a steer the model should read with it).
pub fn add_text(response: &mut Value, text: &str) {
    if let Some(Value::Array(content)) = response.pointer_mut("/result/content") {
        content.push(serde_json::to_value(ContentBlock::text(text)).expect("serialises"));
    }
}

/// The moment an event stands for, to read a verdict on it (`Decision::from_action`).
pub fn moment_of(event: &Value) -> Moment {
    let s = |f: &str| event[f].as_str().unwrap_or_default().to_string();
    match event["type"].as_str() {
        Some("tool_call") => Moment::BeforeTool {
            call_id: s("call_id"),
            tool: s("tool"),
            input: event["args"].clone(),
        },
        _ => Moment::AfterTool {
            call_id: s("call_id"),
            tool: s("tool"),
            error: None,
            output: Value::Null,
        },
    }
}

impl CallFrame {
    pub fn id_key(&self) -> String {
        self.id.to_string()
    }

    fn call_id(&self, proxy: &Proxy) -> String {
        let key = format!("{}\u{0}{}", proxy.session, self.id);
        format!("mcp-{:016x}", xxh3_64(key.as_bytes()))
    }

    fn event(&self, proxy: &Proxy, kind: &str, fields: Value) -> Value {
        let mut e = json!({
            "v": 1,
            "event_id": format!("mcp-{kind}-{:016x}", rand::random::<u64>()),
            "session_id": proxy.session,
            "ts": now_ms(),
            "type": kind,
            "agent": proxy.args.agent,
        });
        if let Some(t) = &proxy.args.tenant {
            e["tenant"] = t.clone().into();
        }
        if let Some(m) = &proxy.args.model {
            e["model"] = m.clone().into();
        }
        if let (Value::Object(e), Value::Object(f)) = (&mut e, fields) {
            e.extend(f);
        }
        e
    }

    /// The call as a `tool_call` event; each call is its own response (turn).
    pub fn call_event(&self, proxy: &Proxy) -> Value {
        let call_id = self.call_id(proxy);
        self.event(
            proxy,
            "tool_call",
            json!({"turn_id": call_id, "call_id": call_id, "tool": self.tool, "args": self.arguments}),
        )
    }

    /// The server's response line, parsed, and the `tool_result` it becomes: an error for a
    /// JSON-RPC error or an `isError` result, with its first text.
    pub fn result_event(&self, proxy: &Proxy, line: &str) -> (Value, Value) {
        let response: Value = serde_json::from_str(line).unwrap_or(Value::Null);
        let (error, hashed) = match (response.get("result"), response.get("error")) {
            (Some(r), _) => {
                let result = serde_json::from_value::<CallToolResult>(r.clone()).ok();
                let failed = result.as_ref().and_then(|r| r.is_error).unwrap_or(false);
                let text = result.as_ref().and_then(first_text).unwrap_or_default();
                (
                    failed.then(|| {
                        if text.is_empty() {
                            "the tool failed".into()
                        } else {
                            text
                        }
                    }),
                    r,
                )
            }
            (None, Some(e)) => (
                Some(
                    e.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("error")
                        .to_string(),
                ),
                e,
            ),
            (None, None) => (Some("no result".into()), &Value::Null),
        };
        let hash = format!("{:016x}", xxh3_64(hashed.to_string().as_bytes()));
        let mut fields = json!({"call_id": self.call_id(proxy), "tool": self.tool,
            "status": if error.is_some() { "error" } else { "ok" },
            "evidence": {"output_hash": hash}});
        if let Some(e) = error {
            fields["error"] = e.into();
        }
        let event = self.event(proxy, "tool_result", fields);
        (response, event)
    }
}

fn first_text(r: &CallToolResult) -> Option<String> {
    r.content.iter().find_map(|c| match c {
        ContentBlock::Text(t) => Some(t.text.clone()),
        _ => None,
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
