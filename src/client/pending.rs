//! The tool calls waiting for their answer, and how each is settled: at once by an enforced
//! block or abort on its event; otherwise by the first judged-through marker past its offset,
//! with the strongest enforced warn or steer seen on it before that marker, or none.
//!
//! Pure bookkeeping (no IO): the reader thread feeds it records, `Guard::check` registers
//! and delivers calls.

use super::verdict::Verdict;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::oneshot;

/// How a pending call was settled.
#[derive(Debug, Clone)]
pub enum Settled {
    /// The guard's verdict on the call (enforced).
    Verdict(Arc<Verdict>),
    /// The guard judged the call and had nothing to say.
    Judged,
}

struct Call {
    answer: oneshot::Sender<Settled>,
    /// Where the event landed, once its delivery report came.
    at: Option<(i32, i64)>,
    /// The strongest enforced warn or steer on the call so far.
    held: Option<Arc<Verdict>>,
}

#[derive(Default)]
pub struct Pending {
    calls: HashMap<String, Call>,
    /// Delivered calls by partition and offset: a marker settles a prefix of them.
    by_offset: HashMap<i32, BTreeMap<i64, String>>,
    /// The highest `through_offset` seen per partition.
    judged: HashMap<i32, i64>,
}

impl Pending {
    /// A call about to be published; its answer comes on the receiver. An `event_id`
    /// already pending replaces the earlier wait (a retried call).
    pub fn register(&mut self, event_id: &str) -> oneshot::Receiver<Settled> {
        let (answer, rx) = oneshot::channel();
        self.forget(event_id);
        self.calls.insert(
            event_id.to_string(),
            Call {
                answer,
                at: None,
                held: None,
            },
        );
        rx
    }

    /// The call's delivery report: it landed at `offset` of `partition`.
    pub fn delivered(&mut self, event_id: &str, partition: i32, offset: i64) {
        let Some(call) = self.calls.get_mut(event_id) else {
            return;
        };
        call.at = Some((partition, offset));
        if self.judged.get(&partition).is_some_and(|&t| t > offset) {
            self.settle(event_id);
        } else {
            self.by_offset
                .entry(partition)
                .or_default()
                .insert(offset, event_id.to_string());
        }
    }

    /// A judged-through marker: every event of `partition` below `through` is judged.
    pub fn judged_through(&mut self, partition: i32, through: i64) {
        let best = self.judged.entry(partition).or_insert(through);
        *best = (*best).max(through);
        let Some(waiting) = self.by_offset.get_mut(&partition) else {
            return;
        };
        let still = waiting.split_off(&through);
        let done = std::mem::replace(waiting, still);
        for event_id in done.into_values() {
            self.settle(&event_id);
        }
    }

    /// A verdict read from the verdicts topic.
    pub fn verdict(&mut self, v: &Arc<Verdict>) {
        if !v.enforce {
            return; // observe mode: never the answer to a call
        }
        let Some(call) = self.calls.get_mut(&v.event_id) else {
            return;
        };
        if v.stops_the_call() {
            call.held = Some(Arc::clone(v));
            self.settle(&v.event_id.clone());
        } else if call
            .held
            .as_ref()
            .is_none_or(|h| h.action.rank() < v.action.rank())
        {
            call.held = Some(Arc::clone(v));
        }
    }

    /// The caller stopped waiting (its deadline): nothing more is kept for the call.
    pub fn forget(&mut self, event_id: &str) {
        if let Some(Call {
            at: Some((p, o)), ..
        }) = self.calls.remove(event_id)
        {
            if let Some(w) = self.by_offset.get_mut(&p) {
                w.remove(&o);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.calls.len()
    }

    fn settle(&mut self, event_id: &str) {
        if let Some(call) = self.calls.remove(event_id) {
            if let Some((p, o)) = call.at {
                if let Some(w) = self.by_offset.get_mut(&p) {
                    w.remove(&o);
                }
            }
            let answer = call.held.map_or(Settled::Judged, Settled::Verdict);
            let _ = call.answer.send(answer); // a caller gone at its deadline: nothing to do
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::verdict::Verdict;

    fn verdict(event: &str, action: &str, enforce: bool) -> Arc<Verdict> {
        let json = format!(
            r#"{{"verdict_id":"{action}{event}","session_id":"s","event_id":"{event}","action":"{action}","rule":"r","message":"{action} it","enforce":{enforce}}}"#
        );
        Arc::new(Verdict::parse(json.as_bytes()).unwrap())
    }

    fn answer(rx: &mut oneshot::Receiver<Settled>) -> Option<String> {
        match rx.try_recv().ok()? {
            Settled::Judged => Some("judged".into()),
            Settled::Verdict(v) => Some(v.action.as_str().into()),
        }
    }

    #[test]
    fn a_marker_past_the_offset_settles_with_no_verdict_and_one_before_it_does_not() {
        let mut p = Pending::default();
        let mut rx = p.register("e1");
        p.delivered("e1", 3, 10);
        p.judged_through(3, 10);
        assert_eq!(
            answer(&mut rx),
            None,
            "through 10 says nothing of offset 10"
        );
        p.judged_through(2, 99);
        assert_eq!(answer(&mut rx), None, "another partition's marker");
        p.judged_through(3, 11);
        assert_eq!(answer(&mut rx).as_deref(), Some("judged"));
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn a_marker_read_before_the_delivery_report_still_counts() {
        let mut p = Pending::default();
        let mut rx = p.register("e1");
        p.judged_through(0, 5);
        p.delivered("e1", 0, 4);
        assert_eq!(answer(&mut rx).as_deref(), Some("judged"));
    }

    #[test]
    fn a_block_settles_at_once_a_steer_waits_for_the_marker_and_observe_is_ignored() {
        let mut p = Pending::default();
        let mut blocked = p.register("b");
        let mut steered = p.register("s");
        p.delivered("b", 0, 1);
        p.delivered("s", 0, 2);
        p.verdict(&verdict("b", "abort", false));
        assert_eq!(answer(&mut blocked), None, "observe mode never answers");
        p.verdict(&verdict("b", "block", true));
        assert_eq!(answer(&mut blocked).as_deref(), Some("block"));
        p.verdict(&verdict("s", "steer", true));
        p.verdict(&verdict("s", "warn", true));
        assert_eq!(answer(&mut steered), None);
        p.judged_through(0, 3);
        assert_eq!(
            answer(&mut steered).as_deref(),
            Some("steer"),
            "the strongest held"
        );
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn a_call_forgotten_at_its_deadline_leaves_nothing_behind() {
        let mut p = Pending::default();
        let _rx = p.register("e");
        p.delivered("e", 1, 7);
        p.forget("e");
        assert_eq!(p.len(), 0);
        assert!(p.by_offset[&1].is_empty());
        p.verdict(&verdict("e", "block", true)); // late: ignored
        p.judged_through(1, 100);
    }
}
