//! A verdict as a runtime reads it: the fields it acts on, and the whole JSON to pass on.

use serde::Deserialize;
use serde_json::Value;

/// What the runtime is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Warn,
    Steer,
    Block,
    Abort,
    /// An action of a later contract version: never acted on.
    #[serde(other)]
    Unknown,
}

impl Action {
    /// Weakest first: an unknown action below warn, abort the strongest.
    pub fn rank(self) -> u8 {
        match self {
            Action::Unknown => 0,
            Action::Warn => 1,
            Action::Steer => 2,
            Action::Block => 3,
            Action::Abort => 4,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Unknown => "unknown",
            Action::Warn => "warn",
            Action::Steer => "steer",
            Action::Block => "block",
            Action::Abort => "abort",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Verdict {
    pub verdict_id: String,
    pub session_id: String,
    pub event_id: String,
    pub action: Action,
    pub rule: String,
    pub message: String,
    /// False: a rule in observe mode; never acted on (docs/contract.md, "Observe mode").
    pub enforce: bool,
    /// The verdict as the guard wrote it.
    pub raw: Value,
}

#[derive(Deserialize)]
struct Fields {
    verdict_id: String,
    session_id: String,
    event_id: String,
    action: Action,
    rule: String,
    message: String,
    /// Guards before observe mode did not write it: absent means enforced.
    #[serde(default = "enforced")]
    enforce: bool,
}

fn enforced() -> bool {
    true
}

impl Verdict {
    /// A verdict record's value; None for anything else (a later version's record).
    pub fn parse(bytes: &[u8]) -> Option<Verdict> {
        let raw: Value = serde_json::from_slice(bytes).ok()?;
        let f = Fields::deserialize(&raw).ok()?;
        Some(Verdict {
            verdict_id: f.verdict_id,
            session_id: f.session_id,
            event_id: f.event_id,
            action: f.action,
            rule: f.rule,
            message: f.message,
            enforce: f.enforce,
            raw,
        })
    }

    /// A verdict the runtime acts on instead of running the call: block or abort.
    pub fn stops_the_call(&self) -> bool {
        self.enforce && self.action.rank() >= Action::Block.rank()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_fields_and_keeps_the_rest() {
        let v = Verdict::parse(
            br#"{"v":1,"verdict_id":"ab","session_id":"s","event_id":"e","action":"block","rule":"tool.exact_repeat","message":"m","attempt":1,"evidence":{}}"#,
        )
        .unwrap();
        assert_eq!(v.action, Action::Block);
        assert!(v.enforce, "absent enforce reads as true");
        assert!(v.stops_the_call());
        assert_eq!(v.raw["attempt"], 1);
    }

    #[test]
    fn an_observed_block_stops_nothing_and_a_new_action_is_unknown() {
        let v = Verdict::parse(br#"{"verdict_id":"ab","session_id":"s","event_id":"e","action":"block","rule":"r","message":"m","enforce":false}"#).unwrap();
        assert!(!v.stops_the_call());
        let v = Verdict::parse(br#"{"verdict_id":"ab","session_id":"s","event_id":"e","action":"pause","rule":"r","message":"m"}"#).unwrap();
        assert_eq!(v.action, Action::Unknown);
        assert!(Verdict::parse(br#"{"v":1,"kind":"judged"}"#).is_none());
    }
}
