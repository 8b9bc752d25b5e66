//! Judged-through markers: the keyless record a stream thread writes to partition P of the
//! verdicts topic saying "every event of partition P below `through_offset` is judged, and
//! every verdict those events caused comes before me" (docs/contract.md). A runtime whose
//! event sits below a marker it has read, with no verdict for it, knows the answer is "no
//! verdict" at once, instead of at its deadline.

use rdkafka::message::{Header, OwnedHeaders};
use serde::{Deserialize, Serialize};

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
}

impl Judged {
    /// Notes the event at `offset` judged (verdicts written, or dead-lettered).
    pub fn judged(&mut self, offset: i64) {
        self.through = Some(self.through.map_or(offset + 1, |t| t.max(offset + 1)));
    }

    /// The `through_offset` of the marker to write now, if one is owed; noted as written.
    pub fn take_due(&mut self) -> Option<i64> {
        let through = self.through?;
        if self.marked.is_some_and(|m| m >= through) {
            return None;
        }
        self.marked = Some(through);
        Some(through)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_covers_every_judged_event_once() {
        let mut j = Judged::default();
        assert_eq!(j.take_due(), None);
        j.judged(7);
        j.judged(8);
        assert_eq!(j.take_due(), Some(9));
        assert_eq!(j.take_due(), None, "nothing new judged: no second marker");
        j.judged(9);
        assert_eq!(j.take_due(), Some(10));
    }

    #[test]
    fn markers_never_go_back() {
        let mut j = Judged::default();
        j.judged(20);
        assert_eq!(j.take_due(), Some(21));
        // A record processed alone again after a retry lies below the last marker.
        j.judged(15);
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
