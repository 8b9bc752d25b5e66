//! Every metric name the Grafana dashboard and the Prometheus alerts use is one that a
//! running loopguard exports: the real binary is started (embedded broker) and scraped.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Metric names in a text: `loopguard_…` tokens that are not part of a recording-rule name
/// (`level:metric:operation`), with histogram suffixes removed.
fn names_used(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while let Some(pos) = text[i..].find("loopguard_") {
        let start = i + pos;
        let mut end = start;
        while end < bytes.len()
            && (bytes[end].is_ascii_lowercase()
                || bytes[end].is_ascii_digit()
                || bytes[end] == b'_')
        {
            end += 1;
        }
        let before = start.checked_sub(1).map(|b| bytes[b]);
        let part_of_rule = before
            .is_some_and(|b| b == b':' || b.is_ascii_alphanumeric() || b == b'_')
            || bytes.get(end) == Some(&b':');
        if !part_of_rule {
            let name = &text[start..end];
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            out.insert(base.to_string());
        }
        i = end;
    }
    out
}

fn scrape(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.contains("200 OK").then_some(body)
}

#[test]
fn dashboard_and_alerts_use_only_exported_metrics() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("serve")
        .env("LOOPGUARD__ADMIN__LISTEN", format!("127.0.0.1:{port}"))
        .env("LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS", "")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut page = None;
    while Instant::now() < deadline {
        // Wait until partitions are assigned, so per-partition series exist too.
        if let Some(p) = scrape(port).filter(|p| p.contains("\nloopguard_ready 1")) {
            page = Some(p);
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    child.kill().ok();
    child.wait().ok();
    let page = page.expect("loopguard serve answered /metrics and became ready");
    let exported: BTreeSet<String> = page
        .lines()
        .filter(|l| l.starts_with("loopguard_"))
        .map(|l| {
            let name = l.split(['{', ' ']).next().unwrap();
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name)
                .to_string()
        })
        .collect();
    let mut used = BTreeSet::new();
    for file in [
        "deploy/grafana/loopguard.json",
        "deploy/prometheus/loopguard-alerts.yaml",
        "helm/loopguard/files/loopguard-alerts.yaml",
        "helm/loopguard/files/loopguard.json",
    ] {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
        used.extend(names_used(&text));
    }
    assert!(used.len() >= 10, "{used:?}");
    let unknown: Vec<_> = used.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "used but not exported: {unknown:?}\nexported: {exported:?}"
    );
}

#[test]
fn recording_rule_names_are_not_taken_for_metrics() {
    let used = names_used(
        "sum(rate(loopguard_verdicts_total[5m])) job:loopguard_loops:rate5m loopguard_x_bucket",
    );
    assert_eq!(
        used,
        ["loopguard_verdicts_total", "loopguard_x"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
}
