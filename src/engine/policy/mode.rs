//! A rule's mode: `enforce` (verdicts the runtime acts on), `observe` (verdicts written with
//! `enforce: false`, counted, never acted on) or `off` (nothing emitted). Pure.

use serde::{Deserialize, Serialize};

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Enforce,
    Observe,
    Off,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Enforce, Mode::Observe, Mode::Off];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Observe => "observe",
            Mode::Off => "off",
        }
    }

    pub fn is_enforce(&self) -> bool {
        *self == Mode::Enforce
    }

    /// A rule's own mode under a policy-wide `mode` (a tenant's or agent's, or the fleet's):
    /// the policy-wide mode is a ceiling, so `mode = "observe"` for a tenant guarantees that
    /// nothing of that tenant is enforced, and `off` silences every rule
    /// (docs/decisions.md (ba)).
    pub fn under(self, ceiling: Mode) -> Mode {
        self.max(ceiling)
    }
}

/// Where a rule's mode came from, for `loopguard rules`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeSource {
    /// Nothing set it: the rule's default (`enforce`).
    Default,
    /// The policy's global table (the config file's `[policy]`, or a published policy).
    Policy,
    /// A tenant's override.
    Tenant,
    /// An agent's override.
    Agent,
    /// An override for the (tenant, agent) pair.
    TenantAgent,
}

impl ModeSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ModeSource::Default => "default",
            ModeSource::Policy => "policy-file",
            ModeSource::Tenant => "tenant",
            ModeSource::Agent => "agent",
            ModeSource::TenantAgent => "tenant+agent",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_wide_mode_is_a_ceiling() {
        use Mode::*;
        assert_eq!(Enforce.under(Enforce), Enforce);
        assert_eq!(Enforce.under(Observe), Observe);
        assert_eq!(Observe.under(Enforce), Observe);
        assert_eq!(Off.under(Observe), Off);
        assert_eq!(Observe.under(Off), Off);
    }
}
