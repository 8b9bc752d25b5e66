//! Judged-through markers: the keyless record a stream thread writes to partition P of the
//! verdicts topic saying "every event of partition P below `through_offset` is judged, and
//! every verdict those events caused comes before me" (docs/contract.md). A runtime whose
//! event sits below a marker it has read, with no verdict for it, knows the answer is "no
//! verdict" at once, instead of at its deadline.

use rdkafka::message::{Header, OwnedHeaders};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The header that tells a marker from a verdict without decoding the value.
pub const KIND_HEADER: &str = "loopguard-kind";
/// `KIND_HEADER`'s value on a marker.
pub const JUDGED: &str = "judged";

/// A marker's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub v: u8,
    pub kind: String,
    pub partition: i32,
    pub through_offset: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emitted_at: Option<String>,
}

impl Marker {
    pub fn new(partition: i32, through_offset: i64, emitted_at: Option<String>) -> Self {
        Marker {
            v: 1,
            kind: JUDGED.to_string(),
            partition,
            through_offset,
            emitted_at,
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a marker always serializes")
    }
}

/// True for the events a runtime may be waiting on the answer to: a call it is about to
/// make (`Guard.check`, the hooks' PreToolUse, the MCP proxy) and a result whose repeated
/// error a steer answers (the hooks' PostToolUse). Their bursts get markers at once; a
/// read_committed reader sees any marker only at the commit, so this keeps the
/// read_uncommitted path's answers within a burst (docs/decisions.md (go)).
pub fn awaited(body: &crate::engine::event::Body) -> bool {
    use crate::engine::event::Body;
    matches!(body, Body::ToolCall { .. } | Body::ToolResult { .. })
}

/// The headers every marker carries.
pub fn headers() -> OwnedHeaders {
    OwnedHeaders::new_with_capacity(1).insert(Header {
        key: KIND_HEADER,
        value: Some(JUDGED.as_bytes()),
    })
}

/// One partition's marker bookkeeping: how far its events are judged, and how far that
/// has been written.
#[derive(Debug, Default)]
pub struct Judged {
    /// The offset after the last event judged.
    through: Option<i64>,
    /// The `through_offset` of the last marker written.
    marked: Option<i64>,
    /// The verdicts topics whose events were judged since the last marker: each gets the
    /// next one (one topic unless tenants have their own, `tenant_topics`).
    owed: Vec<Arc<str>>,
}

impl Judged {
    /// Notes the event at `offset` judged (verdicts written, or dead-lettered); `topic`
    /// takes its verdicts and so its marker.
    pub fn judged(&mut self, offset: i64, topic: &Arc<str>) {
        self.through = Some(self.through.map_or(offset + 1, |t| t.max(offset + 1)));
        if !self.owed.iter().any(|t| t == topic) {
            self.owed.push(topic.clone());
        }
    }

    /// The `through_offset` of the marker to write now and the topics that owe it, if one
    /// is owed; noted as written.
    pub fn take_due(&mut self) -> Option<(i64, Vec<Arc<str>>)> {
        let owed = std::mem::take(&mut self.owed);
        let through = self.through?;
        if self.marked.is_some_and(|m| m >= through) {
            return None;
        }
        self.marked = Some(through);
        Some((through, owed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(j: &mut Judged) -> Option<(i64, Vec<String>)> {
        j.take_due()
            .map(|(t, topics)| (t, topics.iter().map(|t| t.to_string()).collect()))
    }

    #[test]
    fn a_marker_covers_every_judged_event_once() {
        let v: Arc<str> = Arc::from("agent-verdicts");
        let mut j = Judged::default();
        assert_eq!(j.take_due(), None);
        j.judged(7, &v);
        j.judged(8, &v);
        assert_eq!(due(&mut j), Some((9, vec!["agent-verdicts".into()])));
        assert_eq!(j.take_due(), None, "nothing new judged: no second marker");
        j.judged(9, &v);
        assert_eq!(due(&mut j), Some((10, vec!["agent-verdicts".into()])));
    }

    #[test]
    fn each_topic_with_judged_events_gets_the_marker() {
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("v.acme"), Arc::from("v.beta"));
        let mut j = Judged::default();
        j.judged(1, &a);
        j.judged(2, &b);
        j.judged(3, &a);
        assert_eq!(
            due(&mut j),
            Some((4, vec!["v.acme".into(), "v.beta".into()]))
        );
        j.judged(4, &b);
        assert_eq!(
            due(&mut j),
            Some((5, vec!["v.beta".into()])),
            "acme has nothing new"
        );
    }

    #[test]
    fn markers_never_go_back() {
        let v: Arc<str> = Arc::from("agent-verdicts");
        let mut j = Judged::default();
        j.judged(20, &v);
        assert_eq!(due(&mut j), Some((21, vec!["agent-verdicts".into()])));
        // A record processed alone again after a retry lies below the last marker.
        j.judged(15, &v);
        assert_eq!(j.take_due(), None);
    }

    #[test]
    fn the_wire_form_is_the_contracts() {
        let m = Marker::new(3, 42, Some("2026-12-01T00:00:00.000Z".into()));
        assert_eq!(
            String::from_utf8(m.to_json()).unwrap(),
            r#"{"v":1,"kind":"judged","partition":3,"through_offset":42,"emitted_at":"2026-12-01T00:00:00.000Z"}"#
        );
    }
}
