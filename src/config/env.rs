//! `LOOPGUARD__SECTION__KEY` environment variables laid over the configuration tree, each
//! value typed like the setting it replaces.

use serde_json::Value;

/// Applies one `LOOPGUARD__SECTION__KEY` variable to the tree. The value takes the type of
/// the setting it replaces (a number for `batch_max_events`, text for `group_id` even when
/// it looks like a number, a list split on commas); a setting without a default is read as
/// a number or boolean when it is one. librdkafka property names hold dots, so
/// `LOOPGUARD__KAFKA__PROPERTIES__SASL_USERNAME` sets `sasl.username`, always as text.
/// Returns a problem when the value cannot have the setting's type.
pub(super) fn apply_env(tree: &mut Value, key: &str, value: &str) -> Option<String> {
    let path = env_path(key)?;
    if path.len() == 3 && path[0] == "kafka" && path[1] == "properties" {
        set_path(tree, &path, Value::String(value.to_string()));
        return None;
    }
    let current = path.iter().try_fold(&*tree, |node, k| node.get(k));
    // A secret-looking setting's value is never shown, even a wrong one.
    let wrong = |what: &str| match super::secrets::is_secret_key(key) {
        true => Some(format!("{key}: the value (hidden) is not {what}")),
        false => Some(format!("{key}: `{value}` is not {what}")),
    };
    let typed = match current {
        Some(Value::String(_)) => Value::String(value.to_string()),
        Some(Value::Bool(_)) => match value.trim().to_ascii_lowercase().as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return wrong("true or false"),
        },
        Some(Value::Number(_)) => match serde_json::from_str::<serde_json::Number>(value.trim()) {
            Ok(n) => Value::Number(n),
            Err(_) => return wrong("a number"),
        },
        Some(Value::Array(_)) if value.trim_start().starts_with('[') => {
            match serde_json::from_str(value) {
                Ok(v) => v,
                Err(_) => return wrong("a JSON list"),
            }
        }
        Some(Value::Array(_)) => Value::Array(
            value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
                .collect(),
        ),
        _ => match serde_json::from_str::<Value>(value.trim()) {
            Ok(v @ (Value::Number(_) | Value::Bool(_))) => v,
            _ => Value::String(value.to_string()),
        },
    };
    set_path(tree, &path, typed);
    None
}

/// The setting a `LOOPGUARD__SECTION__KEY` variable sets, as a path in the tree
/// (`["kafka", "properties", "sasl.password"]`); `None` for other variables.
pub(super) fn env_path(key: &str) -> Option<Vec<String>> {
    let rest = key.strip_prefix("LOOPGUARD__")?;
    let mut path: Vec<String> = rest.split("__").map(str::to_lowercase).collect();
    if path.len() == 3 && path[0] == "kafka" && path[1] == "properties" {
        path[2] = path[2].replace('_', ".");
    }
    Some(path)
}

fn set_path(tree: &mut Value, path: &[String], value: Value) {
    let mut node = tree;
    for k in &path[..path.len() - 1] {
        if !node.is_object() {
            *node = Value::Object(Default::default());
        }
        node = node
            .as_object_mut()
            .expect("made an object above")
            .entry(k.clone())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    if let (Some(map), Some(last)) = (node.as_object_mut(), path.last()) {
        map.insert(last.clone(), value);
    }
}
