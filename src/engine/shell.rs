//! What a shell command line does, as the repeat rules need it: the files it writes, the
//! scripts and tests it runs, whether it changes the world and whether it restores a file
//! from a copy. Words come from a POSIX shell-words lexer (`shell_words`); heredoc
//! bodies are skipped. Pure: no IO, nothing is executed.

mod lines;

use lines::command_lines;
use std::borrow::Cow;

/// The facts of one command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Command {
    /// Files written (redirections, `tee`, `sed -i`, `cp`/`mv` targets, `rm`, `touch`, …).
    pub writes: Vec<String>,
    /// Scripts and test paths run (`python f.py`, `pytest tests/x.py`, `./run.sh`).
    pub runs: Vec<String>,
    /// What part of a file a read shows (`sed -n '10,20p'`, `head -n 50`): paging, and
    /// options named by an identity key (`--function_name X`, `--page 2`).
    pub views: Vec<String>,
    /// The command changes files or the environment (writes, package installs, git changes).
    pub mutates: bool,
    /// The command puts a file back from a copy (`cp f.orig f`, `git checkout -- f`, …).
    pub restores: bool,
    /// What a restore names: the copy and the file (`cp`, `mv`, …), or the files a git
    /// restore puts back; the same restore however the command line is spelled.
    pub restored: Vec<String>,
}

impl Command {
    /// The identity of the command: what it writes and runs, in a fixed order; empty when
    /// it names neither (then only its text can tell two commands apart).
    pub fn identity(&self) -> String {
        // `w:`/`r:`/`v:` + the item, each one allocation of its size (not `format!`).
        let tagged = |tag: &str, item: &String| {
            let mut t = String::with_capacity(tag.len() + item.len());
            t.push_str(tag);
            t.push_str(item);
            t
        };
        let mut parts: Vec<String> = self
            .writes
            .iter()
            .map(|w| tagged("w:", w))
            .chain(self.runs.iter().map(|r| tagged("r:", r)))
            .chain(self.views.iter().map(|v| tagged("v:", v)))
            .collect();
        parts.sort();
        parts.dedup();
        parts.join("\n")
    }
}

const INTERPRETERS: [&str; 12] = [
    "python", "python3", "python2", "node", "bash", "sh", "zsh", "ruby", "perl", "php", "deno",
    "ts-node",
];
const TEST_RUNNERS: [&str; 5] = ["pytest", "py.test", "jest", "vitest", "mocha"];
const PACKAGE_TOOLS: [&str; 8] = [
    "pip", "pip3", "npm", "yarn", "pnpm", "apt-get", "apt", "conda",
];
const PACKAGE_VERBS: [&str; 6] = ["install", "uninstall", "remove", "add", "update", "upgrade"];
const GIT_MUTATING: [&str; 14] = [
    "apply",
    "am",
    "checkout",
    "restore",
    "reset",
    "stash",
    "commit",
    "merge",
    "rebase",
    "cherry-pick",
    "revert",
    "clean",
    "mv",
    "rm",
];
const GIT_RESTORING: [&str; 4] = ["checkout", "restore", "reset", "stash"];
const SEPARATORS: [&str; 5] = [";", "&&", "||", "|", "&"];

/// Analyses one command line (possibly several lines, with heredocs). `identity_keys`:
/// option names (`--page`, `--function_name`) whose values make two commands different work.
pub fn analyse(line: &str, identity_keys: &[String]) -> Command {
    let mut out = Command::default();
    let lines = command_lines(line);
    let words = words(&lines);
    for segment in words.split(|w| SEPARATORS.contains(&w.as_ref())) {
        simple_command(segment, &mut out);
        identity_options(segment, identity_keys, &mut out.views);
    }
    for list in [&mut out.writes, &mut out.runs, &mut out.views] {
        list.sort();
        list.dedup();
    }
    out
}

/// Only the options named by an identity key, for a tool that takes a command line but is
/// not a shell (`decompile --function_name X bin`).
pub fn identity_views(line: &str, identity_keys: &[String]) -> Vec<String> {
    let mut views = Vec::new();
    let lines = command_lines(line);
    identity_options(&words(&lines), identity_keys, &mut views);
    views.sort();
    views.dedup();
    views
}

/// `--key value` and `--key=value` where `key` (dashes read as underscores) is an identity key.
fn identity_options(words: &[Cow<'_, str>], keys: &[String], out: &mut Vec<String>) {
    let mut i = 0;
    while i < words.len() {
        if let Some(opt) = words[i].strip_prefix("--") {
            let (name, inline) = match opt.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (opt, None),
            };
            let name = name.replace('-', "_");
            if crate::engine::canon::is_identity_key(&name, keys) {
                let value = inline
                    .or_else(|| words.get(i + 1).map(|w| w.to_string()))
                    .unwrap_or_default();
                out.push(format!("{name}={value}"));
            }
        }
        i += 1;
    }
}

/// Shell words, with separators and redirections that were glued to a word split off
/// (`cd x;` -> `cd`, `x`, `;`; `>f` -> `>`, `f`). Unbalanced quotes fall back to spaces.
fn words(text: &str) -> Vec<Cow<'_, str>> {
    let raw = super::shell_words::split(text)
        .unwrap_or_else(|| text.split_whitespace().map(Cow::Borrowed).collect());
    let mut out = Vec::with_capacity(raw.len());
    for mut w in raw {
        let mut trailing = None;
        for sep in [";", "&&"] {
            if w.len() > sep.len() && w.ends_with(sep) {
                let keep = w.len() - sep.len();
                w = cut(w, ..keep);
                trailing = Some(sep);
                break;
            }
        }
        // Most words are kept as they are: moved (and mostly borrowed), not copied.
        match redirection(&w) {
            Some((op, target)) if !target.is_empty() => {
                let at = w.len() - target.len();
                out.push(Cow::Borrowed(op));
                out.push(cut(w, at..));
            }
            _ => out.push(w),
        }
        if let Some(sep) = trailing {
            out.push(Cow::Borrowed(sep));
        }
    }
    out
}

/// Part of a word, borrowed where the word was.
fn cut<'a>(w: Cow<'a, str>, range: impl std::slice::SliceIndex<str, Output = str>) -> Cow<'a, str> {
    match w {
        Cow::Borrowed(s) => Cow::Borrowed(&s[range]),
        Cow::Owned(s) => Cow::Owned(s[range].to_string()),
    }
}

/// A word that starts with an output redirection: (`>` or `>>`, what follows it).
fn redirection(w: &str) -> Option<(&'static str, &str)> {
    let body = w.trim_start_matches(|c: char| c.is_ascii_digit() || c == '&');
    if let Some(rest) = body.strip_prefix(">>") {
        return Some((">>", rest));
    }
    let rest = body.strip_prefix('>')?;
    Some((">", rest.trim_start_matches('|')))
}

fn basename(w: &str) -> &str {
    w.rsplit('/').next().unwrap_or(w)
}

fn is_option(w: &str) -> bool {
    w.starts_with('-') && w.len() > 1
}

fn is_real_file(w: &str) -> bool {
    !w.is_empty() && !w.starts_with("/dev/") && !w.starts_with('&')
}

/// One simple command (no separators): redirections anywhere, then its words.
fn simple_command(words: &[Cow<'_, str>], out: &mut Command) {
    let mut args: Vec<&str> = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_ref();
        match redirection(w) {
            Some((_, ""))
                if w.trim_start_matches(|c: char| c.is_ascii_digit() || c == '&')
                    .len()
                    <= 2 =>
            {
                if let Some(target) = words.get(i + 1).filter(|t| is_real_file(t)) {
                    out.writes.push(target.to_string());
                    out.mutates = true;
                }
                i += 2;
                continue;
            }
            _ => {}
        }
        if w == "<" || w == "<<" || w == "<<<" {
            i += 2;
            continue;
        }
        args.push(w);
        i += 1;
    }
    // Skip environment assignments and wrappers that run the next word.
    while let Some(first) = args.first() {
        let name = basename(first);
        if first.contains('=') && !first.starts_with('=') && !first.starts_with('-') {
            args.remove(0);
        } else if matches!(name, "sudo" | "env" | "time" | "nohup" | "exec" | "command") {
            args.remove(0);
            while args.first().is_some_and(|a| is_option(a)) {
                args.remove(0);
            }
        } else if name == "timeout" {
            args.remove(0);
            while args.first().is_some_and(|a| is_option(a)) {
                args.remove(0);
            }
            if !args.is_empty() {
                args.remove(0);
            }
        } else {
            break;
        }
    }
    let Some((&first, rest)) = args.split_first() else {
        return;
    };
    let name = basename(first);
    let operands: Vec<&str> = rest.iter().copied().filter(|a| !is_option(a)).collect();
    match name {
        "tee" => {
            out.writes.extend(operands.iter().map(|s| s.to_string()));
            out.mutates = true;
        }
        "sed" | "perl"
            if rest
                .iter()
                .any(|a| a.starts_with("-i") || *a == "--in-place") =>
        {
            let mut files = Vec::new();
            let mut scripted = false;
            let mut words = rest.iter();
            while let Some(a) = words.next() {
                if matches!(*a, "-e" | "-f" | "--expression" | "--file") {
                    scripted = true;
                    words.next();
                } else if !is_option(a) {
                    files.push(a.to_string());
                }
            }
            out.writes
                .extend(files.into_iter().skip(usize::from(!scripted)));
            out.mutates = true;
        }
        // Reads of part of a file: which part is the identity (paging, not a repeat).
        "sed" => {
            if let Some(script) = operands.first() {
                out.views.push(format!("sed {script}"));
            }
        }
        "head" | "tail" => {
            let numbers = rest
                .iter()
                .filter(|a| a.chars().any(|c| c.is_ascii_digit()))
                .map(|a| a.to_string());
            out.views
                .push(format!("{name} {}", numbers.collect::<Vec<_>>().join(" ")));
        }
        "awk" => {
            if let Some(script) = operands.first().filter(|s| s.contains("NR")) {
                out.views.push(format!("awk {script}"));
            }
        }
        "cp" | "mv" | "install" | "ln" | "rsync" => {
            if let Some(target) = operands.last().filter(|_| operands.len() >= 2) {
                out.writes.push(target.to_string());
                if name != "ln" {
                    out.restores = true;
                    out.restored.extend(operands.iter().map(|o| o.to_string()));
                }
            }
            if name == "mv" {
                let sources = &operands[..operands.len().saturating_sub(1)];
                out.writes.extend(sources.iter().map(|s| s.to_string()));
            }
            out.mutates = true;
        }
        "rm" | "touch" | "mkdir" | "rmdir" | "chmod" | "truncate" | "unlink" => {
            let skip = usize::from(name == "chmod");
            out.writes
                .extend(operands.iter().skip(skip).map(|s| s.to_string()));
            out.mutates = true;
        }
        "patch" => out.mutates = true,
        "git" => {
            let verb = operands.first().copied().unwrap_or("");
            if GIT_MUTATING.contains(&verb) {
                out.mutates = true;
                out.restores |= GIT_RESTORING.contains(&verb);
                let files = operands
                    .iter()
                    .skip(1)
                    .filter(|a| a.contains('.') || a.contains('/'));
                out.writes.extend(files.clone().map(|s| s.to_string()));
                if GIT_RESTORING.contains(&verb) {
                    out.restored.extend(files.map(|s| format!("git:{s}")));
                }
            }
        }
        _ if PACKAGE_TOOLS.contains(&name) => {
            out.mutates |= operands.iter().any(|a| PACKAGE_VERBS.contains(a));
        }
        _ if is_interpreter(name) => {
            if rest.iter().any(|a| *a == "-c" || *a == "-e") {
                return;
            }
            if let Some(m) = rest.iter().position(|a| *a == "-m") {
                if let Some(module) = rest.get(m + 1) {
                    out.runs.push(format!("-m {module}"));
                    if TEST_RUNNERS.contains(module) {
                        out.runs.extend(test_paths(&rest[m + 2..]));
                    }
                }
            } else if let Some(script) = operands.first() {
                out.runs.push(script.to_string());
            }
        }
        _ if TEST_RUNNERS.contains(&name) => {
            out.runs.push(name.to_string());
            out.runs.extend(test_paths(rest));
        }
        _ if first.starts_with("./") || (first.contains('/') && !first.starts_with('/')) => {
            out.runs.push(first.to_string());
        }
        _ => {}
    }
}

fn is_interpreter(name: &str) -> bool {
    INTERPRETERS.contains(&name)
        || name
            .strip_prefix("python")
            .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

fn test_paths<'a>(args: &'a [&'a str]) -> impl Iterator<Item = String> + 'a {
    args.iter()
        .filter(|a| !is_option(a) && (a.contains('/') || a.contains(".py") || a.contains("::")))
        .map(|s| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn analyse(line: &str) -> Command {
        super::analyse(line, &["page".to_string(), "function_name".to_string()])
    }

    fn w(line: &str) -> Vec<String> {
        analyse(line).writes
    }

    #[test]
    fn redirections_tee_and_in_place_edits_write() {
        assert_eq!(w("echo hi > out.txt"), ["out.txt"]);
        assert_eq!(w("echo hi >>log.txt 2>/dev/null"), ["log.txt"]);
        assert_eq!(w("make 2>&1 | tee -a build.log"), ["build.log"]);
        assert_eq!(
            w("sed -i 's/a|b/c/' src/x.py src/y.py"),
            ["src/x.py", "src/y.py"]
        );
        assert_eq!(w("sed -i.bak -e 's/a/b/' f.txt"), ["f.txt"]);
        assert!(w("sed -n '10,20p' f.txt").is_empty());
        assert!(!analyse("sed -n '10,20p' f.txt").mutates);
        assert!(!analyse("cat a.txt | grep x > /dev/null").mutates);
    }

    #[test]
    fn heredoc_bodies_are_not_commands() {
        let c = analyse("cat > test_a.py << 'EOF'\nimport os\nos.remove('x') > y\nprint(\"it's\")\nEOF\npython test_a.py");
        assert_eq!(c.writes, ["test_a.py"]);
        assert_eq!(c.runs, ["test_a.py"]);
        assert!(c.mutates && !c.restores);
        let other = analyse("cat > test_b.py <<EOF\nx = 1\nEOF");
        assert_ne!(c.identity(), other.identity());
    }

    #[test]
    fn copies_and_checkouts_restore() {
        let c = analyse("cp src/schema.py.fixed src/schema.py");
        assert_eq!(c.writes, ["src/schema.py"]);
        assert!(c.restores && c.mutates);
        assert!(analyse("cd /repo && git checkout -- a/b.py").restores);
        assert!(analyse("git stash pop").restores);
        // The same restore, spelled differently.
        assert_eq!(
            analyse("cp src/a.py.orig src/a.py").restored,
            analyse("cd /repo && cp -f src/a.py.orig src/a.py").restored
        );
        assert_eq!(
            analyse("git checkout -- a.py").restored,
            analyse("cd /repo && git restore a.py").restored
        );
        assert!(!analyse("git status").mutates);
        assert!(!analyse("git diff a.py").mutates);
    }

    #[test]
    fn runs_scripts_and_tests() {
        assert_eq!(
            analyse("cd /testbed && python3 reproduce.py --x 1").runs,
            ["reproduce.py"]
        );
        assert_eq!(
            analyse("python -m pytest tests/test_a.py::test_x -q").runs,
            ["-m pytest", "tests/test_a.py::test_x"]
        );
        assert_eq!(
            analyse("timeout 60 ./run_tests.sh").runs,
            ["./run_tests.sh"]
        );
        assert!(analyse("python -c 'print(1)'").runs.is_empty());
        assert!(analyse("pip install -e .").mutates);
        assert!(!analyse("pip list").mutates);
    }

    #[test]
    fn paging_and_identity_options_are_views() {
        let a = analyse("cd /testbed && sed -n '285,290p' a/qdp.py");
        let b = analyse("cd /testbed && sed -n '280,290p' a/qdp.py");
        assert_ne!(a.identity(), b.identity());
        assert_ne!(
            analyse("head -n 20 f").identity(),
            analyse("head -n 40 f").identity()
        );
        assert_eq!(
            identity_views(
                "decompile --function_name FUN_1 rock",
                &["function_name".into()]
            ),
            ["function_name=FUN_1"]
        );
        assert_eq!(analyse("tool --page=2 --q x").views, ["page=2"]);
    }

    #[test]
    fn unbalanced_quotes_do_not_fail() {
        let c = analyse("echo \"unterminated > f.txt");
        assert!(c.writes.contains(&"f.txt".to_string()));
    }
}
