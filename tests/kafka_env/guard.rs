//! Guard processes of a test: `loopguard serve` started with its log in the test's
//! directory, run until its group has committed, and its log summarized (warnings and
//! errors counted, restores) when the test fails.

use super::{Env, Record};
use loopguard::engine::verdict::Verdict;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What one guard run wrote and logged (`Env::run_until_committed`).
pub struct GuardRun {
    /// The group committed through the end of the events topic in time.
    pub committed: bool,
    pub dlq: Vec<Record>,
    pub verdicts: Vec<(i32, Verdict)>,
    pub log: String,
}

impl Env {
    /// Starts `loopguard serve`; its log goes to a file, summarized if the test fails.
    pub fn spawn_guard(&self, config: &str, instance: &str) -> Child {
        let log =
            std::fs::File::create(self.dir.path().join(format!("guard-{instance}.log"))).unwrap();
        // LOOPGUARD_TEST_BIN runs another build (to measure an older version).
        let bin = std::env::var("LOOPGUARD_TEST_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_loopguard").to_string());
        let child = Command::new(bin)
            .args(["serve", "--config", config])
            .env("LOOPGUARD_INSTANCE_ID", format!("{}-{instance}", self.name))
            .env(
                "RUST_LOG",
                std::env::var("LOOPGUARD_TEST_RUST_LOG")
                    .unwrap_or_else(|_| "warn,loopguard::service::stream::worker=info".into()),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        if let Ok(mut spawned) = self.spawned.lock() {
            spawned.push(child.id());
        }
        child
    }

    /// Events a guard re-ran while restoring partitions, from its "partition restored" lines.
    pub fn replayed_by(&self, instance: &str) -> u64 {
        let log = std::fs::read_to_string(self.dir.path().join(format!("guard-{instance}.log")))
            .unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("partition restored"))
            .filter_map(|l| {
                l.split("replayed=")
                    .nth(1)?
                    .split(' ')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    /// A guard's whole log.
    /// Runs one guard `instance` with `config` until its group has committed the whole
    /// events topic (or two minutes pass), then stops it; what it wrote and logged.
    pub fn run_until_committed(&self, config: &str, instance: &str) -> GuardRun {
        let mut guard = self.spawn_guard(config, instance);
        let committed = self.wait_committed(Duration::from_secs(120));
        let dlq = self.read_all(&self.topic("dlq"));
        let verdicts = self.verdicts();
        guard.kill().ok();
        guard.wait().ok();
        GuardRun {
            committed,
            dlq,
            verdicts,
            log: self.log_of(instance),
        }
    }

    pub fn log_of(&self, instance: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("guard-{instance}.log")))
            .unwrap_or_default()
    }

    /// The guards' "partition restored" lines.
    pub fn restores(&self) -> String {
        ["a", "b"]
            .iter()
            .flat_map(|i| {
                std::fs::read_to_string(self.dir.path().join(format!("guard-{i}.log")))
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains("partition restored"))
                    .map(|l| format!("{i}: {l}\n"))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Each guard's warnings and errors in order of first appearance, repeats counted.
    pub fn guard_log_summary(&self) -> String {
        let mut out = String::new();
        let mut logs: Vec<_> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        logs.sort();
        for path in logs {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let mut seen: Vec<(String, usize)> = Vec::new();
            for line in text
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            {
                // Drop the timestamp so repeats of one message count together.
                let msg = line
                    .split_once(' ')
                    .map_or(line, |(_, m)| m)
                    .trim()
                    .to_string();
                match seen.iter_mut().find(|(m, _)| *m == msg) {
                    Some((_, n)) => *n += 1,
                    None => seen.push((msg, 1)),
                }
            }
            out.push_str(&format!("== {}\n", path.display()));
            for (msg, n) in seen.iter().take(40) {
                out.push_str(&format!("{n:>5}x {msg}\n"));
            }
        }
        out
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // A failed test leaves no guard running (a panic skips its own kill).
        if std::thread::panicking() {
            for pid in self.spawned.lock().map(|p| p.clone()).unwrap_or_default() {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
        }
        // On failure, or always with LOOPGUARD_TEST_LOGS set (and --nocapture).
        if std::thread::panicking() || std::env::var_os("LOOPGUARD_TEST_LOGS").is_some() {
            eprintln!(
                "guard logs (warnings and errors):\n{}restores:\n{}",
                self.guard_log_summary(),
                self.restores()
            );
        }
    }
}
