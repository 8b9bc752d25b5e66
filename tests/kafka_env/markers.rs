//! Checks of the judged-through markers the guard wrote (docs/contract.md): as a runtime
//! reads the verdicts topic, no verdict ever comes after a marker that covers its event,
//! and the last marker of each partition covers every event of it.

use super::Env;
use std::collections::{BTreeMap, HashMap, HashSet};

/// What the marker check found on one reading of the verdicts topic.
#[derive(Debug, Default)]
pub struct MarkerCheck {
    pub markers: usize,
    pub verdicts: usize,
}

/// True for a marker record: no key, header `loopguard-kind: judged`.
pub fn is_marker(key: &Option<Vec<u8>>, headers: &BTreeMap<String, String>) -> bool {
    key.is_none() && headers.get("loopguard-kind").map(String::as_str) == Some("judged")
}

impl Env {
    /// Reads the events topic (offsets are positions in a partition: the test producers are
    /// not transactional) and the verdicts topic at `isolation`, and checks the markers as a
    /// runtime relies on them: per partition, the first time a verdict id appears, its
    /// event is not covered by any marker read before it; in the end, every event is.
    pub fn check_judged_markers(&self, isolation: &str) -> MarkerCheck {
        let mut offset_of: HashMap<String, (i32, i64)> = HashMap::new();
        let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
        for (p, _, payload, _) in self.read_all(&self.topic("events")) {
            let end = ends.entry(p).or_default();
            if let Some(id) = payload
                .and_then(|v| serde_json::from_slice::<serde_json::Value>(&v).ok())
                .and_then(|v| v["event_id"].as_str().map(str::to_string))
            {
                offset_of.entry(id).or_insert((p, *end));
            }
            *end += 1;
        }
        let mut covered: BTreeMap<i32, i64> = BTreeMap::new();
        let mut seen = HashSet::new();
        let mut check = MarkerCheck::default();
        let mut late = Vec::new();
        for (p, key, payload, headers) in self.read_all_at(&self.topic("verdicts"), isolation) {
            let value: serde_json::Value = serde_json::from_slice(&payload.unwrap()).unwrap();
            if is_marker(&key, &headers) {
                check.markers += 1;
                assert_eq!(value["kind"], "judged", "{value}");
                assert_eq!(
                    value["partition"], p,
                    "a marker speaks for its own partition"
                );
                let through = value["through_offset"].as_i64().unwrap();
                let c = covered.entry(p).or_insert(0);
                *c = (*c).max(through);
                continue;
            }
            check.verdicts += 1;
            if !seen.insert(value["verdict_id"].as_str().unwrap().to_string()) {
                continue; // a re-run's copy: a runtime already has the first
            }
            let event = value["event_id"].as_str().unwrap();
            let (ep, eo) = offset_of[event];
            assert_eq!(ep, p, "a verdict goes to its event's partition");
            if covered.get(&p).is_some_and(|&c| c > eo) {
                late.push(format!(
                    "partition {p}: verdict on offset {eo} after a marker through {}",
                    covered[&p]
                ));
            }
        }
        assert!(
            late.is_empty(),
            "{isolation}: verdicts after their marker:\n{}",
            late.join("\n")
        );
        for (p, end) in ends {
            assert_eq!(
                covered.get(&p).copied(),
                Some(end),
                "{isolation}: partition {p}'s events not all covered"
            );
        }
        check
    }
}
