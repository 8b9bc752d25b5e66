//! Verdicts the guard sends back to runtimes, the rule names and actions. Pure: no IO.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// What the runtime should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Warn,
    Steer,
    Block,
    Abort,
}

impl Action {
    pub const ALL: [Action; 4] = [Action::Warn, Action::Steer, Action::Block, Action::Abort];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Warn => "warn",
            Action::Steer => "steer",
            Action::Block => "block",
            Action::Abort => "abort",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

macro_rules! rules {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// Every rule the engine implements (see docs/rules.md).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Rule { $($variant),* }

        impl Rule {
            pub const ALL: [Rule; rules!(@count $($variant)*)] = [$(Rule::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self { $(Rule::$variant => $name),* }
            }

            pub fn from_name(name: &str) -> Option<Rule> {
                match name { $($name => Some(Rule::$variant),)* _ => None }
            }
        }
    };
    (@count $($x:ident)*) => { <[()]>::len(&[$(rules!(@unit $x)),*]) };
    (@unit $x:ident) => { () };
}

rules! {
    ExactRepeat => "tool.exact_repeat",
    FuzzyRepeat => "tool.fuzzy_repeat",
    Cycle => "tool.cycle",
    ErrorRepeat => "tool.error_repeat",
    RevertCycle => "tool.revert_cycle",
    NearDuplicate => "tool.near_duplicate",
    NoChange => "tool.no_change",
    NoProgress => "progress.no_progress",
    DiscoveryOnly => "progress.discovery_only",
    ToolRounds => "budget.tool_rounds",
    NearLimit => "budget.near_limit",
    SlowConvergence => "budget.slow_convergence",
    CompactionChurn => "budget.compaction_churn",
    RequiredTool => "expect.required_tool",
    ReasoningRepeat => "reasoning.repeat",
    VariantRepeat => "reasoning.variant_repeat",
    BlockRepeat => "reasoning.block_repeat",
    ReasoningIdle => "reasoning.idle",
    ReasoningOverflow => "reasoning.overflow",
    ContentRepeat => "content.repeat",
    AnswerRepeat => "content.answer_repeat",
    TurnTimeout => "turn.timeout",
}

impl Rule {
    pub fn index(self) -> usize {
        self as usize
    }

    /// True for the rules that find loops: every rule but the budget signals and the
    /// required-tool expectation.
    pub fn is_loop(self) -> bool {
        !matches!(
            self,
            Rule::NearLimit | Rule::SlowConvergence | Rule::CompactionChurn | Rule::RequiredTool
        )
    }
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Rule::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown rule `{name}`")))
    }
}

/// Optional instructions that come with a verdict.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Directives {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_tool_calls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_warning: Option<String>,
}

impl Directives {
    pub fn is_empty(&self) -> bool {
        self.reasoning_effort.is_none()
            && self.stop_tool_calls.is_none()
            && self.prefix_warning.is_none()
    }
}

/// One verdict (contract v1). `emitted_at` is set by the adapter that writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub v: u32,
    pub verdict_id: String,
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    pub event_id: String,
    pub ts: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emitted_at: Option<String>,
    pub action: Action,
    pub rule: Rule,
    pub message: String,
    #[serde(default, skip_serializing_if = "Directives::is_empty")]
    pub directives: Directives,
    pub attempt: u32,
    pub evidence: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `false` for a verdict in observe mode (the runtime must not act on it). This version
    /// has no observe mode: the engine always writes `true`; absent (older guards) reads as
    /// `true`.
    #[serde(default = "enforced")]
    pub enforce: bool,
    /// The policy that produced the verdict (`PolicySet::version`); empty when read from
    /// an older guard's verdict.
    #[serde(default)]
    pub policy_version: String,
    /// What the loop has cost so far, from its first event to this verdict (see
    /// `engine::spend`); absent on verdicts that are not about a loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_cost: Option<LoopCost>,
    /// When the loop began (event time), as the rule that found it saw it; read by the
    /// engine to compute `loop_cost`, then cleared: never on the wire.
    #[serde(skip)]
    pub loop_since_ms: Option<i64>,
}

fn enforced() -> bool {
    true
}

/// What a loop has cost since it began, from the `usage` runtimes report (contract:
/// `loop_cost`). Every part optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoopCost {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

/// Deterministic verdict id: the first 16 bytes of SHA-256 over (session, event, rule,
/// attempt), hex. The attempt is part of it because one event (a whole reasoning text sent
/// as one `final` chunk) can carry two escalation steps of the same rule.
pub fn verdict_id(session_id: &str, event_id: &str, rule: Rule, attempt: u32) -> String {
    let mut h = Sha256::new();
    for part in [session_id, event_id, rule.as_str(), &attempt.to_string()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = h.finalize();
    let mut id = String::with_capacity(32);
    for b in &digest[..16] {
        id.push(HEX[(b >> 4) as usize] as char);
        id.push(HEX[(b & 0xf) as usize] as char);
    }
    id
}

/// Cuts `s` to at most `max` chars (on a char boundary), for evidence spans.
pub fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_names_round_trip() {
        for r in Rule::ALL {
            assert_eq!(Rule::from_name(r.as_str()), Some(r));
        }
        assert_eq!(Rule::ALL.len(), 22);
    }

    #[test]
    fn verdict_id_is_deterministic_and_distinct() {
        let a = verdict_id("s", "e", Rule::ExactRepeat, 1);
        assert_eq!(a, verdict_id("s", "e", Rule::ExactRepeat, 1));
        assert_ne!(a, verdict_id("s", "e", Rule::FuzzyRepeat, 1));
        assert_ne!(a, verdict_id("s", "e", Rule::ExactRepeat, 2));
        assert_ne!(
            verdict_id("ab", "c", Rule::Cycle, 1),
            verdict_id("a", "bc", Rule::Cycle, 1)
        );
        assert_eq!(a.len(), 32);
    }

    #[test]
    fn clip_respects_char_boundaries() {
        assert_eq!(clip("持仓情况很好", 2), "持仓");
        assert_eq!(clip("ab", 5), "ab");
    }
}
