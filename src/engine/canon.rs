//! Canonical tool-call signatures: key order and JSON whitespace never matter; volatile keys
//! can be dropped; identity keys fingerprinted; 3-gram sets for fuzzy matching. Pure.

use serde_json::Value;
use xxhash_rust::xxh3::xxh3_64;

/// Stable 64-bit hash (xxh3), identical across runs and machines.
pub fn hash64(bytes: &[u8]) -> u64 {
    xxh3_64(bytes)
}

/// Writes `v` as compact JSON with object keys sorted, skipping keys for which `drop` is true.
/// (serde_json's `Map` is a `BTreeMap` here, so it iterates in key order; the test
/// `key_order_and_whitespace_do_not_matter` fails if a `preserve_order` feature sneaks in.)
pub fn write_canonical(v: &Value, drop: &dyn Fn(&str) -> bool, out: &mut String) {
    match v {
        Value::Object(map) => {
            out.push('{');
            let mut first = true;
            for (k, v) in map.iter().filter(|(k, _)| !drop(k)) {
                if !first {
                    out.push(',');
                }
                first = false;
                write_string(k, out);
                out.push(':');
                write_canonical(v, drop, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, drop, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, out),
        Value::Number(n) => {
            use std::fmt::Write;
            let _ = write!(out, "{n}");
        }
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Null => out.push_str("null"),
    }
}

/// A JSON string literal, escaped exactly as serde_json escapes it (`"`, `\\`, the five
/// short control escapes, other control chars as lower-case `\u00xx`), without allocating.
fn write_string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    // Runs of bytes that need no escape are copied whole.
    while let Some(i) = next_escape(bytes, start) {
        out.push_str(&s[start..i]);
        let b = bytes[i];
        match ESCAPE[b as usize] {
            b'u' => {
                out.push_str("\\u00");
                out.push(HEX[(b >> 4) as usize] as char);
                out.push(HEX[(b & 0xf) as usize] as char);
            }
            short => {
                out.push('\\');
                out.push(short as char);
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// The first byte at or after `from` that needs an escape: eight bytes at a time while
/// none of them does (a control char, `"` or `\\`), then byte by byte.
#[inline]
fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Some byte of `v` is below `n` (n <= 0x80): exact for "any", as used here.
    let below = |v: u64, n: u8| v.wrapping_sub(ONES * u64::from(n)) & !v & HIGH;
    let mut i = from;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let v = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        if below(v, 0x20) | below(v ^ (ONES * 0x22), 1) | below(v ^ (ONES * 0x5c), 1) != 0 {
            break;
        }
        i += 8;
    }
    bytes
        .get(i..)?
        .iter()
        .position(|&b| ESCAPE[b as usize] != 0)
        .map(|k| i + k)
}

/// How serde_json escapes a byte: 0 = not at all, `u` = `\u00xx`, else `\` + this byte.
const ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = b'u';
        b += 1;
    }
    t[0x08] = b'b';
    t[0x09] = b't';
    t[0x0a] = b'n';
    t[0x0c] = b'f';
    t[0x0d] = b'r';
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t
};

/// Canonical args text.
pub fn canonical(args: &Value) -> String {
    let mut s = String::with_capacity(256);
    write_canonical(args, &|_| false, &mut s);
    s
}

/// Canonical args text, and the byte range in it of each top-level value, in key order
/// (for args that are not an object: the whole text, one range). The text is `canonical`'s.
pub fn canonical_with_values(args: &Value) -> (String, Vec<std::ops::Range<usize>>) {
    let mut s = String::with_capacity(256);
    let mut values = Vec::new();
    match args {
        Value::Object(map) => {
            s.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                write_string(k, &mut s);
                s.push(':');
                let start = s.len();
                write_canonical(v, &|_| false, &mut s);
                values.push(start..s.len());
            }
            s.push('}');
        }
        other => {
            write_canonical(other, &|_| false, &mut s);
            values.push(0..s.len());
        }
    }
    (s, values)
}

/// True when one of `keys` is a key of an object anywhere in `v`.
pub fn has_any_key(v: &Value, keys: &[String]) -> bool {
    match v {
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| keys.iter().any(|x| x == k) || has_any_key(v, keys)),
        Value::Array(items) => items.iter().any(|i| has_any_key(i, keys)),
        _ => false,
    }
}

/// Canonical args text with the listed keys removed at any depth.
pub fn canonical_without(args: &Value, keys: &[String]) -> String {
    let mut s = String::with_capacity(256);
    write_canonical(args, &|k| keys.iter().any(|x| x == k), &mut s);
    s
}

/// A fingerprint of the values under identity keys (any depth); 0 when there are none.
pub fn identity_fingerprint(args: &Value, keys: &[String]) -> u64 {
    let mut acc = String::new();
    collect_identity(args, keys, &mut String::new(), &mut acc);
    if acc.is_empty() {
        0
    } else {
        hash64(acc.as_bytes()) | 1
    }
}

/// Suffixes that make a key an identity key whatever its prefix (`order_id`, `userId`,
/// `config_path`, `targetUrl`): a name that ends in one names the thing worked on (ours).
const IDENTITY_SUFFIXES: [&str; 10] = [
    "_id", "_ids", "Id", "Ids", "_path", "Path", "_file", "_url", "Url", "_uri",
];

/// True when `key` is an identity key: listed, or ending in an identity suffix.
pub fn is_identity_key(key: &str, keys: &[String]) -> bool {
    keys.iter().any(|x| x == key)
        || IDENTITY_SUFFIXES
            .iter()
            .any(|s| key.len() > s.len() && key.ends_with(s))
}

/// `path` is the key path so far (`/a/0/b`); it is extended and restored in place.
fn collect_identity(v: &Value, keys: &[String], path: &mut String, acc: &mut String) {
    let len = path.len();
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                path.push('/');
                path.push_str(k);
                if is_identity_key(k, keys) {
                    acc.push_str(path);
                    acc.push('=');
                    write_canonical(v, &|_| false, acc);
                    acc.push('\n');
                } else {
                    collect_identity(v, keys, path, acc);
                }
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                use std::fmt::Write;
                let _ = write!(path, "/{i}");
                collect_identity(item, keys, path, acc);
                path.truncate(len);
            }
        }
        Value::String(s) => {
            for token in path_tokens(s) {
                acc.push_str(path);
                acc.push('~');
                acc.push_str(token);
                acc.push('\n');
            }
        }
        _ => {}
    }
}

/// Paths and URLs inside free text (a shell command, a query): tokens split on whitespace,
/// quotes and shell operators that hold a `/` and a letter or digit. Two commands that
/// name different paths are different work, however similar their text (ours).
/// `path_tokens_by_char` is the definition, char by char; the tests hold the two equal.
pub fn path_tokens(s: &str) -> impl Iterator<Item = &str> {
    PathTokens { s, at: 0 }
}

/// The scan behind `path_tokens`: a token can only be a path where it holds a `/`, so the
/// text is searched for `/` (memchr) and only the tokens around them are looked at, from
/// the `/` back and forth to the nearest separators.
struct PathTokens<'a> {
    s: &'a str,
    /// Where the next search starts: the start of the text or the separator (or end) that
    /// ended the last token looked at; no token starts before it.
    at: usize,
}

/// What an ASCII byte is to `path_tokens`.
const SEP: u8 = 1;
const ALNUM: u8 = 2;
const CLASS: [u8; 128] = {
    let mut t = [0u8; 128];
    let seps = b"\t\n\x0b\x0c\r &|;<>()\"'`=,";
    let mut i = 0;
    while i < seps.len() {
        t[seps[i] as usize] = SEP;
        i += 1;
    }
    let mut c = 0;
    while c < 128 {
        if (c as u8).is_ascii_alphanumeric() {
            t[c] = ALNUM;
        }
        c += 1;
    }
    t
};

/// A char's class: `SEP`, `ALNUM` or 0.
#[inline]
fn char_class(c: char) -> u8 {
    if c.is_ascii() {
        CLASS[c as usize]
    } else if c.is_whitespace() {
        SEP
    } else if c.is_alphanumeric() {
        ALNUM
    } else {
        0
    }
}

impl<'a> Iterator for PathTokens<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let (s, bytes) = (self.s, self.s.as_bytes());
        loop {
            let slash = self.at + s.get(self.at..)?.find('/')?;
            let mut seen = 0u8;
            // Back to the separator before the `/` (or to where the search started).
            let mut start = slash;
            while start > self.at {
                let b = bytes[start - 1];
                let (class, width) = if b < 0x80 {
                    (CLASS[b as usize], 1)
                } else {
                    let c = s[..start].chars().next_back().unwrap_or(' ');
                    (char_class(c), c.len_utf8())
                };
                if class == SEP {
                    break;
                }
                seen |= class;
                start -= width;
            }
            // On to the separator after it (or the end).
            let mut end = slash + 1;
            while end < bytes.len() {
                let b = bytes[end];
                let (class, width) = if b < 0x80 {
                    (CLASS[b as usize], 1)
                } else {
                    let c = s[end..].chars().next().unwrap_or(' ');
                    (char_class(c), c.len_utf8())
                };
                if class == SEP {
                    break;
                }
                seen |= class;
                end += width;
            }
            self.at = end;
            if seen & ALNUM != 0 {
                return Some(&s[start..end]);
            }
        }
    }
}

/// `path_tokens` by its definition: `split` on a char predicate, then a filter. Twice the
/// instructions on shell commands (most tokens are no path and were looked at again).
#[cfg(test)]
pub fn path_tokens_by_char(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '&' | '|' | ';' | '<' | '>' | '(' | ')' | '"' | '\'' | '`' | '=' | ','
            )
    })
    .filter(|t| t.contains('/') && t.chars().any(|c| c.is_alphanumeric()))
}

/// The set of character 3-grams of `s`, as sorted unique hashes.
pub fn trigrams(s: &str) -> Vec<u64> {
    let chars: Vec<char> = s.chars().collect();
    let mut grams: Vec<u64> = chars
        .windows(3)
        .map(|w| ((w[0] as u64) << 42) ^ ((w[1] as u64) << 21) ^ (w[2] as u64))
        .collect();
    grams.sort_unstable();
    grams.dedup();
    grams
}

/// Jaccard index of two sorted unique sets.
pub fn jaccard(a: &[u64], b: &[u64]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let (mut i, mut j, mut inter) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                inter += 1;
                i += 1;
                j += 1;
            }
        }
    }
    inter as f64 / (a.len() + b.len() - inter) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    proptest::proptest! {
        /// The byte scan finds the tokens the char-by-char definition does, in any text:
        /// ASCII separators, non-ASCII whitespace (U+0085, U+00A0, U+2028, U+3000, ...),
        /// non-ASCII letters and digits, other non-ASCII chars.
        #[test]
        fn path_tokens_by_bytes_are_the_definitions(
            s in "([a-z0-9/._~-]{0,6}[ \t\n\x0b\x0c\r&|;<>()\"'`=,\u{85}\u{a0}\u{1680}\u{2000}\u{200a}\u{2028}\u{202f}\u{205f}\u{3000}\u{1c}é/ß日٣\u{10348}→]{0,3}){0,12}"
        ) {
            let fast: Vec<&str> = path_tokens(&s).collect();
            let slow: Vec<&str> = path_tokens_by_char(&s).collect();
            proptest::prop_assert_eq!(fast, slow);
        }
    }

    /// Every string of the real traces (tool arguments, results, reasoning): the same tokens.
    #[test]
    fn path_tokens_by_bytes_are_the_definitions_on_real_traces() {
        let mut strings = 0;
        for v in crate::engine::real_traces::records() {
            let mut stack = vec![&v];
            while let Some(v) = stack.pop() {
                match v {
                    Value::String(s) => {
                        strings += 1;
                        let fast: Vec<&str> = path_tokens(s).collect();
                        assert_eq!(fast, path_tokens_by_char(s).collect::<Vec<_>>(), "{s}");
                    }
                    Value::Array(a) => stack.extend(a),
                    Value::Object(o) => stack.extend(o.values()),
                    _ => {}
                }
            }
        }
        assert!(strings > 10_000, "{strings}");
    }

    #[test]
    fn path_tokens_split_on_unicode_whitespace_and_keep_unicode_paths() {
        let s = "cat /tmp/a\u{a0}/tmp/b\u{3000}ls /é/日 = x/1,/y 'q/r' / // →/→ /٣";
        let got: Vec<&str> = path_tokens(s).collect();
        assert_eq!(got, ["/tmp/a", "/tmp/b", "/é/日", "x/1", "/y", "q/r", "/٣"]);
        assert_eq!(got, path_tokens_by_char(s).collect::<Vec<_>>());
        assert_eq!(path_tokens("").count(), 0);
        assert_eq!(path_tokens("a/b").collect::<Vec<_>>(), ["a/b"]);
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b": [1, 2], "a": {"y": 1, "x": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":1},"b":[1,2]}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
        assert_eq!(canonical(&a), r#"{"a":{"x":"s","y":1},"b":[1,2]}"#);
    }

    #[test]
    fn canonical_with_values_is_canonical_and_locates_each_value() {
        let cases = [
            json!({"b": [1, {"z": "q\"x"}], "a": {"y": 1}, "c": "é\n"}),
            json!({}),
            json!(["not", "an", "object"]),
            json!("text"),
        ];
        for args in cases {
            let (text, values) = canonical_with_values(&args);
            assert_eq!(text, canonical(&args));
            match &args {
                Value::Object(map) => {
                    assert_eq!(values.len(), map.len());
                    for ((_, v), at) in map.iter().zip(&values) {
                        assert_eq!(text[at.clone()], canonical(v));
                    }
                }
                _ => assert_eq!(
                    values,
                    vec![std::ops::Range {
                        start: 0,
                        end: text.len()
                    }]
                ),
            }
        }
    }

    #[test]
    fn any_key_is_found_at_any_depth() {
        let keys = ["ts".to_string()];
        assert!(has_any_key(&json!({"a": [{"ts": 1}]}), &keys));
        assert!(!has_any_key(&json!({"a": ["ts"], "b": {"t": 1}}), &keys));
    }

    proptest::proptest! {
        /// Any string, escapes at any offset of the eight-byte steps: serde_json's text.
        #[test]
        fn any_string_is_escaped_as_serde_json_escapes_it(
            s in "[a-z \u{0}-\u{1f}\"\\\u{7f}é日\u{10348}]{0,40}"
        ) {
            let mut out = String::new();
            write_string(&s, &mut out);
            proptest::prop_assert_eq!(out, serde_json::to_string(&s).unwrap());
        }
    }

    #[test]
    fn strings_are_escaped_exactly_as_serde_json_escapes_them() {
        let mut all: String = (0u8..0x80).map(char::from).collect();
        all.push_str("é漢🦀\u{2028}\u{7f}/");
        for s in [all.as_str(), "", "plain", "a\"b\\c", "\u{1}\u{1f}"] {
            let mut out = String::new();
            write_string(s, &mut out);
            assert_eq!(out, serde_json::to_string(s).unwrap());
        }
        let v = json!({"n": 1.5, "i": -3, "u": 18446744073709551615u64, "t": true, "f": false, "z": null});
        assert_eq!(canonical(&v), serde_json::to_string(&v).unwrap());
    }

    #[test]
    fn volatile_keys_drop_at_any_depth() {
        let keys = vec!["request_id".to_string()];
        let a = json!({"q": "x", "meta": {"request_id": "1"}});
        let b = json!({"q": "x", "meta": {"request_id": "2"}});
        assert_eq!(canonical_without(&a, &keys), canonical_without(&b, &keys));
    }

    #[test]
    fn identity_fingerprint_sees_paths() {
        let keys = vec!["path".to_string(), "offset".to_string()];
        let a = identity_fingerprint(&json!({"path": "a.rs", "offset": 0}), &keys);
        let b = identity_fingerprint(&json!({"path": "a.rs", "offset": 100}), &keys);
        assert_ne!(a, b);
        assert_eq!(identity_fingerprint(&json!({"cmd": "ls"}), &keys), 0);
    }

    #[test]
    fn paths_inside_commands_are_identity() {
        let keys = vec!["path".to_string()];
        let a = identity_fingerprint(&json!({"command": "ls -l /w/src"}), &keys);
        let b = identity_fingerprint(&json!({"command": "ls -l /w/src/libponyc"}), &keys);
        assert_ne!(a, b);
        let c = identity_fingerprint(
            &json!({"command": "cd /Users/x/P/** && git status -sb"}),
            &keys,
        );
        let d = identity_fingerprint(
            &json!({"command": "cd /Users/x/P/**&& git status -sb"}),
            &keys,
        );
        assert_eq!(c, d);
    }

    #[test]
    fn jaccard_of_near_strings() {
        let a = trigrams("cd /Users/x/Projects/** && git status -sb");
        let b = trigrams("cd /Users/x/Projects/**&& git status -sb");
        assert!(jaccard(&a, &b) > 0.8);
        assert!(jaccard(&a, &trigrams("something else entirely")) < 0.2);
    }
}
