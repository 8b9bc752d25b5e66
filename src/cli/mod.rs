//! Command-line front ends: replay, rules, policy, check-config, topics (service commands live in
//! `service`).
pub mod acls;
pub mod feedback;
pub mod policy;
pub mod policy_command;
pub mod policy_diff;
pub mod rules_table;
pub mod topics;

use crate::config::Config;
use std::process::ExitCode;

/// Loads the configuration a command was given (or the defaults); an invalid one is
/// printed with every problem and is exit 2.
pub fn load_config(path: Option<&str>) -> Result<Config, ExitCode> {
    crate::config::load(path).map_err(|e| {
        eprintln!("loopguard: {e}");
        ExitCode::from(2)
    })
}
