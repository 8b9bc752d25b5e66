//! Decoding tests: reasons for malformed events, bounds, the wire form round trip.

use super::*;

#[test]
fn decodes_tool_call_with_rfc3339_time() {
    let e = Event::decode(br#"{"v":1,"event_id":"e1","session_id":"s","ts":"2026-01-01T00:00:01Z","type":"tool_call","turn_id":"t","call_id":"c","tool":"read","args":{"path":"a"}}"#).unwrap();
    assert_eq!(e.meta.ts_ms, 1_767_225_601_000);
    assert!(matches!(e.body, Body::ToolCall { .. }));
}

#[test]
fn missing_turn_id_is_a_clear_error() {
    let err = Event::decode(
        br#"{"v":1,"event_id":"e1","session_id":"s","ts":5,"type":"reasoning","text":"x"}"#,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "missing field `turn_id` for type `reasoning`"
    );
    assert_eq!(err.reason(), "missing_field");
}

#[test]
fn unknown_type_is_not_an_error() {
    let e = Event::decode(br#"{"v":1,"event_id":"e1","session_id":"s","ts":5,"type":"telemetry"}"#)
        .unwrap();
    assert_eq!(
        e.body,
        Body::Unknown {
            kind: "telemetry".into()
        }
    );
}

#[test]
fn wrong_version_and_bad_ts_are_rejected() {
    assert_eq!(
        Event::decode(br#"{"v":2,"event_id":"e","session_id":"s","ts":5,"type":"compaction"}"#)
            .unwrap_err()
            .reason(),
        "unsupported_version"
    );
    assert_eq!(
        Event::decode(
            br#"{"v":1,"event_id":"e","session_id":"s","ts":"yesterday","type":"compaction"}"#
        )
        .unwrap_err()
        .reason(),
        "invalid_field"
    );
    assert_eq!(
        Event::decode(b"not json").unwrap_err().reason(),
        "invalid_json"
    );
}

#[test]
fn wrong_types_are_named() {
    let e = Event::decode(
        br#"{"v":1,"event_id":"e","session_id":"s","ts":1,"type":"user_message","text":5}"#,
    );
    assert_eq!(e.unwrap_err().reason(), "wrong_type");
    let e =
        Event::decode(br#"{"v":1,"event_id":"e","session_id":"s","ts":true,"type":"compaction"}"#);
    assert_eq!(e.unwrap_err().reason(), "invalid_field");
}

#[test]
fn a_wrong_typed_field_is_named_once_without_a_position() {
    let text = |json: &str| Event::decode(json.as_bytes()).unwrap_err().to_string();
    assert_eq!(
        text(
            r#"{"v":1,"event_id":"e","session_id":"s","ts":1,"type":"tool_call","turn_id":"t","call_id":"c","tool":42}"#
        ),
        "field `tool`: invalid type: integer `42`, expected a string"
    );
    assert_eq!(
        text(
            r#"{"v":1,"event_id":"e","session_id":"s","ts":1,"type":"tool_result","call_id":"c","tool":"x","status":1}"#
        ),
        "field `status`: invalid type, expected a string"
    );
    assert_eq!(
        text(
            r#"{"v":1,"event_id":"e","session_id":"s","ts":1,"type":"tool_result","call_id":"c","tool":"x","status":"ok","evidence":{"effect":5}}"#
        ),
        "field `evidence.effect`: invalid type, expected a string"
    );
    assert_eq!(
        text("[1,2]"),
        "invalid type: array, expected an event (a JSON object)"
    );
    assert_eq!(
        text("5"),
        "invalid type: integer `5`, expected an event (a JSON object)"
    );
}

#[test]
fn names_and_evidence_are_bounded_and_errors_are_cut() {
    let long = "x".repeat(MAX_NAME_CHARS + 1);
    let call = format!(
        r#"{{"v":1,"event_id":"e","session_id":"s","ts":1,"type":"tool_call","turn_id":"t","call_id":"c","tool":"{long}"}}"#
    );
    let e = Event::decode(call.as_bytes()).unwrap_err();
    assert_eq!(e.reason(), "invalid_field");
    assert!(e.to_string().contains("tool"), "{e}");
    let tenant = format!(
        r#"{{"v":1,"event_id":"e","session_id":"s","ts":1,"type":"compaction","tenant":"{long}"}}"#
    );
    assert_eq!(
        Event::decode(tenant.as_bytes()).unwrap_err().reason(),
        "invalid_field"
    );
    let hash = "h".repeat(MAX_EVIDENCE_CHARS + 1);
    let result = format!(
        r#"{{"v":1,"event_id":"e","session_id":"s","ts":1,"type":"tool_result","call_id":"c","tool":"t","status":"ok","evidence":{{"output_hash":"{hash}"}}}}"#
    );
    assert_eq!(
        Event::decode(result.as_bytes()).unwrap_err().reason(),
        "invalid_field"
    );
    let trace = "é".repeat(MAX_ERROR_CHARS * 2);
    let failed = format!(
        r#"{{"v":1,"event_id":"e","session_id":"s","ts":1,"type":"tool_result","call_id":"c","tool":"t","status":"error","error":"{trace}"}}"#
    );
    let Body::ToolResult {
        error: Some(error), ..
    } = Event::decode(failed.as_bytes()).unwrap().body
    else {
        panic!("a tool result with an error")
    };
    assert_eq!(error.chars().count(), MAX_ERROR_CHARS);
}

#[test]
fn wire_form_round_trips() {
    let e = Event::decode(br#"{"v":1,"event_id":"e1","session_id":"s","ts":7,"type":"tool_result","call_id":"c","tool":"t","status":"error","error":"boom","evidence":{"effect":"read","new_info":false}}"#).unwrap();
    let back = Event::decode(serde_json::to_vec(&e.to_wire()).unwrap().as_slice()).unwrap();
    assert_eq!(e, back);
}

#[test]
fn usage_is_kept_on_the_event_and_round_trips() {
    let e = Event::decode(br#"{"v":1,"event_id":"e1","session_id":"s","ts":5,"type":"turn_end","turn_id":"t","usage":{"input_tokens":1200,"output_tokens":30,"cost":0.25,"cached":1}}"#).unwrap();
    let usage = Usage {
        input_tokens: Some(1200),
        output_tokens: Some(30),
        cost: Some(0.25),
    };
    assert_eq!(
        e.body,
        Body::TurnEnd {
            turn_id: "t".into(),
            usage: Some(usage)
        }
    );
    assert_eq!(
        Event::decode(e.to_wire().to_string().as_bytes()).unwrap(),
        e
    );
    let a = Event::decode(br#"{"v":1,"event_id":"e2","session_id":"s","ts":5,"type":"assistant_message","turn_id":"t","text":"ok","usage":{"output_tokens":7}}"#).unwrap();
    let Body::AssistantMessage { usage, .. } = &a.body else {
        panic!("{a:?}")
    };
    assert_eq!(usage.and_then(|u| u.output_tokens), Some(7));
    assert_eq!(
        Event::decode(a.to_wire().to_string().as_bytes()).unwrap(),
        a
    );
}

#[test]
fn usage_out_of_range_names_the_field() {
    let err = Event::decode(br#"{"v":1,"event_id":"e1","session_id":"s","ts":5,"type":"turn_end","turn_id":"t","usage":{"input_tokens":-3}}"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid field `usage.input_tokens`: -3 not in 0..=100000000"
    );
    let err = Event::decode(br#"{"v":1,"event_id":"e1","session_id":"s","ts":5,"type":"turn_end","turn_id":"t","usage":{"cost":"1"}}"#).unwrap_err();
    assert_eq!(err.reason(), "wrong_type");
    assert_eq!(
        err.to_string(),
        "field `usage.cost`: invalid type: string \"1\", expected a number"
    );
}
