//! The real agent sessions of `tests/data/real/agent-traces` (SWE-agent and mini-swe-agent,
//! MIT; see its README) for unit tests that hold a fast routine equal to its definition on
//! real text: every record, and every shell command in them.

use serde_json::Value;

/// Every record of both trace files, in order.
pub fn records() -> Vec<Value> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/real/agent-traces");
    ["swe-agent.jsonl", "mini-swe-agent.jsonl"]
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(format!("{dir}/{f}")).expect("agent traces");
            text.lines()
                .map(|l| serde_json::from_str(l).expect("a JSON record"))
                .collect::<Vec<Value>>()
        })
        .collect()
}

/// The `command` argument of every tool call (more than 900).
pub fn commands() -> Vec<String> {
    let commands: Vec<String> = records()
        .iter()
        .filter_map(|v| v["args"]["command"].as_str().map(str::to_string))
        .collect();
    assert!(commands.len() > 900, "{} commands", commands.len());
    commands
}
