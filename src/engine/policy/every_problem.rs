//! Reading a JSON tree into a typed value with every problem reported, not only the first:
//! on an error the offending key is noted and put back to its default (taken out, where the
//! type has its own defaults), and the tree is read again, until it reads. A policy or configuration file with five mistakes is then
//! fixed in one pass, not five.

use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_path_to_error::Segment;

/// One problem: where (serde's path: `.` for the top, `tool.window`, `rules[0].rule`) and
/// what serde said.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

/// The most keys taken out before giving up (a file is not that wrong twice over).
const MAX_PROBLEMS: usize = 100;

/// The value read from `tree` with every bad key taken out, and every problem found; None
/// when what is left cannot be read either (a problem at the top, or a required key).
pub fn deserialize<T: DeserializeOwned>(tree: Value) -> (Option<T>, Vec<Problem>) {
    deserialize_over(tree, &Value::Null)
}

/// As `deserialize`, a bad key put back to its value in `defaults` where that has one
/// (a configuration section, whose keys are all required and all in the built-in defaults).
pub fn deserialize_over<T: DeserializeOwned>(
    mut tree: Value,
    defaults: &Value,
) -> (Option<T>, Vec<Problem>) {
    let mut problems = Vec::new();
    while problems.len() < MAX_PROBLEMS {
        let e = match serde_path_to_error::deserialize::<_, T>(tree.clone()) {
            Ok(t) => return (Some(t), problems),
            Err(e) => e,
        };
        let message = e.inner().to_string();
        let mut at: Vec<Segment> = e.path().iter().cloned().collect();
        problems.push(Problem {
            path: e.path().to_string(),
            message: message.clone(),
        });
        if let Some(field) = unknown_field(&message) {
            if !matches!(at.last(), Some(Segment::Map { key }) if *key == field) {
                at.push(Segment::Map { key: field });
            }
        }
        if at.is_empty() {
            break; // the top of the tree: nothing to take out
        }
        let fixed = match get(defaults, &at) {
            Some(default) => put(&mut tree, &at, default.clone()),
            None => take_out(&mut tree, &at),
        };
        if !fixed {
            break;
        }
    }
    (None, problems)
}

/// serde's "unknown field `x`, expected ..." names the key; its path is the table's.
fn unknown_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

fn get<'a>(tree: &'a Value, at: &[Segment]) -> Option<&'a Value> {
    at.iter().try_fold(tree, |node, seg| match (seg, node) {
        (Segment::Map { key }, Value::Object(o)) => o.get(key),
        (Segment::Seq { index }, Value::Array(a)) => a.get(*index),
        _ => None,
    })
}

fn get_mut<'a>(tree: &'a mut Value, at: &[Segment]) -> Option<&'a mut Value> {
    at.iter().try_fold(tree, |node, seg| match (seg, node) {
        (Segment::Map { key }, Value::Object(o)) => o.get_mut(key),
        (Segment::Seq { index }, Value::Array(a)) => a.get_mut(*index),
        _ => None,
    })
}

/// Sets the value at `at`; false when it is there already (no progress) or not there.
fn put(tree: &mut Value, at: &[Segment], value: Value) -> bool {
    match get_mut(tree, at) {
        Some(node) if *node != value => {
            *node = value;
            true
        }
        _ => false,
    }
}

/// Removes the key at `at` (a table's key), or empties the list item there; false when
/// nothing could be taken out (the top of the tree, or a path that is not there).
fn take_out(tree: &mut Value, at: &[Segment]) -> bool {
    let Some((last, parents)) = at.split_last() else {
        return false;
    };
    match (last, get_mut(tree, parents)) {
        (Segment::Map { key }, Some(Value::Object(o))) => o.remove(key).is_some(),
        // Emptied, not removed, so the later items keep the index their problems name.
        (Segment::Seq { index }, Some(Value::Array(a))) => match a.get_mut(*index) {
            Some(v) if *v != Value::Object(Default::default()) => {
                *v = Value::Object(Default::default());
                true
            }
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Inner {
        window: usize,
        name: String,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Outer {
        tool: Inner,
        items: Vec<Inner>,
        ratio: f64,
    }

    #[test]
    fn every_bad_key_is_reported_and_the_rest_is_read() {
        let tree = json!({
            "tool": {"window": "six", "bogus": 1, "name": "a"},
            "items": [{"window": 1}, {"window": -1}, {"nope": 2}],
            "ratio": "high",
            "extra": true
        });
        let (value, problems) = deserialize::<Outer>(tree);
        let mut paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        paths.sort_unstable();
        assert_eq!(
            paths,
            [
                "extra",
                "items[1].window",
                "items[2].nope",
                "ratio",
                "tool.bogus",
                "tool.window"
            ],
            "{problems:?}"
        );
        let unknown = |key: &str| {
            problems
                .iter()
                .any(|p| p.message.starts_with(&format!("unknown field `{key}`")))
        };
        assert!(unknown("bogus") && unknown("nope") && unknown("extra"));
        let value = value.expect("the rest reads");
        assert_eq!(
            value.tool,
            Inner {
                window: 0,
                name: "a".into()
            }
        );
        assert_eq!(value.items.len(), 3);
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Required {
        port: u16,
        host: String,
    }

    #[test]
    fn a_required_key_goes_back_to_its_default() {
        let defaults = json!({"port": 9464, "host": "127.0.0.1"});
        let tree = json!({"port": "high", "host": 5});
        let (value, problems) = deserialize_over::<Required>(tree, &defaults);
        assert_eq!(problems.len(), 2, "{problems:?}");
        let value = value.unwrap();
        assert_eq!((value.port, value.host.as_str()), (9464, "127.0.0.1"));
    }

    #[test]
    fn a_tree_that_is_not_a_table_is_one_problem() {
        let (value, problems) = deserialize::<Outer>(json!(7));
        assert!(value.is_none());
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].path, ".");
    }
}
