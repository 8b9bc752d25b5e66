//! Where each policy version took effect on a partition: a record in the partition's state
//! topic partition, written in the same transaction as the checkpoint taken at the switch
//! and as the verdicts and offsets of the events judged under it. Keyed by the offset it
//! applies from, so the state topic keeps every switch (compaction keeps one record per
//! switch) and a restore, a re-run and `loopguard replay` apply each version at the same
//! offset.

use crate::engine::policy::PolicySet;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Start of every policy record's key; not valid UTF-8, so never a session id.
pub const POLICY_KEY_PREFIX: &[u8] = b"\xffloopguard-policy@";

/// One switch: from events offset `from_offset` on, the partition is judged by `policy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyChange {
    /// The first events offset judged by this policy (the checkpoint written with it).
    pub from_offset: i64,
    /// The policy topic offset it was published at (-1: the instance's configuration).
    pub seq: i64,
    /// Its version, as verdicts carry it.
    pub version: String,
    /// The policy table as published (what `PolicySet::compile` reads).
    pub policy: Value,
}

impl PolicyChange {
    pub fn key(&self) -> Vec<u8> {
        let mut key = POLICY_KEY_PREFIX.to_vec();
        key.extend_from_slice(format!("{:020}", self.from_offset).as_bytes());
        key
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The policy set it names; `Err` with every problem when this build cannot compile it.
    pub fn compile(&self) -> Result<PolicySet, Vec<String>> {
        PolicySet::compile(&self.policy)
    }
}

pub fn is_policy_key(key: &[u8]) -> bool {
    key.starts_with(POLICY_KEY_PREFIX)
}

/// Keeps the change that applies last (the largest `from_offset`; on a tie the later seq).
pub fn keep_latest(slot: &mut Option<PolicyChange>, payload: Option<&[u8]>) {
    let Some(change) = payload.and_then(|p| serde_json::from_slice::<PolicyChange>(p).ok()) else {
        return;
    };
    let newer = slot
        .as_ref()
        .is_none_or(|c| (change.from_offset, change.seq) >= (c.from_offset, c.seq));
    if newer {
        *slot = Some(change);
    }
}

/// The policy in force for a partition's events: the last recorded change at or before
/// each offset. Used by `loopguard replay --policy-changes` and the tests.
#[derive(Debug, Clone, Default)]
pub struct PolicyTimeline {
    /// Sorted by `from_offset`.
    changes: Vec<(i64, PolicySet)>,
}

impl PolicyTimeline {
    /// From recorded changes (any order); a change this build cannot compile is an error
    /// naming its offset and the key at fault.
    pub fn new(mut changes: Vec<PolicyChange>) -> Result<Self, String> {
        changes.sort_by_key(|c| (c.from_offset, c.seq));
        let mut out = Vec::new();
        for c in changes {
            let set = c.compile().map_err(|problems| {
                format!(
                    "policy change from offset {}: {}",
                    c.from_offset,
                    problems.join("; ")
                )
            })?;
            out.push((c.from_offset, set));
        }
        Ok(PolicyTimeline { changes: out })
    }

    /// Reads one change per line (JSON, as the state topic stores them).
    pub fn read(text: &str) -> Result<Self, String> {
        let mut changes = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let c: PolicyChange = serde_json::from_str(line)
                .map_err(|e| format!("policy changes line {}: {e}", i + 1))?;
            changes.push(c);
        }
        PolicyTimeline::new(changes)
    }

    /// The policy that takes effect exactly at `offset`, if a change starts there; several
    /// at one offset: the last.
    pub fn at(&self, offset: i64) -> Option<&PolicySet> {
        self.changes
            .iter()
            .rev()
            .find(|(from, _)| *from == offset)
            .map(|(_, s)| s)
    }

    /// The policy in force at `offset`: the last change at or before it.
    pub fn in_force(&self, offset: i64) -> Option<&PolicySet> {
        self.changes
            .iter()
            .rev()
            .find(|(from, _)| *from <= offset)
            .map(|(_, s)| s)
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn change(from_offset: i64, seq: i64, window: usize) -> PolicyChange {
        let policy = json!({"tool": {"window": window}});
        PolicyChange {
            from_offset,
            seq,
            version: PolicySet::compile(&policy).unwrap().version().into(),
            policy,
        }
    }

    #[test]
    fn keys_sort_by_offset_and_are_never_session_ids() {
        let (a, b) = (change(9, 1, 7).key(), change(10, 2, 8).key());
        assert!(a < b && is_policy_key(&a) && std::str::from_utf8(&a).is_err());
    }

    #[test]
    fn the_latest_change_wins_whatever_the_read_order() {
        let mut slot = None;
        for c in [change(10, 2, 8), change(3, 1, 7)] {
            keep_latest(&mut slot, Some(&c.to_json()));
        }
        keep_latest(&mut slot, Some(b"not json"));
        assert_eq!(slot.unwrap().from_offset, 10);
    }

    #[test]
    fn the_timeline_gives_the_policy_in_force_at_each_offset() {
        let text: String = [change(5, 1, 7), change(0, -1, 6)]
            .iter()
            .map(|c| format!("{}\n", String::from_utf8(c.to_json()).unwrap()))
            .collect();
        let t = PolicyTimeline::read(&text).unwrap();
        assert_eq!(t.in_force(3).unwrap().global().tool.window, 6);
        assert_eq!(t.in_force(5).unwrap().global().tool.window, 7);
        assert!(t.at(4).is_none());
        assert_eq!(t.at(5).unwrap().global().tool.window, 7);
        let bad = PolicyTimeline::read("{\"from_offset\":1,\"seq\":1,\"version\":\"x\",\"policy\":{\"tool\":{\"window\":\"w\"}}}\n")
            .unwrap_err();
        assert!(
            bad.contains("offset 1") && bad.contains("policy.tool.window"),
            "{bad}"
        );
    }
}
