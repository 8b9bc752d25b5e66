//! POSIX shell words: a command line split the way `sh` splits it into words (blanks
//! separate, `'…'` is literal, `"…"` keeps `\$ \` \" \\` escapes, `\` outside quotes escapes
//! the next char and drops an escaped newline, `#` at the start of a word comments out the
//! rest of its line). The word list is the one the `shlex` crate gives (the tests hold the
//! two equal); this one copies runs of plain bytes whole instead of pushing byte by byte.

use std::borrow::Cow;

/// The words of `text`; `None` for an unterminated quote or a trailing `\`. A word with
/// no quote or escape in it is borrowed from `text`.
pub fn split(text: &str) -> Option<Vec<Cow<'_, str>>> {
    let b = text.as_bytes();
    let mut words = Vec::new();
    let mut i = 0;
    loop {
        // Blanks and comments before the next word.
        loop {
            match b.get(i) {
                None => return Some(words),
                Some(b' ' | b'\t' | b'\n') => i += 1,
                Some(b'#') => match find(b, i, |c| c == b'\n') {
                    Some(nl) => i = nl + 1,
                    None => return Some(words),
                },
                Some(_) => break,
            }
        }
        // Most words are one run of plain bytes: borrowed, not copied.
        let run = find(b, i, |c| {
            matches!(c, b' ' | b'\t' | b'\n' | b'\'' | b'"' | b'\\')
        })
        .unwrap_or(b.len());
        if matches!(b.get(run), None | Some(b' ' | b'\t' | b'\n')) {
            words.push(Cow::Borrowed(&text[i..run]));
            i = run + 1;
            continue;
        }
        let mut word = String::new();
        loop {
            match b.get(i) {
                None => break,
                Some(b' ' | b'\t' | b'\n') => {
                    i += 1;
                    break;
                }
                Some(b'\'') => {
                    let close = find(b, i + 1, |c| c == b'\'')?;
                    word.push_str(&text[i + 1..close]);
                    i = close + 1;
                }
                Some(b'"') => i = double_quoted(text, i + 1, &mut word)?,
                Some(b'\\') => {
                    let c = text.get(i + 1..)?.chars().next()?;
                    if c != '\n' {
                        word.push(c);
                    }
                    i += 1 + c.len_utf8();
                }
                Some(_) => {
                    let end = find(b, i, |c| {
                        matches!(c, b' ' | b'\t' | b'\n' | b'\'' | b'"' | b'\\')
                    })
                    .unwrap_or(b.len());
                    word.push_str(&text[i..end]);
                    i = end;
                }
            }
        }
        words.push(Cow::Owned(word));
    }
}

/// The inside of `"…"` from `i` (after the opening quote) onto `word`; where it ended.
fn double_quoted(text: &str, mut i: usize, word: &mut String) -> Option<usize> {
    let b = text.as_bytes();
    loop {
        let at = find(b, i, |c| c == b'"' || c == b'\\')?;
        word.push_str(&text[i..at]);
        if b[at] == b'"' {
            return Some(at + 1);
        }
        let c = text.get(at + 1..)?.chars().next()?;
        match c {
            '$' | '`' | '"' | '\\' => word.push(c),
            '\n' => {}
            _ => {
                word.push('\\');
                word.push(c);
            }
        }
        i = at + 1 + c.len_utf8();
    }
}

/// The first position from `from` whose byte matches.
fn find(b: &[u8], from: usize, hit: impl Fn(u8) -> bool) -> Option<usize> {
    b.get(from..)?
        .iter()
        .position(|&c| hit(c))
        .map(|k| from + k)
}

#[cfg(test)]
mod tests {
    use super::split;
    use std::borrow::Cow;

    fn owned(words: Option<Vec<Cow<'_, str>>>) -> Option<Vec<String>> {
        words.map(|w| w.into_iter().map(Cow::into_owned).collect())
    }

    proptest::proptest! {
        /// The same words as the `shlex` crate, or the same refusal, in any text: quotes,
        /// escapes (of quotes, of newlines, of non-ASCII chars), comments, blanks.
        #[test]
        fn words_are_shlexs(s in "[a-z#=/ \\t\\n'\"\\\\$`;é日]{0,40}") {
            proptest::prop_assert_eq!(owned(split(&s)), shlex::split(&s));
        }
    }

    /// Every command of the real traces (heredoc scripts included): the same words.
    #[test]
    fn words_are_shlexs_on_real_traces() {
        for c in crate::engine::real_traces::commands() {
            assert_eq!(owned(split(&c)), shlex::split(&c), "{c}");
        }
    }

    #[test]
    fn quotes_escapes_and_comments() {
        let w = |s: &str| split(s).map(|v| v.join("|"));
        assert_eq!(
            w("a 'b c' \"d \\\"e\\\" \\x\" f\\ g # h\ni"),
            Some("a|b c|d \"e\" \\x|f g|i".into())
        );
        assert_eq!(w("x#y"), Some("x#y".into()));
        assert_eq!(w("a\\\nb"), Some("ab".into()));
        assert_eq!(w("'open"), None);
        assert_eq!(w("trailing\\"), None);
        assert_eq!(w("  "), Some(String::new()));
    }
}
