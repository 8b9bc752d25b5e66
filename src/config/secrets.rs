//! Secrets in the configuration: which settings hold one, values read from a file or an
//! environment variable (`{ file = "PATH" }`, `{ env = "VAR" }`), where each came from
//! (`check-config` prints it), and configuration errors that never show one: no message
//! quotes a configuration line, and a secret-looking setting's value is masked wherever a
//! message would name a value (docs/operations.md, "Credentials").

use serde_json::Value;

/// What replaces a hidden value in a message.
pub const MASK: &str = "***";

/// Where a setting holding a secret got its value (`check-config` prints it, never the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretSource {
    /// `kafka.properties.sasl.password`, `admin.debug_token`.
    pub setting: String,
    /// `file /run/secrets/x`, `env KAFKA_PASSWORD`, `config file FILE`,
    /// `env LOOPGUARD__KAFKA__PROPERTIES__SASL_PASSWORD`.
    pub source: String,
}

/// True for a setting whose value is a credential: a name holding `password`, `secret`,
/// `token`, `credential` or `jaas`, or the word `key` (`ssl.key.password`, `ssl.key.pem`,
/// `sasl.oauthbearer.client.secret`, `admin.debug_token`), and `sasl.oauthbearer.config`.
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    const ANYWHERE: [&str; 6] = [
        "password",
        "passwd",
        "secret",
        "token",
        "credential",
        "jaas",
    ];
    ANYWHERE.iter().any(|w| k.contains(w))
        || k.ends_with("oauthbearer.config")
        || k.split(['.', '_', '-'])
            .any(|w| matches!(w, "key" | "apikey" | "private"))
}

/// `message` with the text of every quoted fragment (`` `...` `` or `"..."`) replaced by
/// `***`: what serde and the env reader quote is the value.
pub fn mask_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find(['`', '"']) {
        let q = rest.as_bytes()[i] as char;
        out.push_str(&rest[..=i]);
        let after = &rest[i + 1..];
        match after.find(q) {
            Some(j) => {
                out.push_str(MASK);
                out.push(q);
                rest = &after[j + 1..];
            }
            None => {
                out.push_str(MASK);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// `message` with every occurrence of a known secret value replaced by `***` (values
/// shorter than 3 characters are left: masking them would garble every message).
pub fn redact(message: &str, secrets: &[String]) -> String {
    let mut secrets: Vec<&String> = secrets.iter().filter(|s| s.chars().count() >= 3).collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = message.to_string();
    for s in secrets {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), MASK);
        }
    }
    out
}

/// A TOML parse error without the source line the parser quotes: `line L, column C (key
/// K): MESSAGE`, its quoted fragments that repeat the file's values removed (all of them
/// when the line's key is secret-looking).
pub fn describe_toml_error(text: &str, e: &toml::de::Error) -> String {
    let mut at = String::new();
    let mut secret_line = false;
    if let Some(span) = e.span() {
        let start = span.start.min(text.len());
        let start = (0..=start)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        let before = &text[..start];
        let line = before.matches('\n').count() + 1;
        let column = before
            .rsplit_once('\n')
            .map_or(before, |(_, l)| l)
            .chars()
            .count()
            + 1;
        at = format!("line {line}, column {column}");
        if let Some(key) = key_on_line(text, line) {
            secret_line = is_secret_key(&key);
            at.push_str(&format!(" (key {key})"));
        }
        at.push_str(": ");
    }
    format!("{at}{}", scrub_message(e.message(), text, secret_line))
}

/// A message from the `config` crate (or any parser) made safe to print: the source lines
/// it quotes dropped, its quoted fragments that repeat the file's values removed, known
/// secret values masked.
pub fn scrub_foreign(message: &str, text: &str, secrets: &[String]) -> String {
    let kept: Vec<&str> = message
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            let t = t
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start();
            !(t.starts_with('|') || t.is_empty())
        })
        .collect();
    redact(&scrub_message(&kept.join("\n"), text, false), secrets)
}

/// The parser's own words, on one line, with each quoted fragment that appears in a value
/// of the file (after a line's first `=`) replaced by `…`; every fragment when `all`.
fn scrub_message(message: &str, text: &str, all: bool) -> String {
    let values: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once('=').map(|(_, v)| v))
        .collect();
    let message = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let mut out = String::with_capacity(message.len());
    let mut rest = message.as_str();
    while let Some(i) = rest.find(['`', '"', '\'']) {
        let q = rest.as_bytes()[i] as char;
        out.push_str(&rest[..=i]);
        let after = &rest[i + 1..];
        let Some(j) = after.find(q) else {
            rest = after;
            continue;
        };
        let inner = &after[..j];
        let from_source = inner.chars().any(char::is_alphanumeric)
            && (all || values.iter().any(|v| v.contains(inner)));
        out.push_str(if from_source { "…" } else { inner });
        out.push(q);
        rest = &after[j + 1..];
    }
    out.push_str(rest);
    out
}

/// The key set on line `line` (1-based), with its table: `kafka.properties.sasl.password`;
/// `None` when the line sets no key or the key cannot be read without quoting the line.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let mut table = String::new();
    for (n, l) in text.lines().enumerate() {
        let t = l.trim();
        if n + 1 == line {
            let (key, _) = t.split_once('=')?;
            let key = plain_key(key)?;
            return Some(match table.is_empty() {
                true => key,
                false => format!("{table}.{key}"),
            });
        }
        if t.starts_with('[') {
            let inner = t.trim_start_matches('[');
            if let Some((name, _)) = inner.split_once(']') {
                table = plain_key(name).unwrap_or_default();
            }
        }
    }
    None
}

/// A TOML key (bare, quoted or dotted) as plain text, when it is one.
fn plain_key(key: &str) -> Option<String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ' ' | '"');
    let key = key.trim();
    (!key.is_empty() && key.chars().all(ok)).then(|| {
        key.split('.')
            .map(|p| p.trim().trim_matches('"'))
            .collect::<Vec<_>>()
            .join(".")
    })
}

/// Where the layers of a configuration set things, for `resolve`.
pub(super) struct Layers<'a> {
    /// The configuration file and its table (a policy file already wrapped in `policy`).
    pub file: Option<(&'a str, &'a toml::Table)>,
    /// Each setting's path as `LOOPGUARD__` variables set it, and the variable.
    pub env: &'a [(Vec<String>, String)],
    /// The process environment, for `{ env = "VAR" }`.
    pub lookup: &'a dyn Fn(&str) -> Option<String>,
}

/// The settings that may hold a secret or a `{ file }` / `{ env }` reference: every
/// `kafka.properties` value and `admin.debug_token`.
fn candidates(tree: &Value) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = tree
        .pointer("/kafka/properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .keys()
                .map(|k| vec!["kafka".into(), "properties".into(), k.clone()])
                .collect()
        })
        .unwrap_or_default();
    out.push(vec!["admin".into(), "debug_token".into()]);
    out
}

fn get_mut<'v>(tree: &'v mut Value, path: &[String]) -> Option<&'v mut Value> {
    path.iter()
        .try_fold(tree, |node, k| node.as_object_mut()?.get_mut(k))
}

/// What each reference setting is set from: `{ file = "PATH" }` or `{ env = "VAR" }`.
enum Reference {
    File(String),
    Env(String),
}

fn reference(v: &Value) -> Option<Result<Reference, String>> {
    let o = v.as_object()?;
    Some(match (o.len(), o.get("file"), o.get("env")) {
        (1, Some(Value::String(p)), None) if !p.is_empty() => Ok(Reference::File(p.clone())),
        (1, None, Some(Value::String(e))) if !e.is_empty() => Ok(Reference::Env(e.clone())),
        _ => Err(
            "must be text, or read from a file or an environment variable: { file = \"PATH\" } or { env = \"VAR\" } (one of them)"
                .into(),
        ),
    })
}

/// Reads every `{ file = "PATH" }` / `{ env = "VAR" }` value of `kafka.properties` and
/// `admin.debug_token` into the tree (a trailing newline trimmed). Returns where each
/// secret-looking setting came from, the secret values (to mask in messages), and the
/// problems: a file that cannot be read or a variable not set, each naming the setting and
/// the path or variable, never a value.
pub(super) fn resolve(
    tree: &mut Value,
    layers: &Layers<'_>,
) -> (Vec<SecretSource>, Vec<String>, Vec<String>) {
    let mut sources = Vec::new();
    let mut secrets = Vec::new();
    let mut problems = Vec::new();
    for path in candidates(tree) {
        let setting = path.join(".");
        let Some(node) = get_mut(tree, &path) else {
            continue;
        };
        let name = path.last().map_or("", String::as_str);
        let read = |value: Result<String, String>, source: String| {
            value.and_then(|v| {
                let v = v.trim_end_matches(['\n', '\r']).to_string();
                match v.is_empty() {
                    true => Err(format!("{setting}: {source} is empty")),
                    false => Ok((v, source)),
                }
            })
        };
        let got = match reference(node) {
            Some(Err(why)) => Err(format!("{setting}: {why}")),
            Some(Ok(Reference::File(p))) => read(
                std::fs::read_to_string(&p)
                    .map_err(|e| format!("{setting}: cannot read the file {p}: {e}")),
                format!("file {p}"),
            ),
            Some(Ok(Reference::Env(var))) => read(
                (layers.lookup)(&var)
                    .ok_or_else(|| format!("{setting}: the environment variable {var} is not set")),
                format!("env {var}"),
            ),
            None if !is_secret_key(name) => continue,
            None => {
                let text = match &*node {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    v => v.to_string(),
                };
                if text.is_empty() {
                    continue;
                }
                secrets.push(text);
                let source = if let Some((_, var)) = layers.env.iter().find(|(p, _)| *p == path) {
                    format!("env {var}")
                } else if let Some((file, _)) = layers.file.filter(|(_, t)| in_table(t, &path)) {
                    format!("config file {file}")
                } else {
                    "built-in default".into()
                };
                sources.push(SecretSource { setting, source });
                continue;
            }
        };
        let source = match got {
            Ok((value, source)) => {
                secrets.push(value.clone());
                *node = Value::String(value);
                source
            }
            Err(problem) => {
                // Read as empty meanwhile: the problem is the setting's only one.
                *node = Value::String(String::new());
                problems.push(problem);
                continue;
            }
        };
        sources.push(SecretSource { setting, source });
    }
    (sources, secrets, problems)
}

fn in_table(table: &toml::Table, path: &[String]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    parents
        .iter()
        .try_fold(table, |t, k| t.get(k)?.as_table())
        .is_some_and(|t| t.contains_key(last))
}

/// Every secret-looking value of the tree's `kafka.properties` and `admin` (to mask).
pub(super) fn secret_values(tree: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for path in candidates(tree) {
        let name = path.last().map_or("", String::as_str);
        let node = path.iter().try_fold(tree, |n, k| n.get(k));
        if let (true, Some(Value::String(s))) = (is_secret_key(name), node) {
            out.push(s.clone());
        }
    }
    out
}

/// Settings that turn off what TLS protects the credentials with: each a warning line
/// (`serve` and `edge` log them at start, `check-config` prints them).
pub fn insecure_settings(properties: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in properties {
        let v = v.trim().to_ascii_lowercase();
        if k == "ssl.endpoint.identification.algorithm" && (v == "none" || v.is_empty()) {
            out.push(format!(
                "kafka.properties.{k} = \"{v}\": the broker's host name is not checked against its certificate: any holder of a certificate from the same CA can pose as the broker and receive the credentials (remove it: the default is \"https\")"
            ));
        }
        if k == "enable.ssl.certificate.verification" && matches!(v.as_str(), "false" | "0") {
            out.push(format!(
                "kafka.properties.{k} = {v}: the broker's certificate is not verified at all: anyone on the path can pose as the broker and receive the credentials (remove it, and set ssl.ca.location to the broker's CA)"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_looking_keys() {
        for k in [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "sasl.oauthbearer.client.secret",
            "debug_token",
            "sasl.jaas.config",
            "ssl.key.pem",
            "sasl.oauthbearer.config",
            "LOOPGUARD__ADMIN__DEBUG_TOKEN",
        ] {
            assert!(is_secret_key(k), "{k}");
        }
        for k in [
            "sasl.username",
            "sasl.mechanism",
            "ssl.ca.location",
            "batch_max_events",
            "message.max.bytes",
            "ssl.keystore.location",
        ] {
            assert!(!is_secret_key(k), "{k}");
        }
    }

    #[test]
    fn quoted_values_are_masked() {
        assert_eq!(
            mask_quoted("invalid type: string \"hunter2\", expected u64"),
            "invalid type: string \"***\", expected u64"
        );
        assert_eq!(
            mask_quoted("invalid type: integer `42`, expected a string"),
            "invalid type: integer `***`, expected a string"
        );
        assert_eq!(redact("a hunter2 b", &["hunter2".into()]), "a *** b");
    }

    #[test]
    fn a_parse_error_names_line_column_and_key_and_quotes_no_value() {
        for text in [
            "[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\nx = 1\n",
            "[kafka.properties]\nsasl.password = hunter2-GREPME\n",
            "[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\" junk\n",
            "[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\"\n\"sasl.password\" = \"hunter2-GREPME\"\n",
            "[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\"\nbroken = [\n",
            "[kafka.properties]\n\"sasl.password\" = \"\\q hunter2-GREPME\"\n",
        ] {
            let e = toml::from_str::<toml::Table>(text).unwrap_err();
            let d = describe_toml_error(text, &e);
            assert!(!d.contains("GREPME"), "{d}\n{e}");
            assert!(d.starts_with("line "), "{d}");
        }
        let text = "[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\n";
        let e = toml::from_str::<toml::Table>(text).unwrap_err();
        let d = describe_toml_error(text, &e);
        assert!(
            d.starts_with("line 2, column ") && d.contains("(key kafka.properties.sasl.password)"),
            "{d}"
        );
    }

    #[test]
    fn snippets_of_foreign_messages_are_dropped() {
        let m = "TOML parse error at line 2, column 3\n  |\n2 | a = \"hunter2\"\n  |   ^\nbad";
        let s = scrub_foreign(m, "a = \"hunter2\"\n", &[]);
        assert_eq!(s, "TOML parse error at line 2, column 3; bad");
    }

    fn load(
        text: &str,
        env: &[(&str, &str)],
    ) -> Result<(super::super::Config, Vec<SecretSource>), String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loopguard.toml");
        std::fs::write(&path, text).unwrap();
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        super::super::load_explained(path.to_str(), env).map_err(|e| e.to_string())
    }

    #[test]
    fn secrets_are_read_from_a_file_or_a_variable_and_their_source_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("kafka-password");
        std::fs::write(&pw, "hunter2-file\n").unwrap();
        let pw = pw.to_str().unwrap();
        let text = format!(
            "[kafka.properties]\n\"sasl.username\" = \"beta\"\n\
             \"sasl.password\" = {{ file = \"{pw}\" }}\n\
             \"ssl.key.password\" = {{ env = \"LG_KEY_PW\" }}\n\
             \"ssl.ca.pem\" = {{ env = \"LG_CA\" }}\n\
             \"sasl.oauthbearer.client.secret\" = \"in-the-file\"\n\
             [admin]\ndebug_token = {{ env = \"LG_TOKEN\" }}\n"
        );
        let (c, sources) = load(
            &text,
            &[
                ("LG_KEY_PW", "key-pw"),
                ("LG_CA", "-----BEGIN CERTIFICATE-----"),
                ("LG_TOKEN", "tok-1234\n"),
                (
                    "LOOPGUARD__KAFKA__PROPERTIES__SASL_OAUTHBEARER_CLIENT_SECRET",
                    "from-env",
                ),
            ],
        )
        .unwrap();
        let props = c.kafka_properties();
        let prop = |k: &str| props.iter().find(|(p, _)| p == k).map(|(_, v)| v.as_str());
        assert_eq!(prop("sasl.password"), Some("hunter2-file"));
        assert_eq!(prop("ssl.key.password"), Some("key-pw"));
        assert_eq!(prop("sasl.oauthbearer.client.secret"), Some("from-env"));
        assert_eq!(c.admin.debug_token, "tok-1234");
        let told: Vec<String> = sources
            .iter()
            .map(|s| format!("{}: {}", s.setting, s.source))
            .collect();
        assert_eq!(
            told,
            [
                "kafka.properties.sasl.oauthbearer.client.secret: env LOOPGUARD__KAFKA__PROPERTIES__SASL_OAUTHBEARER_CLIENT_SECRET".to_string(),
                format!("kafka.properties.sasl.password: file {pw}"),
                "kafka.properties.ssl.ca.pem: env LG_CA".to_string(),
                "kafka.properties.ssl.key.password: env LG_KEY_PW".to_string(),
                "admin.debug_token: env LG_TOKEN".to_string(),
            ]
        );
        let (_, sources) =
            load("[kafka.properties]\n\"sasl.password\" = \"x-y-z\"\n", &[]).unwrap();
        assert!(sources[0].source.starts_with("config file "), "{sources:?}");
    }

    #[test]
    fn a_missing_secret_names_its_setting_and_where_it_was_looked_for() {
        let err = load(
            "[kafka.properties]\n\"sasl.password\" = { file = \"/nonexistent/pw\" }\n\
             \"ssl.key.password\" = { env = \"LG_NOT_SET\" }\n\
             \"sasl.username\" = { fiel = \"x\" }\n[admin]\ndebug_token = { env = \"LG_EMPTY\" }\n",
            &[("LG_EMPTY", "")],
        )
        .unwrap_err();
        assert_eq!(
            err,
            "invalid configuration:\n  \
             - kafka.properties.sasl.password: cannot read the file /nonexistent/pw: No such file or directory (os error 2)\n  \
             - kafka.properties.sasl.username: must be text, or read from a file or an environment variable: { file = \"PATH\" } or { env = \"VAR\" } (one of them)\n  \
             - kafka.properties.ssl.key.password: the environment variable LG_NOT_SET is not set\n  \
             - admin.debug_token: env LG_EMPTY is empty"
        );
    }

    #[test]
    fn no_configuration_error_shows_a_secret() {
        for (text, env) in [
            // The parse error on the password's line, and next to it.
            ("[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\n", vec![]),
            ("[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\" oops\n", vec![]),
            ("[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\"\nx = = 1\n", vec![]),
            ("[kafka.properties]\nx = = 1\n\"sasl.password\" = \"hunter2-GREPME\"\n", vec![]),
            // A wrong type: the secret's own value, and the value repeated elsewhere.
            ("[admin]\ndebug_token = 20240601\n[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\"\n", vec![]),
            ("[kafka]\ngroup_id = [\"hunter2-GREPME\"]\n[kafka.properties]\n\"sasl.password\" = \"hunter2-GREPME\"\n", vec![]),
            // Env problems beside a secret from the env.
            (
                "[kafka]\n",
                vec![
                    ("LOOPGUARD__KAFKA__PROPERTIES__SASL_PASSWORD", "hunter2-GREPME"),
                    ("LOOPGUARD__KAFKA__BATCH_MAX_EVENTS", "many"),
                    ("LOOPGUARD__ADMIN__DEBUG_TOKEN__X", "hunter2-GREPME"),
                ],
            ),
        ] {
            let err = load(text, &env).unwrap_err();
            assert!(!err.contains("GREPME") && !err.contains("20240601"), "{text}: {err}");
        }
    }

    #[test]
    fn a_wrong_env_value_of_a_secret_is_not_shown() {
        let mut tree = serde_json::json!({"admin": {"token_ttl": 5}});
        let p = super::super::env::apply_env(&mut tree, "LOOPGUARD__ADMIN__TOKEN_TTL", "hunter2");
        assert_eq!(
            p.as_deref(),
            Some("LOOPGUARD__ADMIN__TOKEN_TTL: the value (hidden) is not a number")
        );
    }

    #[test]
    fn turning_verification_off_is_named() {
        let p = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert_eq!(
            insecure_settings(&p("ssl.endpoint.identification.algorithm", "none")).len(),
            1
        );
        assert_eq!(
            insecure_settings(&p("enable.ssl.certificate.verification", "false")).len(),
            1
        );
        assert!(insecure_settings(&p("ssl.endpoint.identification.algorithm", "https")).is_empty());
    }
}
