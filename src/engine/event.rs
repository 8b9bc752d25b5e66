//! Events from agent runtimes: the wire form (contract v1), decoding with clear errors,
//! and the validated `Event` the engine consumes. Pure: no IO.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

mod checks;

use checks::{check_len, non_empty, parse_ts, request_limits, usage};
pub use checks::{quote, MAX_DECODE_ERROR_BYTES};

/// Limits on identifiers (contract v1).
pub const MAX_EVENT_ID_CHARS: usize = 128;
pub const MAX_SESSION_ID_CHARS: usize = 256;
/// Longest turn id, call id, tool name, tenant, agent or model: names, not payloads.
pub const MAX_NAME_CHARS: usize = 256;
/// Longest evidence string (resource, state before/after, output hash).
pub const MAX_EVIDENCE_CHARS: usize = 1024;
/// Longer error texts are cut (they are compared, not kept whole).
pub const MAX_ERROR_CHARS: usize = 4096;
/// Longest verdict id a feedback event may name (the guard's are 32 characters).
pub const MAX_VERDICT_ID_CHARS: usize = 128;
/// Longer feedback notes are cut (counted, never kept or exported).
pub const MAX_NOTE_CHARS: usize = 1024;
/// Latest event time accepted: 9999-12-31T23:59:59.999Z (keeps time arithmetic in range).
pub const MAX_TS_MS: i64 = 253_402_300_799_999;

/// Why an event could not be read. Each variant has a short, stable `reason()` used as a
/// metric label and as the dead-letter header.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum DecodeError {
    #[error("not valid JSON: {0}")]
    Json(String),
    /// The field's path and serde's complaint, without a position: `field `tool`:
    /// invalid type: integer `42`, expected a string`.
    #[error("{0}")]
    WrongType(String),
    #[error("unsupported contract version {0} (expected 1)")]
    Version(i64),
    #[error("missing field `{field}` for type `{kind}`")]
    MissingField { field: &'static str, kind: String },
    #[error("invalid field `{field}`: {why}")]
    InvalidField { field: &'static str, why: String },
    #[error("session id `{key}` differs from the Kafka key")]
    KeyMismatch { key: String },
    #[error("the record has no Kafka key (it must be the session id)")]
    MissingKey,
}

impl DecodeError {
    /// Every `reason()` value, plus `empty_payload` for a record with no value.
    pub const REASONS: [&'static str; 8] = [
        "invalid_json",
        "wrong_type",
        "unsupported_version",
        "missing_field",
        "invalid_field",
        "key_mismatch",
        "missing_key",
        "empty_payload",
    ];

    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::Json(_) => "invalid_json",
            DecodeError::WrongType(_) => "wrong_type",
            DecodeError::Version(_) => "unsupported_version",
            DecodeError::MissingField { .. } => "missing_field",
            DecodeError::InvalidField { .. } => "invalid_field",
            DecodeError::KeyMismatch { .. } => "key_mismatch",
            DecodeError::MissingKey => "missing_key",
        }
    }
}

/// What the runtime can prove about a tool result (all optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_range: Option<[i64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_info: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    Mutation,
    Read,
    None,
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Ok,
    Error,
}

/// Most tool rounds a runtime may announce for one request (keeps arithmetic in range).
pub const MAX_ANNOUNCED_ROUNDS: u64 = 1_000_000;

/// Budgets a runtime announces with a user message (`limits`); each one, when present,
/// replaces the policy's value for that request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_rounds: Option<u32>,
}

/// Most tokens one model response may report, input or output (far above any context window).
pub const MAX_USAGE_TOKENS: u64 = 100_000_000;
/// Highest cost one model response may report, in the operator's currency.
pub const MAX_USAGE_COST: f64 = 1_000_000.0;

/// What one model response used, as the runtime reports it on `turn_end` or
/// `assistant_message` (contract: `usage`; every part optional). No rule reads it; the
/// engine attributes it to the loop it was spent in (`engine::spend`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

impl Usage {
    /// Input and output tokens together, when either was reported.
    pub fn tokens(&self) -> Option<u64> {
        match (self.input_tokens, self.output_tokens) {
            (None, None) => None,
            (i, o) => Some(i.unwrap_or(0).saturating_add(o.unwrap_or(0))),
        }
    }
}

/// The wire form of `limits`: unknown keys ignored (a later runtime may announce more).
#[derive(Debug, Clone, Default, Deserialize)]
struct WireLimits {
    max_tool_rounds: Option<u64>,
}

/// The flat wire form of an event. Unknown fields are ignored (forward compatible).
#[derive(Debug, Clone, Deserialize)]
#[serde(expecting = "an event (a JSON object)")]
struct WireEvent {
    v: Option<i64>,
    event_id: Option<String>,
    session_id: Option<String>,
    /// RFC 3339 text or integer epoch milliseconds.
    ts: Option<Value>,
    #[serde(rename = "type")]
    kind: Option<String>,
    turn_id: Option<String>,
    seq: Option<u64>,
    tenant: Option<String>,
    agent: Option<String>,
    model: Option<String>,
    text: Option<String>,
    call_id: Option<String>,
    tool: Option<String>,
    args: Option<Value>,
    status: Option<ToolStatus>,
    error: Option<String>,
    evidence: Option<Evidence>,
    #[serde(rename = "final")]
    is_final: Option<bool>,
    limits: Option<WireLimits>,
    /// Checked by hand (`checks::usage`): serde would read an array as the object, and
    /// a negative count must be `invalid_field`, not `wrong_type`.
    usage: Option<Value>,
    verdict_id: Option<String>,
    useful: Option<bool>,
    note: Option<String>,
}

/// The error for valid JSON that does not fit the wire form, naming the field: the text
/// is read again, on this error path only, tracking where the deserializer was. serde's
/// position (`at line 1 column 118`) is left out: the field says where.
fn wrong_type(text: &str, first: &serde_json::Error) -> DecodeError {
    let mut de = serde_json::Deserializer::from_str(text);
    let (path, message) = match serde_path_to_error::deserialize::<_, WireEvent>(&mut de) {
        // serde_json says only `expected value` for a number or bool where a string enum
        // (`status`, `effect`) belongs.
        Err(e) if e.inner().classify() == serde_json::error::Category::Syntax => (
            e.path().to_string(),
            "invalid type, expected a string".to_string(),
        ),
        Err(e) => (e.path().to_string(), without_position(e.inner())),
        // Not expected (the same text failed above); keep the first error then.
        Ok(_) => (String::from("."), without_position(first)),
    };
    DecodeError::WrongType(quote(&match path.as_str() {
        "." => message,
        // serde reads a struct from an array too, field by field: the culprit is the array.
        p if p.starts_with('[') => "invalid type: array, expected an event (a JSON object)".into(),
        path => format!("field `{path}`: {message}"),
    }))
}

/// serde_json's message without its ` at line L column C` suffix.
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    text.strip_suffix(&suffix).unwrap_or(&text).to_string()
}

/// Fields every event carries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Meta {
    pub event_id: String,
    pub session_id: String,
    /// Event time in epoch milliseconds.
    pub ts_ms: i64,
    pub seq: Option<u64>,
    pub tenant: Option<String>,
    pub agent: Option<String>,
    pub model: Option<String>,
}

/// The type-specific part of an event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Body {
    UserMessage {
        text: String,
        /// What the runtime itself allows this request (contract: `limits`).
        limits: RequestLimits,
    },
    AssistantMessage {
        turn_id: String,
        text: String,
        /// What the response used (contract: `usage`), when the runtime says.
        usage: Option<Usage>,
    },
    ToolCall {
        turn_id: String,
        call_id: String,
        tool: String,
        args: Value,
    },
    ToolResult {
        call_id: String,
        tool: String,
        status: ToolStatus,
        error: Option<String>,
        evidence: Option<Evidence>,
    },
    Reasoning {
        turn_id: String,
        text: String,
        is_final: bool,
    },
    Content {
        turn_id: String,
        text: String,
    },
    TurnEnd {
        turn_id: String,
        /// What the response used (contract: `usage`), when the runtime says.
        usage: Option<Usage>,
    },
    Compaction,
    SessionEnd,
    /// A person's (or a runtime's) judgement of a verdict the session got (issue 32):
    /// `useful` or not, an optional note. Not agent activity: no rule reads it.
    Feedback {
        verdict_id: String,
        useful: bool,
        note: Option<String>,
    },
    /// A type this version does not know: counted and skipped.
    Unknown {
        kind: String,
    },
}

impl Body {
    pub fn kind(&self) -> &str {
        match self {
            Body::UserMessage { .. } => "user_message",
            Body::AssistantMessage { .. } => "assistant_message",
            Body::ToolCall { .. } => "tool_call",
            Body::ToolResult { .. } => "tool_result",
            Body::Reasoning { .. } => "reasoning",
            Body::Content { .. } => "content",
            Body::TurnEnd { .. } => "turn_end",
            Body::Compaction => "compaction",
            Body::SessionEnd => "session_end",
            Body::Feedback { .. } => "feedback",
            Body::Unknown { kind } => kind,
        }
    }

    /// Reasoning or visible text that the text detectors read.
    pub fn carries_text(&self) -> bool {
        matches!(
            self,
            Body::Reasoning { .. } | Body::Content { .. } | Body::AssistantMessage { .. }
        )
    }

    pub fn turn_id(&self) -> Option<&str> {
        match self {
            Body::AssistantMessage { turn_id, .. }
            | Body::ToolCall { turn_id, .. }
            | Body::Reasoning { turn_id, .. }
            | Body::Content { turn_id, .. }
            | Body::TurnEnd { turn_id, .. } => Some(turn_id),
            _ => None,
        }
    }
}

/// A validated event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub meta: Meta,
    pub body: Body,
}

/// The known event types, in a fixed order (used for per-type counters).
pub const EVENT_TYPES: [&str; 10] = [
    "user_message",
    "assistant_message",
    "tool_call",
    "tool_result",
    "reasoning",
    "content",
    "turn_end",
    "compaction",
    "session_end",
    "feedback",
];

impl Event {
    /// Decodes one event from its JSON bytes.
    pub fn decode(bytes: &[u8]) -> Result<Event, DecodeError> {
        // One UTF-8 check of the whole record, instead of one per JSON string.
        let text =
            std::str::from_utf8(bytes).map_err(|e| DecodeError::Json(format!("not UTF-8: {e}")))?;
        let wire: WireEvent = serde_json::from_str(text).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => wrong_type(text, &e),
            // serde reports a number or bool where a string enum (`status`, `effect`)
            // belongs as a syntax error; the text is valid JSON all the same.
            _ if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() => {
                wrong_type(text, &e)
            }
            _ => DecodeError::Json(quote(&e.to_string())),
        })?;
        Event::from_wire(wire)
    }

    /// Decodes and checks that the event belongs to the Kafka key it was published under;
    /// a record without a key is an error (`missing_key`), never judged.
    pub fn decode_keyed(bytes: &[u8], key: Option<&[u8]>) -> Result<Event, DecodeError> {
        let key = key.ok_or(DecodeError::MissingKey)?;
        let event = Event::decode(bytes)?;
        if key != event.meta.session_id.as_bytes() {
            return Err(DecodeError::KeyMismatch {
                key: quote(&String::from_utf8_lossy(key)),
            });
        }
        Ok(event)
    }

    fn from_wire(mut w: WireEvent) -> Result<Event, DecodeError> {
        let kind = w.kind.take().ok_or(DecodeError::MissingField {
            field: "type",
            kind: "?".into(),
        })?;
        let missing = |field: &'static str| DecodeError::MissingField {
            field,
            kind: kind.clone(),
        };
        match w.v {
            Some(1) => {}
            Some(v) => return Err(DecodeError::Version(v)),
            None => return Err(missing("v")),
        }
        let event_id = w.event_id.ok_or_else(|| missing("event_id"))?;
        check_len("event_id", &event_id, MAX_EVENT_ID_CHARS)?;
        let session_id = w.session_id.ok_or_else(|| missing("session_id"))?;
        check_len("session_id", &session_id, MAX_SESSION_ID_CHARS)?;
        let ts_ms = parse_ts(w.ts.ok_or_else(|| missing("ts"))?)?;
        let turn = |t: Option<String>| t.ok_or_else(|| missing("turn_id"));
        let body = match kind.as_str() {
            "user_message" => Body::UserMessage {
                text: w.text.ok_or_else(|| missing("text"))?,
                limits: request_limits(w.limits)?,
            },
            "assistant_message" => Body::AssistantMessage {
                turn_id: turn(w.turn_id)?,
                text: w.text.unwrap_or_default(),
                usage: usage(w.usage)?,
            },
            "tool_call" => Body::ToolCall {
                turn_id: turn(w.turn_id)?,
                call_id: w.call_id.ok_or_else(|| missing("call_id"))?,
                tool: non_empty("tool", w.tool.ok_or_else(|| missing("tool"))?)?,
                args: w.args.unwrap_or(Value::Null),
            },
            "tool_result" => Body::ToolResult {
                call_id: w.call_id.ok_or_else(|| missing("call_id"))?,
                tool: w.tool.ok_or_else(|| missing("tool"))?,
                status: w.status.ok_or_else(|| missing("status"))?,
                error: w.error,
                evidence: w.evidence,
            },
            "reasoning" => Body::Reasoning {
                turn_id: turn(w.turn_id)?,
                text: w.text.ok_or_else(|| missing("text"))?,
                is_final: w.is_final.unwrap_or(false),
            },
            "content" => Body::Content {
                turn_id: turn(w.turn_id)?,
                text: w.text.ok_or_else(|| missing("text"))?,
            },
            "turn_end" => Body::TurnEnd {
                turn_id: turn(w.turn_id)?,
                usage: usage(w.usage)?,
            },
            "compaction" => Body::Compaction,
            "session_end" => Body::SessionEnd,
            "feedback" => Body::Feedback {
                verdict_id: non_empty(
                    "verdict_id",
                    w.verdict_id.ok_or_else(|| missing("verdict_id"))?,
                )?,
                useful: w.useful.ok_or_else(|| missing("useful"))?,
                note: w.note,
            },
            _ => Body::Unknown { kind },
        };
        let meta = Meta {
            event_id,
            session_id,
            ts_ms,
            seq: w.seq,
            tenant: w.tenant,
            agent: w.agent,
            model: w.model,
        };
        let mut event = Event { meta, body };
        event.check_sizes()?;
        Ok(event)
    }

    /// The wire (JSON) form of this event, as a runtime would publish it.
    pub fn to_wire(&self) -> Value {
        let m = &self.meta;
        let mut o = serde_json::Map::new();
        o.insert("v".into(), 1.into());
        o.insert("event_id".into(), m.event_id.clone().into());
        o.insert("session_id".into(), m.session_id.clone().into());
        o.insert("ts".into(), m.ts_ms.into());
        o.insert("type".into(), self.body.kind().into());
        if let Some(t) = self.body.turn_id() {
            o.insert("turn_id".into(), t.into());
        }
        for (k, v) in [
            ("tenant", &m.tenant),
            ("agent", &m.agent),
            ("model", &m.model),
        ] {
            if let Some(v) = v {
                o.insert(k.into(), v.clone().into());
            }
        }
        if let Some(s) = m.seq {
            o.insert("seq".into(), s.into());
        }
        match &self.body {
            Body::UserMessage { text, limits } => {
                o.insert("text".into(), text.clone().into());
                if *limits != RequestLimits::default() {
                    o.insert(
                        "limits".into(),
                        serde_json::to_value(limits).unwrap_or(Value::Null),
                    );
                }
            }
            Body::AssistantMessage { text, usage, .. } => {
                o.insert("text".into(), text.clone().into());
                insert_usage(&mut o, usage);
            }
            Body::Content { text, .. } => {
                o.insert("text".into(), text.clone().into());
            }
            Body::Reasoning { text, is_final, .. } => {
                o.insert("text".into(), text.clone().into());
                if *is_final {
                    o.insert("final".into(), true.into());
                }
            }
            Body::ToolCall {
                call_id,
                tool,
                args,
                ..
            } => {
                o.insert("call_id".into(), call_id.clone().into());
                o.insert("tool".into(), tool.clone().into());
                o.insert("args".into(), args.clone());
            }
            Body::ToolResult {
                call_id,
                tool,
                status,
                error,
                evidence,
            } => {
                o.insert("call_id".into(), call_id.clone().into());
                o.insert("tool".into(), tool.clone().into());
                o.insert(
                    "status".into(),
                    serde_json::to_value(status).unwrap_or(Value::Null),
                );
                if let Some(e) = error {
                    o.insert("error".into(), e.clone().into());
                }
                if let Some(ev) = evidence {
                    o.insert(
                        "evidence".into(),
                        serde_json::to_value(ev).unwrap_or(Value::Null),
                    );
                }
            }
            Body::TurnEnd { usage, .. } => insert_usage(&mut o, usage),
            Body::Feedback {
                verdict_id,
                useful,
                note,
            } => {
                o.insert("verdict_id".into(), verdict_id.clone().into());
                o.insert("useful".into(), (*useful).into());
                if let Some(n) = note {
                    o.insert("note".into(), n.clone().into());
                }
            }
            Body::Compaction | Body::SessionEnd | Body::Unknown { .. } => {}
        }
        Value::Object(o)
    }
}

fn insert_usage(o: &mut serde_json::Map<String, Value>, usage: &Option<Usage>) {
    if let Some(u) = usage {
        o.insert(
            "usage".into(),
            serde_json::to_value(u).unwrap_or(Value::Null),
        );
    }
}

/// Formats epoch milliseconds as RFC 3339 UTC with millisecond precision.
pub fn format_ts(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

#[cfg(test)]
mod tests;
