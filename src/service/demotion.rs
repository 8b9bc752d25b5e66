//! Automatic demotion (issue 32): each instance keeps, per rule, tenant and agent, the
//! latest judgements of the verdicts its partitions wrote (`policy.demotion.window`); when
//! at least `min_judgements` of them say a rule is right less often than
//! `policy.demotion.below`, a thread of its own publishes a new policy version with that
//! rule in observe mode for that tenant and agent. Every instance then applies it like any
//! published version: versioned, in `policy history`, replayed exactly. Promotion back is
//! left to a person. A judgement is a verdict's first: the engine counts a verdict judged
//! again as `repeat` or `changed` (`Spent::FeedbackUnmatched`), which no window sees
//! (docs/decisions.md (gr)).

use crate::engine::policy::{DemotionPolicy, Mode};
use crate::engine::spend::Spent;
use crate::engine::verdict::Rule;
use crate::engine::Spending;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A rule, tenant and agent whose verdicts were judged.
pub type Who = (Rule, Option<String>, Option<String>);

/// A demotion asked for: who, and the precision that asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Demote {
    pub who: Who,
    pub useful: u32,
    pub judged: u32,
}

/// How long a demotion asked for is not asked again (the version may not be in force yet,
/// or another instance's publication may have overtaken it).
const ASK_AGAIN: Duration = Duration::from_secs(60);

/// The judgements an instance has seen, and the demotions it asked for.
#[derive(Default)]
pub struct Demotions {
    windows: Mutex<HashMap<Who, VecDeque<bool>>>,
    asked: Mutex<HashMap<Who, Instant>>,
    to_publisher: Mutex<Option<Sender<Demote>>>,
}

impl Demotions {
    /// Judgements go to `tx` once they ask for a demotion (the publisher thread).
    pub fn publish_to(&self, tx: Sender<Demote>) {
        *self.to_publisher.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    }

    /// No more demotions: the publisher thread ends once it has published what it holds.
    pub fn stop_publishing(&self) {
        self.to_publisher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// One event's spending: a judgement is added to its window, and a demotion it asks
    /// for is handed to the publisher (never waited for).
    pub fn on_spending(&self, s: &Spending, policy: &DemotionPolicy) {
        let Spent::Feedback { rule, useful } = s.spent else {
            return;
        };
        if policy.is_off() {
            return;
        }
        let who = (rule, s.tenant.clone(), s.agent.clone());
        let Some(d) = self.judged(who, useful, policy) else {
            return;
        };
        let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        if asked.get(&d.who).is_some_and(|at| at.elapsed() < ASK_AGAIN) {
            return;
        }
        asked.insert(d.who.clone(), Instant::now());
        if let Some(tx) = self
            .to_publisher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let _ = tx.send(d);
        }
    }

    /// Adds a judgement; the demotion its window asks for, if any.
    fn judged(&self, who: Who, useful: bool, policy: &DemotionPolicy) -> Option<Demote> {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let w = windows.entry(who.clone()).or_default();
        w.push_back(useful);
        while w.len() > policy.window as usize {
            w.pop_front();
        }
        let judged = w.len() as u32;
        let useful = w.iter().filter(|u| **u).count() as u32;
        let low = f64::from(useful) < policy.below * f64::from(judged);
        (judged >= policy.min_judgements && low).then_some(Demote {
            who,
            useful,
            judged,
        })
    }
}

/// Stops the publisher when dropped (`Demotions::stop_publishing`).
pub struct StopOnDrop<'a>(pub &'a Demotions);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop_publishing();
    }
}

/// `raw` (a policy table) with `d`'s rule in observe mode for its tenant and agent: an
/// override appended (the fleet's own `rules` when the sessions name neither).
pub fn demoted(raw: &Value, d: &Demote) -> Value {
    let (rule, tenant, agent) = &d.who;
    let entry = json!({ "rule": rule.as_str(), "mode": "observe" });
    let mut raw = match raw {
        Value::Object(_) => raw.clone(),
        _ => json!({}),
    };
    let o = raw.as_object_mut().expect("an object");
    if tenant.is_none() && agent.is_none() {
        let rules = o.entry("rules").or_insert_with(|| json!([]));
        if let Value::Array(a) = rules {
            a.push(entry);
        }
        return raw;
    }
    let mut over = json!({ "set": { "rules": [entry] } });
    if let Some(t) = tenant {
        over["tenant"] = t.clone().into();
    }
    if let Some(a) = agent {
        over["agent"] = a.clone().into();
    }
    let overrides = o.entry("overrides").or_insert_with(|| json!([]));
    if let Value::Array(a) = overrides {
        a.push(over);
    }
    raw
}

/// The publisher thread: each demotion asked for becomes a policy version on the policy
/// topic, unless the latest version already has the rule below enforce for them. Runs
/// until every sender is gone.
pub fn run_publisher(
    cfg: &crate::config::Config,
    feed: &crate::service::policy_feed::PolicyFeed,
    metrics: &crate::service::metrics::Metrics,
    rx: Receiver<Demote>,
) {
    use crate::service::kafka::publish::deliver_one;
    use crate::service::policy_feed::{LivePolicy, Published, POLICY_RECORD_KEY};
    for d in rx {
        let latest = feed
            .latest()
            .unwrap_or_else(|| std::sync::Arc::new(LivePolicy::from_config(cfg)));
        let (rule, tenant, agent) = &d.who;
        let mut set = latest.set.clone();
        if set.mode_of(tenant.as_deref(), agent.as_deref(), *rule).0 != Mode::Enforce {
            continue;
        }
        let raw = demoted(&latest.raw, &d);
        let compiled = match crate::engine::policy::PolicySet::compile(&raw) {
            Ok(c) => c,
            Err(problems) => {
                tracing::error!(problems = %problems.join("; "), "demotion: the demoted policy is not valid; not published");
                continue;
            }
        };
        let record = Published {
            version: Some(compiled.version().to_string()),
            policy: raw,
        };
        let payload = serde_json::to_vec(&record).unwrap_or_default();
        match deliver_one(
            cfg,
            &cfg.kafka.policy_topic,
            POLICY_RECORD_KEY,
            &payload,
            Some(0),
        ) {
            Ok((_, offset)) => {
                metrics
                    .rule_demotions
                    .with_label_values(&[rule.as_str()])
                    .inc();
                tracing::warn!(
                    rule = rule.as_str(),
                    tenant = tenant.as_deref().unwrap_or("-"),
                    agent = agent.as_deref().unwrap_or("-"),
                    useful = d.useful,
                    judged = d.judged,
                    version = %compiled.version(),
                    offset,
                    "rule demoted to observe: its verdicts were judged useful {} of {} times; published a policy version (promote it back with `loopguard policy publish`)",
                    d.useful,
                    d.judged
                );
            }
            Err(_) => {
                tracing::error!(rule = rule.as_str(), "demotion: the policy version was not published; asked again after the next judgement in a minute");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(below: f64, min: u32, window: u32) -> DemotionPolicy {
        DemotionPolicy {
            below,
            min_judgements: min,
            window,
        }
    }

    fn who() -> Who {
        (Rule::FuzzyRepeat, Some("acme".into()), Some("coder".into()))
    }

    #[test]
    fn a_window_asks_once_it_holds_enough_judgements_below_the_bar() {
        let d = Demotions::default();
        let p = policy(0.5, 4, 6);
        // Three wrong: too few to say.
        for _ in 0..3 {
            assert_eq!(d.judged(who(), false, &p), None);
        }
        // A fourth, one right: 1 of 4 useful, under half.
        let asked = d.judged(who(), true, &p).unwrap();
        assert_eq!((asked.useful, asked.judged), (1, 4));
        // Right ones push the wrong ones out of the window: 4 of 6 useful, no demotion.
        for _ in 0..4 {
            d.judged(who(), true, &p);
        }
        assert_eq!(d.judged(who(), true, &p), None);
    }

    #[test]
    fn the_demoted_policy_observes_the_rule_for_them_only() {
        let raw = json!({ "tool": { "window": 8 }, "overrides": [{ "tenant": "beta", "set": { "mode": "observe" } }] });
        let d = Demote {
            who: who(),
            useful: 1,
            judged: 10,
        };
        let out = demoted(&raw, &d);
        let mut set = crate::engine::policy::PolicySet::compile(&out).unwrap();
        assert_eq!(
            set.mode_of(Some("acme"), Some("coder"), Rule::FuzzyRepeat)
                .0,
            Mode::Observe
        );
        assert_eq!(
            set.mode_of(Some("acme"), Some("other"), Rule::FuzzyRepeat)
                .0,
            Mode::Enforce
        );
        assert_eq!(
            set.mode_of(Some("acme"), Some("coder"), Rule::ExactRepeat)
                .0,
            Mode::Enforce
        );
        assert_eq!(set.global().tool.window, 8, "the rest of the policy kept");
        // Sessions naming no tenant nor agent: the fleet's own rules.
        let fleet = demoted(
            &json!({}),
            &Demote {
                who: (Rule::FuzzyRepeat, None, None),
                ..d
            },
        );
        let mut set = crate::engine::policy::PolicySet::compile(&fleet).unwrap();
        assert_eq!(set.mode_of(None, None, Rule::FuzzyRepeat).0, Mode::Observe);
    }
}
