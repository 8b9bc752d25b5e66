//! The real agent sessions of `tests/data/real/agent-traces` (SWE-agent and mini-swe-agent,
//! MIT; see its README), built into the unit tests with `include_str!` (no file reading at
//! run time), for tests that hold a fast routine equal to its definition on real text.

use serde_json::Value;

const TRACES: [&str; 2] = [
    include_str!("../../tests/data/real/agent-traces/swe-agent.jsonl"),
    include_str!("../../tests/data/real/agent-traces/mini-swe-agent.jsonl"),
];

/// Every record of both trace files, in order.
pub fn records() -> Vec<Value> {
    TRACES
        .iter()
        .flat_map(|text| text.lines())
        .map(|l| serde_json::from_str(l).expect("a JSON record"))
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
