//! The command text a shell parses as commands: the lines of a command line with heredoc
//! bodies left out (their text is file content), found by searching for each body's
//! delimiter rather than line by line.

use std::borrow::Cow;

/// The command text without heredoc bodies: the lines a shell parses as commands. A body
/// is skipped by searching for its delimiter, not line by line (scripts written through a
/// heredoc are most of a coding agent's command bytes); `command_lines_by_line` is the
/// definition, checked against this in the tests.
pub(super) fn command_lines(text: &str) -> Cow<'_, str> {
    if !text.contains('\n') {
        return Cow::Borrowed(text); // one line, no heredoc body: the text itself
    }
    let mut out = String::with_capacity(text.len().min(4096));
    let mut rest = text;
    while !rest.is_empty() {
        let (line, after) = first_line(rest);
        if !out.is_empty() {
            out.push_str(" ; ");
        }
        out.push_str(line);
        rest = match heredoc_delimiter(line) {
            Some(end) => after_body(after, &end),
            None => after,
        };
    }
    Cow::Owned(out)
}

/// The first line of `text` as `str::lines` gives it (no `\n`, no `\r` before it), and
/// what follows it.
#[inline]
fn first_line(text: &str) -> (&str, &str) {
    match text.find('\n') {
        Some(i) => {
            let line = &text[..i];
            (line.strip_suffix('\r').unwrap_or(line), &text[i + 1..])
        }
        None => (text, ""),
    }
}

/// What follows the line of `text` that is `end` once trimmed (the body's last line);
/// nothing when no line is.
fn after_body<'a>(text: &'a str, end: &str) -> &'a str {
    after_body_looking(text, end).0
}

/// `after_body`, and how many lines it looked at (the tests hold it to one per line).
fn after_body_looking<'a>(text: &'a str, end: &str) -> (&'a str, usize) {
    let (mut from, mut looked) = (0, 0);
    while let Some(k) = find_short(&text[from..], end).map(|k| from + k) {
        let start = text[..k].rfind('\n').map_or(0, |i| i + 1);
        let (line, after) = first_line(&text[start..]);
        looked += 1;
        if line.trim() == end {
            return (after, looked);
        }
        // Not the last line: on to the next line (another hit in this one is this line
        // again, and looking at it once per hit made a long line quadratic).
        if after.is_empty() {
            return ("", looked);
        }
        from = text.len() - after.len();
    }
    ("", looked)
}

/// `hay.find(needle)` for a short needle (a heredoc delimiter): its first char found by
/// memchr and the rest compared, cheaper over a script body than a two-way search.
#[inline]
fn find_short(hay: &str, needle: &str) -> Option<usize> {
    let Some(first) = needle.chars().next() else {
        return Some(0);
    };
    let mut from = 0;
    loop {
        let i = from + hay[from..].find(first)?;
        if hay[i..].starts_with(needle) {
            return Some(i);
        }
        from = i + first.len_utf8();
    }
}

/// `command_lines` by its definition, line by line.
#[cfg(test)]
fn command_lines_by_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(4096));
    let mut until: Option<String> = None;
    for line in text.lines() {
        if let Some(end) = &until {
            if line.trim() == end {
                until = None;
            }
            continue;
        }
        if !out.is_empty() {
            out.push_str(" ; ");
        }
        out.push_str(line);
        until = heredoc_delimiter(line);
    }
    out
}

/// `cat > f << 'EOF'` -> `EOF`.
fn heredoc_delimiter(line: &str) -> Option<String> {
    // The first `<<`: a `<` found by memchr, then its neighbour (cheaper per line than a
    // substring search, which every command line of a script goes through).
    let b = line.as_bytes();
    let mut from = 0;
    let at = loop {
        let i = from + line[from..].find('<')?;
        if b.get(i + 1) == Some(&b'<') {
            break i;
        }
        from = i + 1;
    };
    let rest = line[at + 2..].trim_start_matches(['-', '~']).trim_start();
    let word: String = rest
        .chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, ';' | '|' | '&' | '>' | ')'))
        .filter(|c| !matches!(c, '\'' | '"'))
        .collect();
    (!word.is_empty() && !word.starts_with('<')).then_some(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Skipping heredoc bodies by searching for the delimiter gives the lines the
        /// line-by-line definition gives, in any text: nested and unterminated heredocs,
        /// quoted and dashed delimiters, `\r\n`, empty lines, delimiters inside lines.
        #[test]
        fn command_lines_are_the_line_by_line_definitions(
            parts in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just("cat > f << EOF".to_string()),
                proptest::strategy::Just("cat <<-'END' | sh".to_string()),
                proptest::strategy::Just("python - <<\"PY\"".to_string()),
                proptest::strategy::Just("EOF".to_string()),
                proptest::strategy::Just("  EOF  ".to_string()),
                proptest::strategy::Just("END".to_string()),
                proptest::strategy::Just("PY".to_string()),
                proptest::strategy::Just("xEOF EOFx".to_string()),
                proptest::strategy::Just("".to_string()),
                "[a-z <>'\";|&EOF\r]{0,12}",
            ], 0..14),
            seps in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just("\n"), proptest::strategy::Just("\r\n"), proptest::strategy::Just("\n\n")
            ], 14),
            end in proptest::prop_oneof![
                proptest::strategy::Just(""), proptest::strategy::Just("\n"), proptest::strategy::Just("\r"),
            ],
        ) {
            let mut text = String::new();
            for (p, sep) in parts.iter().zip(&seps) {
                text.push_str(p);
                text.push_str(sep);
            }
            text.push_str(end);
            proptest::prop_assert_eq!(command_lines(&text).into_owned(), command_lines_by_line(&text));
        }
    }

    proptest::proptest! {
        #[test]
        fn find_short_is_find(hay in "[ab EOFé\n]{0,30}", needle in "[aEOé]{0,3}") {
            proptest::prop_assert_eq!(find_short(&hay, &needle), hay.find(needle.as_str()));
        }
    }

    /// A body line holding the delimiter many times is looked at once, not once per hit
    /// (200,000 hits on one line took minutes that way).
    #[test]
    fn a_long_body_line_full_of_the_delimiter_is_looked_at_once() {
        let line = "a".repeat(200_000) + "b";
        assert_eq!(
            after_body_looking(&format!("{line}\na\nls x"), "a"),
            ("ls x", 2)
        );
        let text = format!("cat <<a\n{line}\na\nls x");
        assert_eq!(command_lines(&text), "cat <<a ; ls x");
        assert_eq!(command_lines(&text).as_ref(), command_lines_by_line(&text));
    }

    /// Every command of the real traces: the same command lines.
    #[test]
    fn command_lines_are_the_definitions_on_real_traces() {
        for c in crate::engine::real_traces::commands() {
            assert_eq!(command_lines(&c).as_ref(), command_lines_by_line(&c), "{c}");
        }
    }
}
