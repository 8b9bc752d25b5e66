//! Engine throughput on one thread (docs/benchmarks.md): a mixed fleet of tool events in
//! events/s, with and without JSON decoding, streamed reasoning in bytes/s, and the real
//! agent traces decoded and judged against their parse floor.

mod workloads;

/// The allocator the service ships with (`src/main.rs`), so the figures are the service's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode, Throughput};
use std::time::Duration;
use workloads::{decode_and_run, fleet, run, wire};

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

fn tool_events(c: &mut Criterion) {
    let events = fleet();
    let wire = wire(&events);
    let wire_bytes: usize = wire.iter().map(Vec::len).sum();
    eprintln!(
        "fleet: {} events, {:.0} bytes/event on the wire, {} verdicts",
        events.len(),
        wire_bytes as f64 / wire.len() as f64,
        run(events.clone()).1
    );
    let mut g = c.benchmark_group("tool_events");
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Elements(events.len() as u64));
    g.bench_function("handle_event", |b| {
        b.iter_batched(|| events.clone(), run, BatchSize::PerIteration)
    });
    g.bench_function("decode_and_handle_event", |b| {
        b.iter(|| decode_and_run(&wire))
    });
    // The same split by kind, each against its own floor, and the reasoning as streamed.
    for kind in ["reasoning", "tools", "streamed"] {
        let wire = workloads::real_traces_of(kind);
        g.throughput(Throughput::Elements(wire.len() as u64));
        g.bench_function(format!("{kind}/parse_floor"), |b| {
            b.iter(|| workloads::parse_floor(&wire))
        });
        g.bench_function(format!("{kind}/decode_and_handle_event"), |b| {
            b.iter(|| decode_and_run(&wire))
        });
    }
    g.finish();
}

fn reasoning(c: &mut Criterion) {
    let mut g = c.benchmark_group("reasoning");
    g.sampling_mode(SamplingMode::Flat);
    for (name, events, bytes) in workloads::reasoning() {
        eprintln!(
            "{name}: {} events, {bytes} bytes, {} verdicts",
            events.len(),
            run(events.clone()).1
        );
        g.throughput(Throughput::Bytes(bytes));
        g.bench_function(name, |b| {
            b.iter_batched(|| events.clone(), run, BatchSize::PerIteration)
        });
    }
    g.finish();
}

fn real_traces(c: &mut Criterion) {
    let wire = workloads::real_traces();
    let mut g = c.benchmark_group("real_traces");
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Elements(wire.len() as u64));
    g.bench_function("parse_floor", |b| b.iter(|| workloads::parse_floor(&wire)));
    g.bench_function("decode_and_handle_event", |b| {
        b.iter(|| decode_and_run(&wire))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = tool_events, reasoning, real_traces
}
criterion_main!(benches);
