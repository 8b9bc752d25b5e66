//! `loopguard replay --tenant T` reads a file as tenant T's own events topic, as the service
//! judges that topic (docs/contract.md, "Tenants"): an event naming no tenant is T's, one
//! naming another is malformed (`tenant_mismatch`) and reaches no session.

use serde_json::{json, Value};
use std::io::Write;
use std::process::Command;

fn call(session: &str, n: i64, tenant: Option<&str>) -> Value {
    let mut e = json!({"v": 1, "event_id": format!("{session}-{n}"), "session_id": session,
        "ts": 1_767_225_600_000i64 + n * 1000, "type": "tool_call", "turn_id": format!("t{n}"),
        "call_id": format!("c{n}"), "tool": "bash", "args": {"cmd": "make test"}});
    if let Some(t) = tenant {
        e["tenant"] = json!(t);
    }
    e
}

fn replay(events: &[Value], extra: &[&str]) -> (Vec<Value>, String) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    for e in events {
        writeln!(file, "{e}").unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("replay")
        .args(extra)
        .arg(file.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let verdicts = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (verdicts, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_file_read_as_a_tenant_s_topic_is_judged_as_the_service_judges_it() {
    // Two of s1's calls name another tenant: on acme's topic they are not acme's session.
    let events = [
        call("s1", 1, None),
        call("s1", 2, Some("beta")),
        call("s1", 3, Some("acme")),
        call("s1", 4, Some("beta")),
        call("s1", 5, None),
    ];
    let (verdicts, report) = replay(&events, &["--tenant", "acme"]);
    let got: Vec<(&str, &str, &str)> = verdicts
        .iter()
        .map(|v| {
            (
                v["event_id"].as_str().unwrap(),
                v["action"].as_str().unwrap(),
                v["tenant"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(got, [("s1-5", "block", "acme")], "{report}");
    assert!(report.contains("2 malformed"), "{report}");
    assert!(report.contains("tenant_mismatch"), "{report}");
    // Without --tenant the file is the shared topic's: every event is judged as it says.
    let (verdicts, _) = replay(&events, &[]);
    assert_eq!(verdicts[0]["event_id"], "s1-3");
}
