//! `scripts/score_traces.py`, the scorer docs/tuning.md and docs/benchmarks.md run, against
//! this build over the labelled real sessions: the same figures as
//! tests/real_data/agent_traces.rs pins in-process (4/4 loops, no block or abort on healthy
//! work, the 2 accepted soft verdicts). Needs python3 (as scripts/test.sh does).

use std::process::Command;

/// The scorer's verbose report with `--check` over the labels in `dir` (its default set
/// when `None`); fails the test when it exits non-zero.
fn scored(dir: Option<&str>) -> String {
    let mut cmd = Command::new("python3");
    cmd.args(["scripts/score_traces.py", env!("CARGO_BIN_EXE_loopguard")]);
    if let Some(dir) = dir {
        cmd.args(["--labels", dir]);
    }
    let o = cmd
        .args(["--verbose", "--check"])
        .output()
        .expect("run python3 scripts/score_traces.py");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_scorer_gives_the_documented_figures() {
    assert_eq!(
        scored(None),
        "  soft  ext-mini-dj13964: tool.revert_cycle steer at call 97\n\
         \x20 soft  ext-swea-pydicom1458: tool.fuzzy_repeat steer at call 9\n\
         loops caught 4/4, block/abort on healthy work 0, other verdicts on healthy work 2\n"
    );
}

/// The synthetic sessions of tests/data/kinds (scripts/gen_kinds.py: household, web-shop,
/// QA, customer-service and coding agents, the classes of issue 34): every loop on time, no
/// verdict at all on their healthy work.
#[test]
fn the_kinds_corpus_is_judged_as_labelled() {
    assert_eq!(
        scored(Some("tests/data/kinds")),
        "loops caught 15/15, block/abort on healthy work 0, other verdicts on healthy work 0\n"
    );
}

#[test]
fn the_kinds_corpus_is_what_its_generator_writes() {
    let o = Command::new("python3")
        .args(["scripts/gen_kinds.py", "--check"])
        .output()
        .expect("run python3 scripts/gen_kinds.py");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_label_naming_no_event_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("labels.json"),
        r#"{"sessions": {"s": {"file": "t.jsonl", "loop": true, "intervene_at": "nope"}}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("t.jsonl"),
        r#"{"v":1,"event_id":"e1","session_id":"s","ts":1,"type":"tool_call","turn_id":"t","call_id":"c","tool":"ls","args":{}}"#,
    )
    .unwrap();
    let o = Command::new("python3")
        .args(["scripts/score_traces.py", env!("CARGO_BIN_EXE_loopguard")])
        .arg("--labels")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "score_traces: s: intervene_at 'nope' is not one of its events\n"
    );
}
