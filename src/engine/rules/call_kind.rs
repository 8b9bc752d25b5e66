//! What a call is by its tool's name, its sub-command or its command line: a change to
//! the world, a restore of an earlier state, a navigation step. Pure.

use crate::engine::canon;
use crate::engine::policy::ToolPolicy;
use crate::engine::shell;
use serde_json::Value;

/// A tool (or a tool's sub-command) that changes the world by its name: listed in
/// `mutation_tools`, or starting with a verb of `mutation_verbs`.
pub(super) fn writes_by_name(name: &str, p: &ToolPolicy) -> bool {
    // Only a name with capitals can match a listed one without being equal to it.
    let capitals = name.bytes().any(|c| c.is_ascii_uppercase());
    p.mutation_tools
        .iter()
        .any(|t| t == name || (capitals && same_letters(t, name)))
        || {
            let verb = first_word(name);
            p.mutation_verbs
                .iter()
                .any(|v| v.eq_ignore_ascii_case(verb))
        }
}

/// Two tool names that differ only in case and separators (`multi_edit`, `MultiEdit`).
fn same_letters(a: &str, b: &str) -> bool {
    fn letters(s: &str) -> impl Iterator<Item = u8> + '_ {
        s.bytes()
            .filter(|c| !matches!(c, b'_' | b'-' | b'.' | b' '))
            .map(|c| c.to_ascii_lowercase())
    }
    letters(a).eq(letters(b))
}

/// The sub-command of a multi-purpose tool (`str_replace_editor` with `command:
/// "str_replace"`, a `files` tool with `action: "delete"`): the first word of that argument.
pub(super) fn subcommand(args: &Value) -> Option<&str> {
    let map = args.as_object()?;
    ["command", "action", "operation", "op"]
        .iter()
        .find_map(|k| map.get(*k).and_then(Value::as_str))
        .and_then(|c| c.split_whitespace().next())
}

/// A tool (or sub-command) whose name starts with a verb of `verbs`.
pub(super) fn named_by<V: AsRef<str>>(tool: &str, args: &Value, verbs: &[V]) -> bool {
    let verb = |name: &str| {
        let w = first_word(name);
        verbs.iter().any(|v| v.as_ref().eq_ignore_ascii_case(w))
    };
    verb(tool) || subcommand(args).is_some_and(verb)
}

/// The verbs of a tool (or sub-command) that puts something back as it was: `undo_edit`,
/// `revert_file`, `restore`, `rollback`.
pub(super) const RESTORE_VERBS: [&str; 4] = ["undo", "revert", "restore", "rollback"];

/// Which restore a call is (see `CallRecord::restore_key`).
pub(super) fn restore_key(sig: u64, identity: u64, command: Option<&shell::Command>) -> u64 {
    match command {
        Some(c) if !c.restored.is_empty() => {
            // In order: `cp f f.orig` saves the file, `cp f.orig f` restores it.
            canon::hash64(format!("restore\n{}", c.restored.join("\n")).as_bytes()) | 1
        }
        Some(_) => sig,
        None if identity != 0 => identity,
        None => sig,
    }
}

/// The first word of a tool name (compared without case): `cancel_order`, `cancel-order`
/// and `cancelOrder` all give `cancel`.
pub(super) fn first_word(tool: &str) -> &str {
    let end = tool
        .char_indices()
        .find(|&(i, c)| matches!(c, '_' | '-' | '.' | ' ') || (i > 0 && c.is_uppercase()))
        .map_or(tool.len(), |(i, _)| i);
    &tool[..end]
}

/// Keys of a write tool's arguments that hold a whole file's new content, and its path.
const CONTENT_KEYS: [&str; 5] = ["content", "contents", "file_text", "text", "code"];
const PATH_KEYS: [&str; 4] = ["path", "file_path", "file", "filename"];

/// The file a call writes whole, and a fingerprint of what it writes there: a write
/// tool's path and content arguments (`create`, `write_file`), or a shell command line
/// that writes one file from a heredoc (`cat > f <<'EOF' … EOF`: the same command line,
/// the same content). `None` for partial edits (`str_replace`, `sed -i`): their result
/// depends on the file before them. `named`: the tool or its sub-command writes by its name
/// (`writes_by_name`), `is_shell`: the tool is a shell (`ToolPolicy::is_shell`): both
/// computed once by the caller.
pub(super) fn whole_write(
    args: &Value,
    command: Option<&shell::Command>,
    named: bool,
    is_shell: bool,
) -> Option<(String, u64)> {
    if is_shell {
        let c = command?;
        let text = args
            .as_str()
            .or_else(|| args.get("command").and_then(Value::as_str))?;
        let first = text.lines().next()?;
        let heredoc = first.contains("<<") && (first.contains("cat ") || first.contains("cat>"));
        return match c.writes.as_slice() {
            [file] if heredoc => Some((file.clone(), canon::hash64(text.as_bytes()))),
            _ => None,
        };
    }
    if !named {
        return None;
    }
    let map = args.as_object()?;
    let path = PATH_KEYS.iter().find_map(|k| map.get(*k)?.as_str())?;
    let content = CONTENT_KEYS.iter().find_map(|k| map.get(*k)?.as_str())?;
    Some((path.to_string(), canon::hash64(content.as_bytes())))
}

/// What the call's command text says it does: the whole analysis for shell tools; for
/// another tool that takes a command line, only its identity options. `shell`: the tool is
/// a shell (`ToolPolicy::is_shell`).
pub(super) fn shell_command(args: &Value, shell: bool, p: &ToolPolicy) -> Option<shell::Command> {
    let text = match args {
        Value::String(s) if shell => s.as_str(),
        Value::Object(map) => ["command", "cmd", "script", "commands", "input"]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_str))?,
        _ => return None,
    };
    if shell {
        return Some(shell::analyse(text, &p.identity_keys));
    }
    let views = shell::identity_views(text, &p.identity_keys);
    Some(shell::Command {
        views,
        ..Default::default()
    })
}

/// A partial edit of one file (`str_replace`, an `Edit` with `old_string` and
/// `new_string`, a multi-edit's `edits`) as a change of the file's state that its reverse
/// undoes: the file and `H(old) ^ H(new)` over its replacements. The file's state after a
/// series of edits is the XOR of their changes, so an edit that puts text back as it was
/// returns the file to an earlier state, whatever came in between (`tool.revert_cycle`'s
/// state form, without a reported state). `None` for other calls. The arguments say it
/// whatever the tool is named (`search_replace`, `editor`, `NotebookEdit`): a file and the
/// text to replace in it with other text is an edit. Never a shell's call (`is_shell`).
pub(super) fn swap_edit(args: &Value, is_shell: bool) -> Option<(String, u64)> {
    if is_shell {
        return None;
    }
    let map = args.as_object()?;
    // One pass over the keys: most calls replace nothing and name no file.
    let (mut delta, mut path, mut edits) = (Replacement::default(), None, None);
    for (k, v) in map {
        // Every key of interest starts with one of these letters.
        if !matches!(
            k.as_bytes().first(),
            Some(b'e' | b'f' | b'n' | b'o' | b'p' | b'r' | b's')
        ) {
            continue;
        }
        if k == "edits" {
            edits = v.as_array();
        } else if let Some(rank) = PATH_KEYS.iter().position(|p| p == k) {
            // The first of `PATH_KEYS` that holds text, whatever the keys' order.
            if let Some(text) = v.as_str().filter(|_| path.is_none_or(|(r, _)| rank < r)) {
                path = Some((rank, text));
            }
        } else {
            delta.note(k, v);
        }
    }
    let delta = delta.hash()
        ^ edits.map_or(0, |edits| {
            edits
                .iter()
                .filter_map(Value::as_object)
                .fold(0, |d, e| d ^ replacement(e))
        });
    if delta == 0 {
        return None;
    }
    path.map(|(_, path)| (path.to_string(), delta))
}

/// The text an edit replaces and its replacement, as its arguments are read.
#[derive(Default)]
struct Replacement<'a> {
    old: Option<&'a str>,
    new: Option<&'a str>,
}

impl<'a> Replacement<'a> {
    /// Notes one argument: `old_string`/`new_string`, `old_str`/`new_str`,
    /// `old_text`/`new_text`, `old`/`new`, `search` or `find`/`replace`.
    fn note(&mut self, key: &str, value: &'a Value) {
        let Some(text) = value.as_str() else { return };
        match key {
            "old_string" | "old_str" | "old_text" | "old" | "search" | "find" => {
                self.old = Some(text)
            }
            "new_string" | "new_str" | "new_text" | "new" | "replace" => self.new = Some(text),
            _ => {}
        }
    }

    /// `H(old) ^ H(new)`, 0 unless both were named.
    fn hash(&self) -> u64 {
        match (self.old, self.new) {
            (Some(a), Some(b)) => canon::hash64(a.as_bytes()) ^ canon::hash64(b.as_bytes()),
            _ => 0,
        }
    }
}

/// `H(old) ^ H(new)` of the text one edit of a multi-edit replaces and its replacement.
fn replacement(map: &serde_json::Map<String, Value>) -> u64 {
    let mut r = Replacement::default();
    for (k, v) in map {
        r.note(k, v);
    }
    r.hash()
}
