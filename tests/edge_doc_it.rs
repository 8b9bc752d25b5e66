//! docs/edge.md as a reader uses it, against a real broker, guard and edge: each CLI's
//! settings snippet runs its hook on every event it registers, the Codex TOML, the MCP
//! client entry, each curl example's answer (the token file's against an edge with one).
// The test holds the SERIAL lock across its awaits on purpose (see `serial`).
#![allow(clippy::await_holding_lock)]

mod edge_env;
mod kafka_env;

use edge_env::*;
use kafka_env::*;
use serde_json::Value;
use std::process::Command;

/// The fenced blocks of a markdown file: (language, text).
fn blocks(markdown: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in markdown.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), String::new())),
            (Some(_), Some("")) => out.extend(open.take()),
            (Some((_, text)), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// A recorded payload for a CLI's hook event of that name.
fn payload_for(cli: &str, event: &str, session: &str) -> Value {
    let kind = match event {
        "PreToolUse" | "BeforeTool" => "pre_tool",
        "PostToolUse" | "PostToolUseFailure" | "AfterTool" => "post_tool",
        "UserPromptSubmit" | "BeforeAgent" => "prompt",
        "Stop" | "AfterAgent" => "stop",
        other => panic!("docs/edge.md registers {other}, which no fixture covers"),
    };
    let mut p = payload(cli, kind, session, "ls", 1);
    p["hook_event_name"] = event.into();
    p
}

fn published(edge: &Edge) -> u64 {
    get(&format!("{}/metrics", edge.url))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("loopguard_edge_events_published_total"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// Runs the command a settings block registers for `event`, as the CLI would: the command
/// is this CLI's hook, and the event is one it records (an event reaches the broker).
fn registered(edge: &Edge, cli: &str, event: &str, command: &str) {
    assert_eq!(command, format!("loopguard hook {cli}"), "{event}");
    let before = published(edge);
    let run = hook(
        cli,
        &edge.url,
        &payload_for(cli, event, &format!("doc-{cli}")),
        &[],
    );
    assert!(run.stderr.is_empty(), "{cli} {event}: {}", run.stderr);
    assert_eq!(published(edge), before + 1, "{cli} {event}: recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_block_of_docs_edge_md_works_as_written() {
    if bootstrap().is_none() {
        return;
    }
    let _one_at_a_time = serial();
    let (env, _guard, edge) = guarded_env("edge-doc", "").await;
    // The shared-host example's edge: its token file where the doc puts it, in a HOME of
    // the test's own.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".config/loopguard")).unwrap();
    let token_file = home.path().join(".config/loopguard/edge.token");
    let token_edge = start_edge_with(
        &env,
        &env.config(""),
        &["--token-file", token_file.to_str().unwrap()],
    );
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/edge.md")).unwrap();
    let mut seen = Vec::new();
    for (lang, text) in blocks(&doc) {
        match lang.as_str() {
            // The settings of Claude Code, Gemini CLI, an MCP client: JSON as written.
            "jsonc" => {
                let v: Value =
                    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
                if let Some(servers) = v.get("mcpServers") {
                    for s in servers.as_object().unwrap().values() {
                        assert_eq!(s["command"], "loopguard");
                        let args: Vec<&str> = s["args"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|a| a.as_str().unwrap())
                            .collect();
                        assert_eq!(args[0], "mcp-proxy");
                        assert!(args.contains(&"--"), "{args:?}");
                    }
                    seen.push("mcp".to_string());
                    continue;
                }
                let cli = if text.contains("BeforeTool") {
                    "gemini"
                } else {
                    "claude-code"
                };
                for (event, groups) in v["hooks"].as_object().unwrap() {
                    for hook_def in groups
                        .as_array()
                        .unwrap()
                        .iter()
                        .flat_map(|g| g["hooks"].as_array().unwrap())
                    {
                        assert_eq!(hook_def["type"], "command");
                        registered(&edge, cli, event, hook_def["command"].as_str().unwrap());
                    }
                }
                seen.push(cli.to_string());
            }
            // Codex's config.toml.
            "toml" => {
                let v: toml::Value = toml::from_str(&text).unwrap();
                for (event, groups) in v["hooks"].as_table().unwrap() {
                    for group in groups.as_array().unwrap() {
                        for hook_def in group["hooks"].as_array().unwrap() {
                            registered(
                                &edge,
                                "codex",
                                event,
                                hook_def["command"].as_str().unwrap(),
                            );
                        }
                    }
                }
                seen.push("codex".to_string());
            }
            // The shell examples: each curl run against this edge, its answer the comment's.
            "bash" => {
                let lines: Vec<&str> = text.lines().collect();
                for (i, line) in lines.iter().enumerate() {
                    if !line.starts_with("curl ") {
                        continue;
                    }
                    // A line that sends the token runs against the edge with a token file,
                    // and is refused without it.
                    let with_token = line.contains("authorization: Bearer");
                    let target = if with_token { &token_edge } else { &edge };
                    let run = |home: &std::path::Path| {
                        let host = target.url.trim_start_matches("http://");
                        let out = Command::new("sh")
                            .args(["-c", &line.replace("127.0.0.1:9465", host)])
                            .env("HOME", home)
                            .output()
                            .unwrap();
                        serde_json::from_slice::<Value>(&out.stdout)
                            .unwrap_or_else(|e| panic!("{e}: {line}"))
                    };
                    let want: Value =
                        serde_json::from_str(lines[i + 1].trim_start_matches("# ")).unwrap();
                    assert_eq!(run(home.path()), want, "{line}");
                    if with_token {
                        let elsewhere = tempfile::tempdir().unwrap();
                        assert_eq!(run(elsewhere.path())["reason"], "token", "{line}");
                    }
                    seen.push("curl".to_string());
                }
            }
            other => panic!("docs/edge.md: a `{other}` block this test does not check"),
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "claude-code",
            "codex",
            "curl",
            "curl",
            "curl",
            "gemini",
            "mcp"
        ]
    );
}
