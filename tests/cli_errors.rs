//! The built binary's errors, exact text: each names its culprit (the field, the key, the
//! address) once, and an unreachable broker is reported at once, not after librdkafka's
//! timeouts, with an exit code of its own (3; an invalid input is 2). No broker needed: the
//! addresses are closed ports, or ports held here that take connections and never answer.

use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn loopguard(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_loopguard"));
    c.args(args)
        .env("RUST_LOG", "off")
        .env_remove("LOOPGUARD_CONFIG");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run loopguard")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A port nothing listens on: bound by the OS, then released.
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn serve_names_the_unreachable_broker_once_and_quickly() {
    let addr = format!("127.0.0.1:{}", closed_port());
    let t0 = Instant::now();
    let o = loopguard(
        &["serve"],
        &[("LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS", addr.as_str())],
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(
        stderr(&o),
        format!("loopguard: cannot reach the Kafka broker at {addr} (kafka.bootstrap_servers): Connection refused (os error 111)\n")
    );
}

#[test]
fn topics_create_names_the_unreachable_brokers_once_and_quickly() {
    let (a, b) = (closed_port(), closed_port());
    let servers = format!("127.0.0.1:{a},127.0.0.1:{b}");
    let t0 = Instant::now();
    let o = loopguard(
        &[
            "topics",
            "create",
            "--partitions",
            "1",
            "--bootstrap-servers",
            &servers,
        ],
        &[],
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(
        stderr(&o),
        format!(
            "loopguard: cannot reach the Kafka broker at {servers} (--bootstrap-servers): \
             127.0.0.1:{a}: Connection refused (os error 111); \
             127.0.0.1:{b}: Connection refused (os error 111)\n"
        )
    );
}

#[test]
fn a_taken_admin_address_is_named_with_its_setting() {
    // The embedded broker (no bootstrap servers configured), then the admin listener.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let o = loopguard(
        &["serve"],
        &[
            ("LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS", ""),
            ("LOOPGUARD__KAFKA__EMBEDDED_LISTEN", "127.0.0.1:0"),
            ("LOOPGUARD__ADMIN__LISTEN", addr.as_str()),
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "loopguard: cannot listen on {addr} (admin.listen): Address already in use (os error 98)\n"
        )
    );
}

#[test]
fn a_taken_embedded_broker_address_is_named_with_its_setting() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let o = loopguard(&["demo", "--listen", &addr], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "loopguard: cannot listen on {addr} (kafka.embedded_listen): Address already in use (os error 98)\n"
        )
    );
}

#[test]
fn a_wrong_typed_config_value_names_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[kafka]\nbatch_max_ms = \"fast\"\n").unwrap();
    let o = loopguard(&["check-config", file.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "loopguard: invalid configuration:\n  - kafka.batch_max_ms: invalid type: string \"fast\", expected u64\n"
    );
}

#[test]
fn a_wrong_typed_event_field_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("one.events.jsonl");
    std::fs::write(
        &file,
        r#"{"v":1,"event_id":"e","session_id":"s","ts":1,"type":"tool_call","turn_id":"t","call_id":"c","tool":42}"#,
    )
    .unwrap();
    let o = loopguard(&["replay", file.to_str().unwrap()], &[]);
    assert!(o.status.success());
    assert!(
        stderr(&o).ends_with(
            "  malformed line 1: field `tool`: invalid type: integer `42`, expected a string\n"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn an_unknown_event_type_is_named_with_its_line_and_fails_strict() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typo.events.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"v":1,"event_id":"e1","session_id":"s","ts":1,"type":"user_message","text":"go"}"#,
            "\n",
            r#"{"v":1,"event_id":"e2","session_id":"s","ts":2,"type":"tool_cal","turn_id":"t","call_id":"c","tool":"bash","args":{}}"#,
            "\n"
        ),
    )
    .unwrap();
    let known = "user_message, assistant_message, tool_call, tool_result, reasoning, content, turn_end, compaction, session_end, feedback";
    let o = loopguard(&["replay", file.to_str().unwrap()], &[]);
    assert!(o.status.success());
    assert!(
        stderr(&o).ends_with(&format!(
            "  line 2, skipped: unknown event type `tool_cal` (known: {known})\n"
        )),
        "{}",
        stderr(&o)
    );
    let o = loopguard(&["replay", "--strict", file.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!("loopguard: line 2: unknown event type `tool_cal` (known: {known})\n")
    );
}

#[test]
fn a_broker_that_never_answers_is_named_with_its_setting() {
    // Takes connections (the kernel completes them into the backlog) and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let t0 = Instant::now();
    let o = loopguard(
        &["serve"],
        &[("LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS", addr.as_str())],
    );
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with(&format!(
            "loopguard: cannot reach the Kafka broker at {addr} (kafka.bootstrap_servers): no answer to a metadata request within 10 s"
        )),
        "{}",
        stderr(&o)
    );
    drop(silent);
}

#[test]
fn policy_publish_and_history_name_the_unreachable_broker_and_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nrule = \"tool.cycle\"\nmode = \"observe\"\n",
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", closed_port());
    let env = [("LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS", addr.as_str())];
    let want = format!(
        "loopguard: cannot reach the Kafka broker at {addr} (kafka.bootstrap_servers): Connection refused (os error 111)\n"
    );
    for args in [
        vec!["policy", "publish", policy.to_str().unwrap()],
        vec!["policy", "history"],
    ] {
        let t0 = Instant::now();
        let o = loopguard(&args, &env);
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{args:?}: {:?}",
            t0.elapsed()
        );
        assert_eq!(o.status.code(), Some(3), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), want, "{args:?}");
    }
    // An invalid file is still 2, before any broker is asked.
    std::fs::write(&policy, "bogus = 1\n").unwrap();
    let o = loopguard(&["policy", "publish", policy.to_str().unwrap()], &env);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
