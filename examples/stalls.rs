//! The slowest single events of an events file through one engine, and what a checkpoint
//! of every session costs at the end: the stalls a stream thread's next events wait behind
//! (docs/benchmarks.md, "Sixth issue-10 session").
//!
//! ```text
//! cargo build --release --example stalls
//! target/release/examples/stalls fleet.jsonl [EVENTS]
//! ```

use loopguard::engine::event::Event;
use loopguard::engine::policy::PolicySet;
use loopguard::engine::{Engine, Limits};
use std::io::BufRead;
use std::time::{Duration, Instant};

/// The allocator the service ships with (`src/main.rs`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: stalls FILE [EVENTS]"))?;
    let limit: usize = args.next().map_or(Ok(usize::MAX), |n| n.parse())?;
    let mut engine = Engine::new(PolicySet::default(), Limits::default());
    let mut verdicts = Vec::new();
    let mut times: Vec<(Duration, String)> = Vec::new();
    for line in std::io::BufReader::new(std::fs::File::open(&path)?)
        .lines()
        .take(limit)
    {
        let line = line?;
        let Ok(event) = Event::decode(line.as_bytes()) else {
            continue;
        };
        let kind = event.body.kind().to_string();
        let started = Instant::now();
        verdicts.clear();
        engine.handle_event(event, &mut verdicts);
        times.push((started.elapsed(), kind));
    }
    times.sort_by_key(|t| std::cmp::Reverse(t.0));
    println!("{} events; the slowest:", times.len());
    for (t, kind) in times.iter().take(8) {
        println!("  {:>9.3} ms  {kind}", t.as_secs_f64() * 1e3);
    }
    let ids = engine.session_ids();
    let started = Instant::now();
    let bytes: usize = ids
        .iter()
        .filter_map(|id| engine.snapshot(id))
        .map(|s| s.len())
        .sum();
    let took = started.elapsed();
    println!(
        "checkpoint of all {} sessions: {bytes} bytes serialized in {:.1} ms ({:.1} us per session)",
        ids.len(),
        took.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e6 / ids.len().max(1) as f64
    );
    Ok(())
}
