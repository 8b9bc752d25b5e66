//! One file shape wherever a policy or a configuration is given (docs/tuning.md, "Policy
//! files and configuration files"): a policy file works as `--config`, a configuration as a
//! policy file, and every problem of a file is reported in one pass. Through the binary.

use std::process::{Command, Output};

fn loopguard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(args)
        .env("RUST_LOG", "off")
        .env_remove("LOOPGUARD_CONFIG")
        .output()
        .expect("run loopguard")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const CANDIDATE: &str = r#"
[[rules]]
rule = "tool.fuzzy_repeat"
mode = "observe"
"#;

fn file(dir: &tempfile::TempDir, name: &str, body: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, body).unwrap();
    path.to_str().unwrap().to_string()
}

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_policy_file_is_a_configuration_s_policy_for_rules_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let candidate = file(&dir, "candidate.toml", CANDIDATE);
    let o = loopguard(&["rules", "--config", &candidate]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let line = text(&o.stdout)
        .lines()
        .find(|l| l.starts_with("tool.fuzzy_repeat"))
        .map(str::to_string)
        .unwrap();
    assert!(line.contains("observe  policy-file"), "{line}");
    let events = root().join("examples/fleet.events.jsonl");
    let o = loopguard(&["replay", "--config", &candidate, events.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn a_configuration_is_a_policy_file_for_diff_check_and_the_same_as_its_policy() {
    let dir = tempfile::tempdir().unwrap();
    let deploy = root().join("deploy/loopguard.toml");
    let deploy = deploy.to_str().unwrap();
    let events = root().join("examples/fleet.events.jsonl");
    let candidate = file(&dir, "candidate.toml", CANDIDATE);
    let o = loopguard(&[
        "policy",
        "diff",
        deploy,
        &candidate,
        "--events",
        events.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).starts_with("policy diff over 342 events"));
    let o = loopguard(&["policy", "check", deploy]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // The same policy as a policy file and inside a configuration: the same version.
    let wrapped = file(
        &dir,
        "wrapped.toml",
        "[admin]\nlisten = \"127.0.0.1:9464\"\n\n[[policy.rules]]\nrule = \"tool.fuzzy_repeat\"\nmode = \"observe\"\n",
    );
    let version = |path: &str| {
        let o = loopguard(&["policy", "check", path]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        out[out.find("policy_version").expect("a version")..].to_string()
    };
    assert_eq!(version(&candidate), version(&wrapped));
}

#[test]
fn every_problem_of_a_policy_file_is_reported_in_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let bad = file(
        &dir,
        "bad.toml",
        r#"
bogus = 1

[tool]
window = "six"
nope = 2

[budget]
near_limit_ratio = 3.0

[[rules]]
rule = "tool.nope"

[[overrides]]
set = { tool = { repeat_threshold = "many" } }
"#,
    );
    let o = loopguard(&["policy", "check", &bad]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    for key in [
        "policy.bogus: unknown field `bogus`",
        "policy.tool.nope: unknown field `nope`",
        "policy.tool.window: invalid type: string \"six\", expected usize",
        "policy: budget.near_limit_ratio must be in (0, 1]",
        "policy: rules: unknown rule `tool.nope`",
        "policy.overrides[0]: needs `tenant`, `agent` or both",
        "policy.overrides[0].set.tool.repeat_threshold: invalid type: string \"many\"",
    ] {
        assert!(
            err.contains(&format!("  - {key}")),
            "{key} missing from:\n{err}"
        );
    }
    assert_eq!(err.matches("\n  - ").count(), 7, "{err}");
}

#[test]
fn every_problem_of_a_configuration_is_reported_in_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let bad = file(
        &dir,
        "bad.toml",
        "[kafka]\nbatch_max_ms = \"fast\"\nbogus = true\nthreads = \"two\"\n\n[admin]\nlisten = 9464\nextra = 1\n",
    );
    let o = loopguard(&["check-config", &bad]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    for key in [
        "kafka.batch_max_ms: invalid type",
        "kafka.bogus: unknown field `bogus`",
        "kafka.threads: invalid type",
        "admin.extra: unknown field `extra`",
        "admin.listen: invalid type",
    ] {
        assert!(
            err.contains(&format!("  - {key}")),
            "{key} missing from:\n{err}"
        );
    }
    assert_eq!(err.matches("\n  - ").count(), 5, "{err}");
}
