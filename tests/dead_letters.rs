//! What the service does with a consumed record, without a broker: the reason each kind of
//! malformed record is dead-lettered under (one test per documented reason), and a property
//! over arbitrary bytes, keys and headers: no panic, and every record is either an event or
//! a dead letter that fits the limit, with every part bounded.

use loopguard::engine::event::DecodeError;
use loopguard::service::records::dead_letter::{
    read_event, DeadLetter, Rejected, Source, MAX_ERROR_BYTES, MAX_KEY_BYTES, MIN_LIMIT,
};
use proptest::prelude::*;

const OK: &str = r#""v":1,"event_id":"e1","session_id":"s","ts":5"#;

fn reason(key: Option<&str>, payload: Option<&str>) -> &'static str {
    read_event(key.map(str::as_bytes), payload.map(str::as_bytes))
        .map(|e| panic!("judged: {e:?}"))
        .unwrap_err()
        .reason
}

fn event(fields: &str) -> String {
    format!("{{{OK},{fields}}}")
}

#[test]
fn invalid_json() {
    assert_eq!(reason(Some("s"), Some("{not json")), "invalid_json");
    assert_eq!(reason(Some("s"), Some("\u{0}\u{1}")), "invalid_json");
    assert_eq!(
        read_event(Some(b"s"), Some(b"\xff\xfe"))
            .unwrap_err()
            .reason,
        "invalid_json"
    );
}

#[test]
fn wrong_type() {
    // Numbers where a string enum belongs: serde calls these syntax errors.
    let status = event(r#""type":"tool_result","call_id":"c","tool":"t","status":1"#);
    assert_eq!(reason(Some("s"), Some(&status)), "wrong_type");
    let effect = event(
        r#""type":"tool_result","call_id":"c","tool":"t","status":"ok","evidence":{"effect":5}"#,
    );
    assert_eq!(reason(Some("s"), Some(&effect)), "wrong_type");
    let text = event(r#""type":"user_message","text":5"#);
    assert_eq!(reason(Some("s"), Some(&text)), "wrong_type");
    let v = r#"{"v":"1","event_id":"e1","session_id":"s","ts":5,"type":"compaction"}"#;
    assert_eq!(reason(Some("s"), Some(v)), "wrong_type");
    assert_eq!(reason(Some("s"), Some("[1,2]")), "wrong_type");
}

#[test]
fn a_wrong_typed_field_is_named_in_the_dead_letter() {
    let call = event(r#""type":"tool_call","turn_id":"t","call_id":"c","tool":42,"args":{}"#);
    let r = read_event(Some(b"s"), Some(call.as_bytes())).unwrap_err();
    assert_eq!(
        r,
        Rejected {
            reason: "wrong_type",
            detail: "field `tool`: invalid type: integer `42`, expected a string".into(),
        }
    );
}

#[test]
fn unsupported_version() {
    let v2 = r#"{"v":2,"event_id":"e1","session_id":"s","ts":5,"type":"compaction"}"#;
    assert_eq!(reason(Some("s"), Some(v2)), "unsupported_version");
}

#[test]
fn missing_field() {
    assert_eq!(
        reason(
            Some("s"),
            Some(&event(r#""type":"tool_call","turn_id":"t""#))
        ),
        "missing_field"
    );
}

#[test]
fn invalid_field() {
    let ts = r#"{"v":1,"event_id":"e1","session_id":"s","ts":"yesterday","type":"compaction"}"#;
    assert_eq!(reason(Some("s"), Some(ts)), "invalid_field");
}

/// `usage` on `turn_end` and `assistant_message`: a wrong JSON type is `wrong_type`, a
/// negative or absurd value `invalid_field`, each naming the field.
#[test]
fn usage_refusals_name_the_field() {
    let refused = |usage: &str| {
        let mut out = Vec::new();
        for kind in [
            r#""type":"turn_end","turn_id":"t""#,
            r#""type":"assistant_message","turn_id":"t","text":"done""#,
        ] {
            let e = event(&format!(r#"{kind},"usage":{usage}"#));
            out.push(read_event(Some(b"s"), Some(e.as_bytes())).unwrap_err());
        }
        assert_eq!(out[0], out[1], "{usage}");
        out.remove(0)
    };
    for (usage, reason, field) in [
        (r#""lots""#, "wrong_type", "`usage`"),
        (r#"[1,2]"#, "wrong_type", "`usage`"),
        (
            r#"{"input_tokens":"12"}"#,
            "wrong_type",
            "`usage.input_tokens`",
        ),
        (
            r#"{"output_tokens":1.5}"#,
            "wrong_type",
            "`usage.output_tokens`",
        ),
        (r#"{"cost":"0.10"}"#, "wrong_type", "`usage.cost`"),
        (r#"{"cost":true}"#, "wrong_type", "`usage.cost`"),
        (
            r#"{"input_tokens":-1}"#,
            "invalid_field",
            "`usage.input_tokens`",
        ),
        (
            r#"{"output_tokens":100000001}"#,
            "invalid_field",
            "`usage.output_tokens`",
        ),
        (
            r#"{"input_tokens":1e20}"#,
            "invalid_field",
            "`usage.input_tokens`",
        ),
        (
            r#"{"input_tokens":99999999999999999999999}"#,
            "invalid_field",
            "`usage.input_tokens`",
        ),
        (r#"{"cost":-0.01}"#, "invalid_field", "`usage.cost`"),
        (r#"{"cost":1000000.5}"#, "invalid_field", "`usage.cost`"),
    ] {
        let r = refused(usage);
        assert_eq!(r.reason, reason, "{usage}: {}", r.detail);
        assert!(r.detail.contains(field), "{usage}: {}", r.detail);
    }
    // In range, partial, null parts or unknown keys: judged. On other types: ignored.
    for (kind, usage) in [
        (
            r#""type":"turn_end","turn_id":"t""#,
            r#"{"input_tokens":0,"output_tokens":100000000,"cost":1000000}"#,
        ),
        (
            r#""type":"turn_end","turn_id":"t""#,
            r#"{"cost":null,"cached_tokens":5}"#,
        ),
        (
            r#""type":"assistant_message","turn_id":"t","text":"ok""#,
            r#"{"output_tokens":3.0}"#,
        ),
        (r#""type":"compaction""#, r#""not checked here""#),
    ] {
        let e = event(&format!(r#"{kind},"usage":{usage}"#));
        assert!(read_event(Some(b"s"), Some(e.as_bytes())).is_ok(), "{e}");
    }
}

#[test]
fn key_mismatch() {
    let e = event(r#""type":"compaction""#);
    assert_eq!(reason(Some("other"), Some(&e)), "key_mismatch");
    assert_eq!(reason(Some(""), Some(&e)), "key_mismatch");
}

#[test]
fn missing_key() {
    let e = event(r#""type":"compaction""#);
    assert_eq!(reason(None, Some(&e)), "missing_key");
    // A keyless record is never judged, whatever its bytes.
    assert_eq!(reason(None, Some("{not json")), "missing_key");
}

#[test]
fn empty_payload() {
    assert_eq!(reason(Some("s"), None), "empty_payload");
}

#[test]
fn every_documented_reason_is_tested_here() {
    // The reasons above, in the order DecodeError::REASONS lists them.
    assert_eq!(
        DecodeError::REASONS,
        [
            "invalid_json",
            "wrong_type",
            "unsupported_version",
            "missing_field",
            "invalid_field",
            "key_mismatch",
            "missing_key",
            "empty_payload"
        ]
    );
    let contract = std::fs::read_to_string("docs/contract.md").unwrap();
    for r in DecodeError::REASONS {
        assert!(
            contract.contains(&format!("`{r}`")),
            "{r} not in docs/contract.md"
        );
    }
}

#[test]
fn error_texts_quote_a_few_hundred_bytes_at_most() {
    let v = format!(
        r#"{{"v":"{}","event_id":"e1","session_id":"s","ts":5,"type":"compaction"}}"#,
        "x".repeat(600_000)
    );
    let r = read_event(Some(b"s"), Some(v.as_bytes())).unwrap_err();
    assert_eq!(r.reason, "wrong_type");
    assert!(r.detail.len() < 400, "{}", r.detail.len());
    assert!(
        r.detail
            .starts_with("field `v`: invalid type: string \"xxx"),
        "{}",
        r.detail
    );
    let key = "k".repeat(400_000);
    let e = event(r#""type":"compaction""#);
    let r = read_event(Some(key.as_bytes()), Some(e.as_bytes())).unwrap_err();
    assert_eq!(r.reason, "key_mismatch");
    assert!(r.detail.len() < 400, "{}", r.detail.len());
}

fn check(
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
    headers: &[(String, Option<Vec<u8>>)],
    limit: usize,
) -> Result<(), TestCaseError> {
    let rejected = match read_event(key, payload) {
        Ok(event) => {
            // Judged only when keyed by its own session.
            prop_assert_eq!(key, Some(event.meta.session_id.as_bytes()));
            return Ok(());
        }
        Err(r) => r,
    };
    prop_assert!(
        DecodeError::REASONS.contains(&rejected.reason),
        "{}",
        rejected.reason
    );
    let source = Source {
        topic: "agent-events",
        partition: 7,
        offset: 1 << 40,
    };
    let headers: Vec<(&str, Option<&[u8]>)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_deref()))
        .collect();
    let d = DeadLetter::new(source, key, payload, &headers, &rejected, limit);
    prop_assert!(d.size() <= limit, "{} > {limit}", d.size());
    prop_assert!(d.key.map_or(0, <[u8]>::len) <= MAX_KEY_BYTES);
    for (name, value) in &d.headers {
        prop_assert!(name.len() <= 256 && value.len() <= 1024, "{name}");
        if name == "loopguard-error" {
            prop_assert!(value.len() <= MAX_ERROR_BYTES);
        }
    }
    let reason = d
        .headers
        .iter()
        .find(|(k, _)| k == "loopguard-error-reason")
        .map(|(_, v)| v.clone());
    prop_assert_eq!(reason, Some(rejected.reason.as_bytes().to_vec()));
    let minimal = DeadLetter::minimal_marked(source, &rejected);
    prop_assert!(minimal.size() <= MIN_LIMIT);
    Ok(())
}

/// Bytes that are often almost an event: JSON fragments and real field names.
fn payload() -> impl Strategy<Value = Option<Vec<u8>>> {
    let fragment = prop_oneof![
        Just(r#"{"v":1,"event_id":"e","session_id":"s","ts":5,"type":"tool_result","call_id":"c","tool":"t","status":"#.to_string()),
        Just(r#"{"v":1,"event_id":"e","session_id":"s","ts":5,"type":"compaction"}"#.to_string()),
        Just(r#""evidence":{"effect":"#.to_string()),
        "[a-z\"{}:,0-9 ]{0,40}",
        ".{0,20}",
    ];
    prop_oneof![
        1 => Just(None),
        4 => prop::collection::vec(fragment, 0..6).prop_map(|v| Some(v.concat().into_bytes())),
        4 => prop::collection::vec(any::<u8>(), 0..200).prop_map(Some),
        1 => (1usize..300_000, any::<u8>()).prop_map(|(n, b)| Some(vec![b; n])),
    ]
}

fn key() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        1 => Just(None),
        3 => Just(Some(b"s".to_vec())),
        2 => prop::collection::vec(any::<u8>(), 0..40).prop_map(Some),
        1 => (1usize..50_000).prop_map(|n| Some(vec![b'k'; n])),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(String, Option<Vec<u8>>)>> {
    let value = prop_oneof![
        Just(None),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(Some),
        (1usize..20_000).prop_map(|n| Some(vec![b'h'; n])),
    ];
    prop::collection::vec((".{0,300}", value), 0..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_record_is_an_event_or_a_dead_letter_that_fits(
        key in key(),
        payload in payload(),
        headers in headers(),
        limit in prop_oneof![Just(MIN_LIMIT), MIN_LIMIT..2_000_000, Just(1_000_000)],
    ) {
        check(key.as_deref(), payload.as_deref(), &headers, limit)?;
    }
}

#[test]
fn the_issues_poison_records_fit_the_default_limit() {
    let limit = 1_000_000;
    let v = format!(
        r#"{{"v":"{}","event_id":"e1","session_id":"s","ts":5,"type":"compaction"}}"#,
        "x".repeat(600_000)
    );
    let key = vec![b'k'; 400_000];
    let valid = format!(
        r#"{{"v":1,"event_id":"e1","session_id":"s","ts":5,"type":"user_message","text":"{}"}}"#,
        "y".repeat(450_000)
    );
    let exact = vec![b'{'; 1_048_500];
    for (key, payload) in [
        (&b"s"[..], v.as_bytes()),
        (&key[..], valid.as_bytes()),
        (&b"s"[..], &exact[..]),
    ] {
        let rejected: Rejected = read_event(Some(key), Some(payload)).unwrap_err();
        let source = Source {
            topic: "t",
            partition: 0,
            offset: 0,
        };
        let d = DeadLetter::new(source, Some(key), Some(payload), &[], &rejected, limit);
        assert!(d.size() <= limit);
        assert!(d.payload.is_some());
    }
}
