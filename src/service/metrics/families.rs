//! Making a metric family and registering it in one step, for the service's families.

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts, Registry};

/// A counter without labels.
pub fn plain_counter(reg: &Registry, name: &str, help: &str) -> prometheus::Result<IntCounter> {
    let c = IntCounter::new(name, help)?;
    reg.register(Box::new(c.clone()))?;
    Ok(c)
}

/// A counter with `labels`.
pub fn counter(
    reg: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntCounterVec> {
    let c = IntCounterVec::new(Opts::new(name, help), labels)?;
    reg.register(Box::new(c.clone()))?;
    Ok(c)
}

/// A histogram with `buckets`.
pub fn histogram(
    reg: &Registry,
    name: &str,
    help: &str,
    buckets: Vec<f64>,
) -> prometheus::Result<Histogram> {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))?;
    reg.register(Box::new(h.clone()))?;
    Ok(h)
}
