//! Runs one benchmark workload for a profiler, without criterion around it:
//!
//! ```text
//! cargo build --release --example profile
//! valgrind --tool=callgrind --toggle-collect='*workloads::run*' \
//!     target/release/examples/profile reasoning/healthy_8_32_chars
//! ```
//!
//! Workloads: `tools`, `decode` (measured in `workloads::decode_and_run`), `real` (the
//! real agent traces decoded and judged, also in `decode_and_run`) and `real-parse` (the
//! same bytes only parsed into `serde_json::Value`: the floor, in `parse_floor`), the same
//! split by kind (`real-reasoning`, `real-tools`, each with `-parse` for its floor), their
//! reasoning streamed in 8-32-char chunks (`real-streamed`, `real-streamed-parse`), and the
//! reasoning ones by name (`reasoning/loops_8_32_chars`, ...). An optional second argument
//! repeats the run.

#[path = "../benches/workloads/mod.rs"]
mod workloads;

use std::time::Instant;

/// The allocator the service ships with (`src/main.rs`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let what = args.next().unwrap_or_else(|| "tools".into());
    let reps: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(1);
    let time = |label: &str, units: f64, unit: &str, f: &mut dyn FnMut()| {
        let start = Instant::now();
        for _ in 0..reps {
            f();
        }
        let secs = start.elapsed().as_secs_f64() / reps as f64;
        eprintln!(
            "{label}: {:.1} ms per run, {:.0} {unit}/s",
            secs * 1e3,
            units / secs
        );
    };
    match what.as_str() {
        "tools" => {
            let events = workloads::fleet();
            let n = events.len() as f64;
            time("tools", n, "events", &mut || {
                drop(workloads::run(events.clone()))
            });
        }
        "real" => {
            let wire = workloads::real_traces();
            let n = wire.len() as f64;
            time("real", n, "events", &mut || {
                drop(workloads::decode_and_run(&wire))
            });
        }
        "real-parse" => {
            let wire = workloads::real_traces();
            let n = wire.len() as f64;
            time("real-parse", n, "events", &mut || {
                std::hint::black_box(workloads::parse_floor(&wire));
            });
        }
        // The real traces split by kind: `real-reasoning`, `real-tools`, and each with
        // `-parse` for its floor.
        kind if kind.starts_with("real-") => {
            let (kind, floor) = match kind.strip_suffix("-parse") {
                Some(k) => (&k[5..], true),
                None => (&kind[5..], false),
            };
            let wire = workloads::real_traces_of(kind);
            let n = wire.len() as f64;
            time(kind, n, "events", &mut || {
                if floor {
                    std::hint::black_box(workloads::parse_floor(&wire));
                } else {
                    drop(workloads::decode_and_run(&wire));
                }
            });
        }
        "decode" => {
            let wire = workloads::wire(&workloads::fleet());
            let n = wire.len() as f64;
            time("decode", n, "events", &mut || {
                drop(workloads::decode_and_run(&wire))
            });
        }
        name => {
            let name = name.trim_start_matches("reasoning/");
            let Some((_, events, bytes)) = workloads::reasoning()
                .into_iter()
                .find(|(n, _, _)| *n == name)
            else {
                eprintln!("unknown workload `{name}`");
                std::process::exit(2);
            };
            time(name, bytes as f64, "bytes", &mut || {
                drop(workloads::run(events.clone()))
            });
        }
    }
}
