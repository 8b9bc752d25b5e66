//! What the golden and schema tests share: the fixture cases of `tests/fixtures` and the
//! contract's JSON Schemas in `docs/schema`.
// Two test binaries (golden, schemas) each use a part of it.
#![allow(dead_code)]

use jsonschema::Validator;
use serde_json::Value;
use std::path::PathBuf;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The fixture cases, sorted by name: (name, events file, expected verdicts file).
pub fn cases() -> Vec<(String, PathBuf, PathBuf)> {
    let dir = root().join("tests/fixtures");
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let name = path
                .file_name()?
                .to_str()?
                .strip_suffix(".events.jsonl")?
                .to_string();
            let expected = dir.join(format!("{name}.verdicts.jsonl"));
            Some((name, path, expected))
        })
        .collect();
    out.sort();
    out
}

pub fn validator(name: &str) -> Validator {
    let path = root().join("docs/schema").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        jsonschema::draft202012::meta::is_valid(&schema),
        "{name} is not a valid draft 2020-12 schema"
    );
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every error of `instance` against `v`, one per line (empty when valid).
pub fn errors(v: &Validator, instance: &Value) -> String {
    v.iter_errors(instance)
        .map(|e| format!("    at `{}`: {e}\n", e.instance_path))
        .collect()
}
