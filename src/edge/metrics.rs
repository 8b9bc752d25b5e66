//! The edge's own Prometheus metrics, on the guard's conventions (`loopguard_` prefix,
//! `_total` counters, seconds; series that alerts read exist from start-up at 0).

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// The answers a check can get (`loopguard_edge_answers_total{answer}`).
pub const ANSWERS: [&str; 6] = ["block", "abort", "steer", "warn", "none", "fail_open"];
pub const FAIL_OPEN_REASONS: [&str; 2] = ["unacknowledged", "deadline"];
pub const ROUTES: [&str; 3] = ["events", "check", "verdicts"];

pub struct EdgeMetrics {
    pub requests: IntCounterVec,
    pub answers: IntCounterVec,
    pub fail_opens: IntCounterVec,
    pub invalid: IntCounterVec,
    pub events: IntCounterVec,
    pub check_seconds: HistogramVec,
}

impl EdgeMetrics {
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> prometheus::Result<IntCounterVec> {
                let c = IntCounterVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(c.clone()))?;
                Ok(c)
            };
        let m = EdgeMetrics {
            requests: counter(
                "loopguard_edge_requests_total",
                "HTTP requests to the edge, by route and status code",
                &["route", "code"],
            )?,
            answers: counter(
                "loopguard_edge_answers_total",
                "Tool-call checks answered, by answer: the verdict's action, none (judged, no verdict) or fail_open",
                &["answer"],
            )?,
            fail_opens: counter(
                "loopguard_edge_fail_open_total",
                "Checks answered allow without the guard: unacknowledged (the broker did not take the call in time) or deadline (the guard did not judge it in time)",
                &["reason"],
            )?,
            invalid: counter(
                "loopguard_edge_invalid_events_total",
                "Events refused with 400 (nothing sent), by the dead-letter reason the guard would give them",
                &["reason"],
            )?,
            events: counter(
                "loopguard_edge_events_published_total",
                "Events the broker acknowledged, through /v1/events and /v1/check",
                &["route"],
            )?,
            check_seconds: {
                let h = HistogramVec::new(
                    HistogramOpts::new(
                        "loopguard_edge_check_seconds",
                        "Time from a check's request to its answer, by answer kind",
                    )
                    .buckets(vec![
                        0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    ]),
                    &["answer"],
                )?;
                registry.register(Box::new(h.clone()))?;
                h
            },
        };
        for a in ANSWERS {
            m.answers.with_label_values(&[a]);
        }
        for r in FAIL_OPEN_REASONS {
            m.fail_opens.with_label_values(&[r]);
        }
        for r in ROUTES {
            m.events.with_label_values(&[r]);
        }
        Ok(m)
    }
}
