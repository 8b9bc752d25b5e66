//! The contract's limits are written four times: the guard's decoder (Rust), the JSON
//! Schemas in docs/schema, and the Python and TypeScript clients' checks. They must agree,
//! or a client sends what the guard dead-letters (or refuses what it would judge).

use loopguard::engine::event as rust;
use serde_json::Value;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `NAME = 1_000` (Python) or `export const NAME = 1_000;` (TypeScript).
fn constant(source: &str, file: &str, name: &str) -> f64 {
    source
        .lines()
        .find_map(|l| {
            let l = l.trim().trim_start_matches("export const ");
            let rest = l.strip_prefix(name)?.trim_start().strip_prefix('=')?;
            let value = rest.split(['#', ';']).next()?.trim().replace('_', "");
            value.parse().ok()
        })
        .unwrap_or_else(|| panic!("{file}: no constant {name}"))
}

fn schema_number(schema: &Value, pointer: &str) -> f64 {
    schema
        .pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("docs/schema/event.schema.json: nothing at {pointer}"))
}

#[test]
fn the_four_copies_of_the_contract_limits_agree() {
    let schema: Value = serde_json::from_str(&read("docs/schema/event.schema.json")).unwrap();
    let python = read("clients/python/src/loopguard/validate.py");
    let typescript = read("clients/typescript/src/validate.ts");
    // (Rust value, client constant, schema pointers holding the same bound)
    let limits: [(f64, &str, &[&str]); 10] = [
        (
            rust::MAX_VERDICT_ID_CHARS as f64,
            "MAX_VERDICT_ID",
            &["/properties/verdict_id/maxLength"],
        ),
        (rust::MAX_NOTE_CHARS as f64, "MAX_NOTE_CHARS", &[]),
        (
            rust::MAX_EVENT_ID_CHARS as f64,
            "MAX_EVENT_ID",
            &["/properties/event_id/maxLength"],
        ),
        (
            rust::MAX_SESSION_ID_CHARS as f64,
            "MAX_SESSION_ID",
            &["/properties/session_id/maxLength"],
        ),
        (
            rust::MAX_NAME_CHARS as f64,
            "MAX_NAME",
            &[
                "/properties/turn_id/maxLength",
                "/properties/tenant/maxLength",
                "/properties/agent/maxLength",
                "/properties/model/maxLength",
                "/properties/call_id/maxLength",
                "/properties/tool/maxLength",
            ],
        ),
        (
            rust::MAX_EVIDENCE_CHARS as f64,
            "MAX_EVIDENCE_STRING",
            &[
                "/$defs/evidence/properties/resource/maxLength",
                "/$defs/evidence/properties/state_before/maxLength",
                "/$defs/evidence/properties/state_after/maxLength",
                "/$defs/evidence/properties/output_hash/maxLength",
            ],
        ),
        (rust::MAX_ERROR_CHARS as f64, "MAX_ERROR_CHARS", &[]),
        (
            rust::MAX_ANNOUNCED_ROUNDS as f64,
            "MAX_TOOL_ROUNDS",
            &["/properties/limits/properties/max_tool_rounds/maximum"],
        ),
        (
            rust::MAX_USAGE_TOKENS as f64,
            "MAX_USAGE_TOKENS",
            &[
                "/$defs/usage/properties/input_tokens/maximum",
                "/$defs/usage/properties/output_tokens/maximum",
            ],
        ),
        (
            rust::MAX_USAGE_COST,
            "MAX_USAGE_COST",
            &["/$defs/usage/properties/cost/maximum"],
        ),
    ];
    for (value, name, pointers) in limits {
        assert_eq!(
            constant(&python, "validate.py", name),
            value,
            "Python {name}"
        );
        assert_eq!(
            constant(&typescript, "validate.ts", name),
            value,
            "TypeScript {name}"
        );
        for p in pointers {
            assert_eq!(schema_number(&schema, p), value, "schema {p} ({name})");
        }
    }
    // The largest event a client lets through: what a Kafka record holds by default.
    let record = loopguard::config::PRODUCER_DEFAULT_MAX_BYTES as f64;
    assert_eq!(constant(&python, "validate.py", "MAX_EVENT_BYTES"), record);
    assert_eq!(
        constant(&typescript, "validate.ts", "MAX_EVENT_BYTES"),
        record
    );
}

/// The reader of the clients' constants: a missing one is named, not read as zero.
#[test]
#[should_panic(expected = "no constant MAX_NOTHING")]
fn a_missing_constant_is_named() {
    constant("MAX_NAME = 256\n", "validate.py", "MAX_NOTHING");
}
