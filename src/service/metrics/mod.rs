//! Prometheus families of the service, registered once on a registry handed down from
//! `main` (no globals). Names follow Prometheus conventions; no unbounded labels.

pub mod families;
pub mod loop_cost;

use crate::config::MetricsConfig;
use crate::engine::event::EVENT_TYPES;
use crate::engine::verdict::{Rule, Verdict};
use crate::engine::Spending;
use families::{counter, histogram, plain_counter};
use loop_cost::LoopCostMetrics;
use prometheus::{
    Encoder, Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// Every metric the service exports (listed with their meaning in docs/metrics.md).
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub events_consumed: IntCounterVec,
    /// `events_consumed` of each of `EVENT_TYPES`, then `unknown`: counted per event
    /// without the label lookup.
    consumed_by_type: Vec<IntCounter>,
    pub events_malformed: IntCounterVec,
    pub dead_letter: IntCounterVec,
    pub verdicts: IntCounterVec,
    loops: IntCounterVec,
    pub escalations_given_up: IntCounter,
    pub judged_markers: IntCounter,
    pub judged_marker_bytes: IntCounter,
    pub active_sessions: IntGauge,
    pub session_evictions: IntCounterVec,
    pub event_to_verdict: Histogram,
    pub event_processing: Histogram,
    pub consumer_lag: IntGaugeVec,
    pub assigned_partitions: IntGauge,
    pub rebalances: IntCounterVec,
    pub state_restore: Histogram,
    pub replayed_events: IntCounter,
    pub state_too_large: IntCounter,
    pub records_given_up: IntCounter,
    pub events_ahead_of_clock: IntCounter,
    pub transactions: IntCounterVec,
    pub ready: IntGauge,
    /// 1 for each resource and operation the broker refuses this guard (the start-up
    /// check, `access`); 0 once granted.
    /// Policy versions this instance published to demote a rule (`service::demotion`).
    pub rule_demotions: IntCounterVec,
    pub access_denied: IntGaugeVec,
    /// What loops cost (`loop_metrics`).
    pub loop_cost: LoopCostMetrics,
    /// Published policy versions, by outcome (applied, refused).
    pub policy_updates: IntCounterVec,
    /// 1 for the version this instance's threads apply; the series of the previous one is
    /// removed (one series at a time).
    policy_info: IntGaugeVec,
    labels: LabelPolicy,
}

#[derive(Clone)]
pub(crate) struct LabelPolicy {
    tenant: Option<Vec<String>>,
    model: Option<Vec<String>>,
    /// The loop-cost families only.
    agent: Option<Vec<String>>,
}

impl LabelPolicy {
    /// The tenant, model and agent label values (as configured) of a spending.
    fn values(&self, s: &Spending) -> Vec<String> {
        let mut out = Vec::new();
        out.extend(LabelPolicy::capped(&self.tenant, s.tenant.as_deref()));
        out.extend(LabelPolicy::capped(&self.model, s.model.as_deref()));
        out.extend(LabelPolicy::capped(&self.agent, s.agent.as_deref()));
        out
    }

    fn capped(allow: &Option<Vec<String>>, value: Option<&str>) -> Option<String> {
        allow.as_ref().map(|list| match value {
            Some(v) if list.iter().any(|a| a == v) => v.to_string(),
            Some(_) => "other".to_string(),
            None => "none".to_string(),
        })
    }
}

/// The `mode` label's values: a verdict is written enforced or observed (an `off` rule
/// writes nothing).
pub const VERDICT_MODES: [&str; 2] = ["enforce", "observe"];

fn verdict_mode(v: &Verdict) -> &'static str {
    if v.enforce {
        "enforce"
    } else {
        "observe"
    }
}

impl Metrics {
    pub fn new(registry: Registry, cfg: &MetricsConfig) -> prometheus::Result<Metrics> {
        let r = &registry;
        let build = IntGaugeVec::new(
            Opts::new("loopguard_build_info", "Build information; always 1."),
            &["version"],
        )?;
        r.register(Box::new(build.clone()))?;
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        let labels = LabelPolicy {
            tenant: cfg.tenant_label.then(|| cfg.tenant_allow_list.clone()),
            model: cfg.model_label.then(|| cfg.model_allow_list.clone()),
            agent: cfg.agent_label.then(|| cfg.agent_allow_list.clone()),
        };
        let mut who = Vec::new();
        if labels.tenant.is_some() {
            who.push("tenant");
        }
        if labels.model.is_some() {
            who.push("model");
        }
        let loop_labels: Vec<&str> = ["rule", "mode"]
            .into_iter()
            .chain(who.iter().copied())
            .collect();
        if labels.agent.is_some() {
            who.push("agent");
        }
        let loop_cost = LoopCostMetrics::new(r, &who, {
            let labels = labels.clone();
            std::sync::Arc::new(move |s: &Spending| labels.values(s))
        })?;
        if who.is_empty() {
            loop_cost.init_unlabelled();
        }
        let gauge = |name: &str, help: &str| -> prometheus::Result<IntGauge> {
            let g = IntGauge::new(name, help)?;
            r.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let lag = IntGaugeVec::new(
            Opts::new(
                "loopguard_consumer_lag_messages",
                "Messages behind the end of each owned events partition.",
            ),
            &["partition"],
        )?;
        r.register(Box::new(lag.clone()))?;
        let mut m = Metrics {
            events_consumed: counter(r, "loopguard_events_consumed_total", "Events consumed, by event type.", &["type"])?,
            consumed_by_type: Vec::new(),
            events_malformed: counter(r, "loopguard_events_malformed_total", "Events that could not be read, by reason.", &["reason"])?,
            dead_letter: counter(r, "loopguard_dead_letter_total", "Events written to the dead-letter topic, by reason.", &["reason"])?,
            verdicts: counter(r, "loopguard_verdicts_total", "Verdicts emitted, by rule, action and mode (enforce, or observe: written with enforce false, never acted on).", &["rule", "action", "mode"])?,
            loops: counter(r, "loopguard_loops_detected_total", "Loops detected (every verdict except budget signals and required-tool retries), by rule and mode.", &loop_labels)?,
            escalations_given_up: plain_counter(r, "loopguard_escalations_given_up_total", "Responses the guard gave up on after max_retries interventions.")?,
            judged_markers: plain_counter(r, "loopguard_judged_markers_total", "Judged-through markers written to the verdicts topic (docs/contract.md).")?,
            judged_marker_bytes: plain_counter(r, "loopguard_judged_marker_bytes_total", "Bytes of judged-through marker values written.")?,
            active_sessions: gauge("loopguard_active_sessions", "Sessions held in memory by this instance.")?,
            session_evictions: counter(r, "loopguard_session_evictions_total", "Sessions forgotten, by reason (ttl, capacity, session_end).", &["reason"])?,
            event_to_verdict: histogram(
                r,
                "loopguard_event_to_verdict_latency_seconds",
                "From an event's own timestamp to its verdict being written.",
                vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0],
            )?,
            event_processing: histogram(
                r,
                "loopguard_event_processing_seconds",
                "Engine time per event.",
                vec![0.000_001, 0.000_005, 0.000_01, 0.000_05, 0.000_1, 0.000_5, 0.001, 0.005, 0.01],
            )?,
            consumer_lag: lag,
            assigned_partitions: gauge("loopguard_assigned_partitions", "Events partitions owned by this instance.")?,
            rebalances: counter(r, "loopguard_rebalances_total", "Partition assignments and revocations.", &["kind"])?,
            state_restore: histogram(
                r,
                "loopguard_state_restore_seconds",
                "Time to restore a gained partition's sessions from the state topic.",
                vec![0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0],
            )?,
            replayed_events: {
                let c = IntCounter::new("loopguard_restore_replayed_events_total", "Events re-run (verdicts dropped) to bring restored partitions from their checkpoint to the committed offset.")?;
                r.register(Box::new(c.clone()))?;
                c
            },
            events_ahead_of_clock: {
                let c = IntCounter::new("loopguard_events_ahead_of_clock_total", "Events stamped more than 5 minutes ahead of the guard's clock (a runtime's clock is off).")?;
                r.register(Box::new(c.clone()))?;
                c
            },
            state_too_large: {
                let c = IntCounter::new("loopguard_state_too_large_total", "Session states too large for a state record, written as tombstones (the next owner starts those sessions afresh).")?;
                r.register(Box::new(c.clone()))?;
                c
            },
            records_given_up: {
                let c = IntCounter::new("loopguard_records_given_up_total", "Records given up after max_record_retries failed retries at their offset: written to the dead-letter topic minimally (reason retry_limit) and passed.")?;
                r.register(Box::new(c.clone()))?;
                c
            },
            transactions: counter(r, "loopguard_transactions_total", "Batch commits, by outcome (commit, abort).", &["outcome"])?,
            ready: gauge("loopguard_ready", "1 when every assigned partition is restored and processing.")?,
            rule_demotions: counter(
                r,
                "loopguard_rule_demotions_total",
                "Policy versions this instance published putting a rule in observe mode for a tenant and agent, its verdicts judged wrong too often (policy.demotion, issue 32).",
                &["rule"],
            )?,
            access_denied: {
                let g = IntGaugeVec::new(Opts::new("loopguard_kafka_access_denied", "1 for each resource and operation the broker refuses this guard's principal (checked at start until granted)."), &["resource", "operation"])?;
                r.register(Box::new(g.clone()))?;
                g
            },
            loop_cost,
            policy_updates: counter(r, "loopguard_policy_updates_total", "Policy versions read from the policy topic, by outcome: applied, or refused whole (invalid; the version in force stays).", &["outcome"])?,
            policy_info: {
                let g = IntGaugeVec::new(Opts::new("loopguard_policy_info", "1 for the policy version in force on this instance (the latest valid one published, else the configuration's)."), &["version"])?;
                r.register(Box::new(g.clone()))?;
                g
            },
            registry,
            labels,
        };
        // Every series a dashboard or alert reads exists from the start (at 0).
        m.consumed_by_type = EVENT_TYPES
            .iter()
            .chain(["unknown"].iter())
            .map(|t| m.events_consumed.with_label_values(&[t]))
            .collect();
        for reason in crate::engine::event::DecodeError::REASONS {
            m.events_malformed.with_label_values(&[reason]);
            m.dead_letter.with_label_values(&[reason]);
        }
        m.dead_letter.with_label_values(&["retry_limit"]);
        for rule in Rule::ALL {
            for mode in VERDICT_MODES {
                for action in crate::engine::verdict::Action::ALL {
                    m.verdicts
                        .with_label_values(&[rule.as_str(), action.as_str(), mode]);
                }
                if m.labels.tenant.is_none() && m.labels.model.is_none() {
                    m.loops.with_label_values(&[rule.as_str(), mode]);
                }
            }
        }
        for outcome in ["applied", "refused"] {
            m.policy_updates.with_label_values(&[outcome]);
        }
        for outcome in ["commit", "abort"] {
            m.transactions.with_label_values(&[outcome]);
        }
        for kind in ["assign", "revoke"] {
            m.rebalances.with_label_values(&[kind]);
        }
        for reason in ["ttl", "capacity", "session_end"] {
            m.session_evictions.with_label_values(&[reason]);
        }
        Ok(m)
    }

    /// One event of type `kind` consumed (`unknown` when not one of `EVENT_TYPES`).
    pub fn on_consumed(&self, kind: &str) {
        let i = EVENT_TYPES
            .iter()
            .position(|t| *t == kind)
            .unwrap_or(EVENT_TYPES.len());
        self.consumed_by_type[i].inc();
    }

    /// Counts one emitted verdict, by its mode.
    pub fn on_verdict(&self, v: &Verdict) {
        let mode = verdict_mode(v);
        self.verdicts
            .with_label_values(&[v.rule.as_str(), v.action.as_str(), mode])
            .inc();
        // Budget signals and the required-tool expectation are not loops.
        if !v.rule.is_loop() {
            return;
        }
        let mut values = vec![v.rule.as_str().to_string(), mode.to_string()];
        if let Some(t) = LabelPolicy::capped(&self.labels.tenant, v.tenant.as_deref()) {
            values.push(t);
        }
        if let Some(m) = LabelPolicy::capped(&self.labels.model, v.model.as_deref()) {
            values.push(m);
        }
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        self.loops.with_label_values(&refs).inc();
    }

    /// The version in force on this instance is `version` (the series of the previous one
    /// goes).
    pub fn set_policy_version(&self, version: &str) {
        self.policy_info.reset();
        self.policy_info.with_label_values(&[version]).set(1);
    }

    /// A published version was applied.
    pub fn on_policy_applied(&self, version: &str) {
        self.policy_updates.with_label_values(&["applied"]).inc();
        self.set_policy_version(version);
    }

    /// The text exposition of every family.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}
