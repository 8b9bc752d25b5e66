//! `scripts/same_stream.py`, the check of scripts/scale-out.sh (a verdicts topic read
//! read_committed against `loopguard replay`): it passes the replay's own verdicts laid out
//! as Kafka's console consumer prints them, markers among them, and fails on each real
//! difference: a verdict missing, one doubled, a session's order changed, a field changed.
//! Needs python3 (as scripts/test.sh does).

use std::process::Command;

/// The verdicts of `loopguard replay` over a small fleet dump (the load tool's, as the
/// script's), one JSON per line.
fn replay() -> Vec<String> {
    let bin = env!("CARGO_BIN_EXE_loopguard");
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("fleet.jsonl");
    let dump = Command::new(bin)
        .args(["loadgen", "dump", "--events", "3000", "--sessions", "100"])
        .output()
        .unwrap();
    assert!(dump.status.success());
    std::fs::write(&events, dump.stdout).unwrap();
    let o = Command::new(bin)
        .arg("replay")
        .arg(&events)
        .output()
        .unwrap();
    assert!(o.status.success());
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A console consumer's line for a verdict (`Partition:P`, headers, key, value), on a
/// partition chosen by its session as a keyed producer would.
fn record(verdict: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(verdict).unwrap();
    let session = v["session_id"].as_str().unwrap();
    let partition = session.bytes().map(u32::from).sum::<u32>() % 4;
    format!("Partition:{partition}\tNO_HEADERS\t{session}\t{verdict}")
}

fn marker(partition: u32, through: u32) -> String {
    format!(
        "Partition:{partition}\tloopguard-kind:judged\tnull\t{{\"v\":1,\"kind\":\"judged\",\"partition\":{partition},\"through_offset\":{through}}}"
    )
}

/// Runs the check on `records` against `want`; its exit status and stderr.
fn check(records: &[String], want: &[String]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let (dump, replayed) = (dir.path().join("dump"), dir.path().join("replay"));
    std::fs::write(&dump, records.join("\n") + "\n").unwrap();
    std::fs::write(&replayed, want.join("\n") + "\n").unwrap();
    let o = Command::new("python3")
        .arg("scripts/same_stream.py")
        .args([&dump, &replayed])
        .output()
        .expect("run python3 scripts/same_stream.py");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn the_stream_check_passes_replay_itself_and_fails_on_each_difference() {
    let want = replay();
    assert!(want.len() > 20, "{} verdicts", want.len());
    let mut records: Vec<String> = Vec::new();
    for (i, v) in want.iter().enumerate() {
        records.push(record(v));
        records.push(marker(i as u32 % 4, i as u32));
    }
    let (ok, err) = check(&records, &want);
    assert!(ok, "{err}");

    let first = |r: &[String]| r.iter().position(|l| !l.contains("judged")).unwrap();
    let mut missing = records.clone();
    missing.remove(first(&records));
    let (ok, err) = check(&missing, &want);
    assert!(!ok && err.contains("missing"), "{err}");

    let mut doubled = records.clone();
    doubled.push(records[first(&records)].clone());
    let (ok, err) = check(&doubled, &want);
    assert!(!ok && err.contains("more than once"), "{err}");

    // Two verdicts of one session swapped.
    let session = |l: &str| l.split('\t').nth(2).unwrap().to_string();
    let (a, b) = (0..records.len())
        .flat_map(|a| (a + 1..records.len()).map(move |b| (a, b)))
        .find(|&(a, b)| {
            !records[a].contains("judged") && session(&records[a]) == session(&records[b])
        })
        .expect("a session with two verdicts");
    let mut reordered = records.clone();
    reordered.swap(a, b);
    let (ok, err) = check(&reordered, &want);
    assert!(!ok && err.contains("order"), "{err}");

    let mut changed = records.clone();
    let i = first(&records);
    changed[i] = changed[i].replacen("\"action\":\"", "\"action\":\"x", 1);
    assert_ne!(changed[i], records[i]);
    let (ok, err) = check(&changed, &want);
    assert!(!ok && err.contains("differ"), "{err}");
}
