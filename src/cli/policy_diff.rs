//! `loopguard policy diff OLD NEW --events FILE`: both policies replayed over the same
//! recorded events through the same engine; per rule, the verdicts the new policy adds,
//! removes, and changes (action or mode), with sample sessions. Pure: no IO but the reader.

use crate::engine::policy::PolicySet;
use crate::engine::verdict::{Rule, Verdict};
use crate::engine::{Engine, Limits};
use crate::replay::{self, ReplayError};
use std::collections::{BTreeMap, BTreeSet};

/// What changed for one rule.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RuleDiff {
    pub added: usize,
    pub removed: usize,
    /// Same verdict (session, event, rule, attempt), another action or mode: by
    /// `"old -> new"` (e.g. `block -> warn`, `enforce -> observe`).
    pub changed: BTreeMap<String, usize>,
    pub unchanged: usize,
    /// Up to `SAMPLES` sessions each, sorted.
    pub added_in: BTreeSet<String>,
    pub removed_in: BTreeSet<String>,
    pub changed_in: BTreeSet<String>,
}

/// Sample sessions kept per rule and kind of change.
pub const SAMPLES: usize = 3;

/// The effect of going from one policy to another on recorded traffic.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PolicyDiff {
    pub old_version: String,
    pub new_version: String,
    pub events: usize,
    pub rules: BTreeMap<Rule, RuleDiff>,
}

fn verdicts(policy: &PolicySet, events: &[u8]) -> Result<(Vec<Verdict>, usize), ReplayError> {
    let mut engine = Engine::new(policy.clone(), Limits::default());
    let mut out = Vec::new();
    let opts = replay::Options::default();
    let summary = replay::run(&mut engine, events, &mut out, opts, |_| {})?;
    let list = out
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).map_err(std::io::Error::from))
        .collect::<Result<_, _>>()?;
    Ok((list, summary.events))
}

fn sample(set: &mut BTreeSet<String>, session: &str) {
    if set.len() < SAMPLES {
        set.insert(session.to_string());
    }
}

fn mode(v: &Verdict) -> &'static str {
    if v.enforce {
        "enforce"
    } else {
        "observe"
    }
}

/// Replays `events` (JSON lines) under `old` and `new` and compares, verdict by verdict id.
pub fn diff(old: &PolicySet, new: &PolicySet, events: &[u8]) -> Result<PolicyDiff, ReplayError> {
    let (before, n) = verdicts(old, events)?;
    let (after, _) = verdicts(new, events)?;
    let mut result = PolicyDiff {
        old_version: old.version().to_string(),
        new_version: new.version().to_string(),
        events: n,
        rules: BTreeMap::new(),
    };
    let by_id = |list: &[Verdict]| -> BTreeMap<String, Verdict> {
        list.iter()
            .map(|v| (v.verdict_id.clone(), v.clone()))
            .collect()
    };
    let (before, after) = (by_id(&before), by_id(&after));
    for (id, old_v) in &before {
        let entry = result.rules.entry(old_v.rule).or_default();
        match after.get(id) {
            None => {
                entry.removed += 1;
                sample(&mut entry.removed_in, &old_v.session_id);
            }
            Some(new_v) if (new_v.action, new_v.enforce) != (old_v.action, old_v.enforce) => {
                let mut what = Vec::new();
                if new_v.action != old_v.action {
                    what.push(format!(
                        "{} -> {}",
                        old_v.action.as_str(),
                        new_v.action.as_str()
                    ));
                }
                if new_v.enforce != old_v.enforce {
                    what.push(format!("{} -> {}", mode(old_v), mode(new_v)));
                }
                *entry.changed.entry(what.join(", ")).or_default() += 1;
                sample(&mut entry.changed_in, &old_v.session_id);
            }
            Some(_) => entry.unchanged += 1,
        }
    }
    for (id, new_v) in &after {
        if !before.contains_key(id) {
            let entry = result.rules.entry(new_v.rule).or_default();
            entry.added += 1;
            sample(&mut entry.added_in, &new_v.session_id);
        }
    }
    Ok(result)
}

impl PolicyDiff {
    /// True when the new policy says exactly what the old one said.
    pub fn is_empty(&self) -> bool {
        self.rules
            .values()
            .all(|r| r.added == 0 && r.removed == 0 && r.changed.is_empty())
    }

    /// The report for a terminal: one block per rule that changes.
    pub fn render(&self) -> String {
        let mut s = format!(
            "policy diff over {} events: {} -> {}\n",
            self.events, self.old_version, self.new_version
        );
        let list = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>().join(", ");
        for (rule, d) in &self.rules {
            if d.added == 0 && d.removed == 0 && d.changed.is_empty() {
                continue;
            }
            s.push_str(&format!(
                "\n{}: {} added, {} removed, {} changed, {} unchanged\n",
                rule.as_str(),
                d.added,
                d.removed,
                d.changed.values().sum::<usize>(),
                d.unchanged
            ));
            if d.added > 0 {
                s.push_str(&format!("  added in:   {}\n", list(&d.added_in)));
            }
            if d.removed > 0 {
                s.push_str(&format!("  removed in: {}\n", list(&d.removed_in)));
            }
            for (what, n) in &d.changed {
                s.push_str(&format!("  changed {what}: {n}\n"));
            }
            if !d.changed.is_empty() {
                s.push_str(&format!("  changed in: {}\n", list(&d.changed_in)));
            }
        }
        if self.is_empty() {
            s.push_str("no verdict changes\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fleet() -> Vec<u8> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        std::fs::read(root.join("examples/fleet.events.jsonl")).unwrap()
    }

    #[test]
    fn the_same_policy_changes_nothing() {
        let p = PolicySet::default();
        let d = diff(&p, &p, &fleet()).unwrap();
        assert!(d.is_empty(), "{}", d.render());
        assert_eq!(d.rules.values().map(|r| r.unchanged).sum::<usize>(), 10);
        assert!(d.render().ends_with("no verdict changes\n"));
    }

    #[test]
    fn each_kind_of_change_is_counted_per_rule_with_sample_sessions() {
        let old = PolicySet::default();
        let new = PolicySet::compile(&json!({
            "rules": [
                {"rule": "tool.exact_repeat", "mode": "observe"},
                {"rule": "content.repeat", "mode": "off"},
                {"rule": "reasoning.block_repeat", "action": "warn"}
            ]
        }))
        .unwrap();
        let d = diff(&old, &new, &fleet()).unwrap();
        let exact = &d.rules[&Rule::ExactRepeat];
        assert_eq!(exact.changed["enforce -> observe"], 2);
        assert_eq!(exact.changed_in.iter().collect::<Vec<_>>(), ["loop-tools"]);
        let content = &d.rules[&Rule::ContentRepeat];
        assert_eq!((content.removed, content.added), (2, 0));
        assert_eq!(
            content.removed_in.iter().collect::<Vec<_>>(),
            ["loop-chant"]
        );
        assert_eq!(d.rules[&Rule::BlockRepeat].changed["steer -> warn"], 2);
        assert_eq!(d.rules[&Rule::RequiredTool].unchanged, 3);
        // The way back adds what the way there removed.
        let back = diff(&new, &old, &fleet()).unwrap();
        assert_eq!(back.rules[&Rule::ContentRepeat].added, 2);
        let text = d.render();
        assert!(
            text.contains("content.repeat: 0 added, 2 removed, 0 changed, 0 unchanged"),
            "{text}"
        );
        assert!(text.contains("changed enforce -> observe: 2"), "{text}");
    }

    #[test]
    fn a_lower_threshold_adds_verdicts() {
        let new = PolicySet::compile(&json!({"tool": {"repeat_threshold": 2}})).unwrap();
        let d = diff(&PolicySet::default(), &new, &fleet()).unwrap();
        let exact = &d.rules[&Rule::ExactRepeat];
        assert!(exact.added > 0, "{}", d.render());
        assert!(!exact.added_in.is_empty() && exact.added_in.len() <= SAMPLES);
    }
}
