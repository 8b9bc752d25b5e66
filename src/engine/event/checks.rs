//! The checks a decoded event passes before the engine sees it: bounded names and
//! evidence, a cut error text, announced limits in range, a timestamp in range; and the
//! quoting of decode errors. Pure: no IO.

use super::*;

impl Event {
    /// Names and evidence are bounded (they are kept in the session's windows and state);
    /// an error text is cut instead, since a long stack trace is a normal error.
    pub(super) fn check_sizes(&mut self) -> Result<(), DecodeError> {
        let m = &self.meta;
        for (field, value) in [
            ("tenant", &m.tenant),
            ("agent", &m.agent),
            ("model", &m.model),
        ] {
            check_max(field, value.as_deref(), MAX_NAME_CHARS)?;
        }
        check_max("turn_id", self.body.turn_id(), MAX_NAME_CHARS)?;
        match &mut self.body {
            Body::Feedback {
                verdict_id, note, ..
            } => {
                check_max("verdict_id", Some(verdict_id), MAX_VERDICT_ID_CHARS)?;
                if let Some(text) = note.as_mut().filter(|t| t.len() > MAX_NOTE_CHARS) {
                    if let Some((cut, _)) = text.char_indices().nth(MAX_NOTE_CHARS) {
                        text.truncate(cut);
                    }
                }
            }
            Body::ToolCall { call_id, tool, .. } => {
                check_max("call_id", Some(call_id), MAX_NAME_CHARS)?;
                check_max("tool", Some(tool), MAX_NAME_CHARS)?;
            }
            Body::ToolResult {
                call_id,
                tool,
                error,
                evidence,
                ..
            } => {
                check_max("call_id", Some(call_id), MAX_NAME_CHARS)?;
                check_max("tool", Some(tool), MAX_NAME_CHARS)?;
                if let Some(e) = evidence {
                    for (field, value) in [
                        ("evidence.resource", &e.resource),
                        ("evidence.state_before", &e.state_before),
                        ("evidence.state_after", &e.state_after),
                        ("evidence.output_hash", &e.output_hash),
                    ] {
                        check_max(field, value.as_deref(), MAX_EVIDENCE_CHARS)?;
                    }
                }
                if let Some(text) = error.as_mut().filter(|t| t.len() > MAX_ERROR_CHARS) {
                    if let Some((cut, _)) = text.char_indices().nth(MAX_ERROR_CHARS) {
                        text.truncate(cut);
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

pub(super) fn request_limits(w: Option<WireLimits>) -> Result<RequestLimits, DecodeError> {
    let Some(w) = w else {
        return Ok(RequestLimits::default());
    };
    let max_tool_rounds = match w.max_tool_rounds {
        None => None,
        Some(n) if (1..=MAX_ANNOUNCED_ROUNDS).contains(&n) => Some(n as u32),
        Some(n) => {
            return Err(DecodeError::InvalidField {
                field: "limits.max_tool_rounds",
                why: format!("{n} not in 1..={MAX_ANNOUNCED_ROUNDS}"),
            })
        }
    };
    Ok(RequestLimits { max_tool_rounds })
}

/// `usage` on `turn_end` / `assistant_message`: an object whose counts are non-negative
/// integers up to `MAX_USAGE_TOKENS` and whose cost is a finite number in
/// 0..=`MAX_USAGE_COST`. A value of the wrong JSON type is `wrong_type`; one out of range
/// (negative, absurd) is `invalid_field`. A `null` part counts as absent; unknown keys are
/// ignored (a later runtime may report more).
pub(super) fn usage(raw: Option<Value>) -> Result<Option<Usage>, DecodeError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let Value::Object(map) = raw else {
        return Err(DecodeError::WrongType(format!(
            "field `usage`: invalid type: {}, expected an object",
            json_kind(&raw)
        )));
    };
    let number = |field: &'static str, what: &str| -> Result<Option<f64>, DecodeError> {
        let key = &field["usage.".len()..];
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(other) => Err(DecodeError::WrongType(format!(
                "field `{field}`: invalid type: {}, expected {what}",
                json_kind(other)
            ))),
        }
    };
    let tokens = |field: &'static str| -> Result<Option<u64>, DecodeError> {
        let Some(x) = number(field, "a non-negative integer")? else {
            return Ok(None);
        };
        if x.fract() != 0.0 {
            return Err(DecodeError::WrongType(format!(
                "field `{field}`: invalid type: floating point `{x}`, expected an integer"
            )));
        }
        if !(0.0..=MAX_USAGE_TOKENS as f64).contains(&x) {
            return Err(DecodeError::InvalidField {
                field,
                why: format!("{x} not in 0..={MAX_USAGE_TOKENS}"),
            });
        }
        Ok(Some(x as u64))
    };
    let input_tokens = tokens("usage.input_tokens")?;
    let output_tokens = tokens("usage.output_tokens")?;
    let cost = match number("usage.cost", "a number")? {
        Some(c) if !(c.is_finite() && (0.0..=MAX_USAGE_COST).contains(&c)) => {
            return Err(DecodeError::InvalidField {
                field: "usage.cost",
                why: format!("{c} not in 0..={MAX_USAGE_COST}"),
            })
        }
        c => c,
    };
    Ok(Some(Usage {
        input_tokens,
        output_tokens,
        cost,
    }))
}

/// How a JSON value is named in a `wrong_type` error (serde's words).
fn json_kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) => format!("number `{n}`"),
        Value::String(s) => quote(&format!("string {s:?}")),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "map".into(),
    }
}

/// Longest error text: serde's messages quote the offending input, which can be as long
/// as the record; a longer text keeps its head and its tail (where the position is).
pub const MAX_DECODE_ERROR_BYTES: usize = 320;

/// `text` cut to `MAX_DECODE_ERROR_BYTES` (on char boundaries), the middle elided.
pub fn quote(text: &str) -> String {
    if text.len() <= MAX_DECODE_ERROR_BYTES {
        return text.to_string();
    }
    let mut head = 224;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - 64;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}…({} bytes)…{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

#[inline]
fn check_max(field: &'static str, s: Option<&str>, max: usize) -> Result<(), DecodeError> {
    match s.filter(|s| s.len() > max).map(|s| s.chars().count()) {
        Some(n) if n > max => Err(DecodeError::InvalidField {
            field,
            why: format!("length {n} over {max}"),
        }),
        _ => Ok(()),
    }
}

#[inline]
pub(super) fn check_len(field: &'static str, s: &str, max: usize) -> Result<(), DecodeError> {
    // No more bytes than `max`: no more chars either, nothing to count.
    if !s.is_empty() && s.len() <= max {
        return Ok(());
    }
    let n = s.chars().count();
    if n == 0 || n > max {
        return Err(DecodeError::InvalidField {
            field,
            why: format!("length {n} not in 1..={max}"),
        });
    }
    Ok(())
}

#[inline]
pub(super) fn non_empty(field: &'static str, s: String) -> Result<String, DecodeError> {
    if s.is_empty() {
        return Err(DecodeError::InvalidField {
            field,
            why: "empty".into(),
        });
    }
    Ok(s)
}

#[inline]
pub(super) fn parse_ts(ts: Value) -> Result<i64, DecodeError> {
    let bad = |why: String| DecodeError::InvalidField { field: "ts", why };
    match ts {
        Value::Number(n) => n
            .as_i64()
            .filter(|ms| (0..=MAX_TS_MS).contains(ms))
            .ok_or_else(|| {
                bad(format!(
                    "{n} is not epoch milliseconds between 1970 and 9999"
                ))
            }),
        Value::String(s) => match chrono::DateTime::parse_from_rfc3339(&s) {
            Ok(t) if (0..=MAX_TS_MS).contains(&t.timestamp_millis()) => Ok(t.timestamp_millis()),
            Ok(_) => Err(bad(format!("`{s}` is before 1970"))),
            Err(e) => Err(bad(format!("`{s}` is not RFC 3339: {e}"))),
        },
        other => Err(bad(format!(
            "{other} is neither RFC 3339 text nor epoch milliseconds"
        ))),
    }
}
